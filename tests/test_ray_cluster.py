"""The nightly flow on a real two-node Ray cluster, with its checks before work.

A head and a second node started with `ray start --block` (separate processes, one CPU each; the
second in its own working directory, which does not hold the drop), their S3 settings in their
own environment as on real nodes, RAY_AUTH_MODE=disabled on every process (Ray 2.60 turns token
authentication on when ~/.ray/auth_token exists, and a node without the token cannot join).

- On S3 (moto's server) the day completes and its job tasks ran on both nodes.
- A local folder as source is refused before any task, with one line, leaving nothing behind.
- An unreachable S3 endpoint is found by one call before any task, with one line naming the URL.
- A day without a drop fails in the stage `list day`, with one line.
- Listing retries with backoff, then fails with one line naming the URL.

Only the processes started here are stopped (their process groups), never `ray stop`.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from conftest import _free_port, s3_env
from process_groups import stop_process_groups

import ray
import prefect  # noqa: F401  (needed: a missing dependency fails, not skips)

pytestmark = pytest.mark.slow

RAY = str(Path(sys.executable).parent / "ray")
DATE = "2026-11-20"


def _free_ports(count: int) -> list[int]:
    """Ports free now and distinct: each socket stays bound until all are chosen (one at a time,
    the system may hand out the same port twice)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _ray_start(env: dict, cwd: str, temp_dir: str, *args: str, ports: list[int] | None = None) -> subprocess.Popen:
    """`ray start --block` with its output in <cwd>/ray-start-<n>.log (named in failures)."""
    names = ["--dashboard-agent-listen-port", "--metrics-export-port", "--runtime-env-agent-port",
             "--dashboard-agent-grpc-port", "--node-manager-port", "--object-manager-port"]
    fixed = [str(x) for name, port in zip(names, ports or _free_ports(len(names))) for x in (name, port)]
    log = tempfile.NamedTemporaryFile("wb", prefix="ray-start-", suffix=".log", dir=cwd, delete=False)
    with log:
        proc = subprocess.Popen([RAY, "start", "--block", "--num-cpus", "1", "--node-ip-address", "127.0.0.1",
                                 "--disable-usage-stats", "--temp-dir", temp_dir, *fixed, *args],
                                env=env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    proc.log = log.name
    return proc


def _head(env: dict, temp: str) -> tuple[subprocess.Popen, int]:
    """A head whose GCS accepts connections. A port picked free can be taken before Ray binds
    it, and the head then exits at once: such a start is tried again with other ports."""
    for attempt in range(3):
        port, client, *ports = _free_ports(8)
        head = _ray_start(env, temp, temp, "--head", "--port", str(port), "--include-dashboard", "false",
                          "--ray-client-server-port", str(client), ports=ports)
        deadline = time.monotonic() + 60
        while head.poll() is None and time.monotonic() < deadline:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    return head, port
            time.sleep(0.2)
        stop_process_groups([head])
    tail = Path(head.log).read_text(errors="replace")[-2000:]
    raise AssertionError(f"no Ray head came up in 3 tries; the last one's output ({head.log}):\n{tail}")


@pytest.fixture(scope="module")
def cluster(s3_server):
    """RAY_ADDRESS of a running head + worker node, both alive."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(s3_env(s3_server), RAY_AUTH_MODE="disabled")
    # Short: Ray's socket paths live under it and must stay below 107 characters.
    temp = tempfile.mkdtemp(prefix="rc-", dir="/tmp")
    elsewhere = tempfile.mkdtemp(prefix="rc-node2-")
    head, port = _head(env, temp)
    procs = [head]
    try:
        procs.append(_ray_start(env, elsewhere, temp, "--address", f"127.0.0.1:{port}"))
        address = f"127.0.0.1:{port}"
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("RAY_ADDRESS", address)
            mp.setenv("RAY_AUTH_MODE", "disabled")
            _wait_for_nodes(2, procs)
            yield address
    finally:
        ray.shutdown()
        stop_process_groups(procs)
        for folder in (temp, elsewhere):
            shutil.rmtree(folder, ignore_errors=True)


def _wait_for_nodes(count: int, procs: list[subprocess.Popen]) -> None:
    ray.shutdown()
    _assert_running(procs)  # ray.init would wait long for a head that is gone
    ray.init(address=os.environ["RAY_ADDRESS"], log_to_driver=False)
    deadline = time.monotonic() + 60
    while sum(n["Alive"] for n in ray.nodes()) < count:
        _assert_running(procs)
        assert time.monotonic() < deadline, f"{count} Ray nodes not alive within 60 s"
        time.sleep(0.5)


def _assert_running(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        if proc.poll() is not None:
            tail = Path(proc.log).read_text(errors="replace")[-2000:]
            raise AssertionError(f"`ray start` exited with {proc.returncode}; its output ({proc.log}):\n{tail}")


def test_nightly_runs_on_both_nodes(cluster, s3, tmp_path):
    from flows.nightly import nightly
    from tools.make_drop import make_drop

    for bucket in ("cluster-drops", "cluster-warehouse"):
        s3.mkdir(bucket)
    make_drop("s3://cluster-drops/fleet", DATE, generated_jobs=4, copies_of_real=0, corrupt=False)
    sweep = tmp_path / "one-system.yaml"
    sweep.write_text("systems:\n  - {name: ring-native, network: native-ring, "
                     f"system: {Path(__file__).resolve().parents[1]}/pipeline/sweeps/ring_system.json}}\n")
    summary = nightly(DATE, "s3://cluster-drops/fleet", "s3://cluster-warehouse/wh", str(sweep), synthetic_jobs=0)
    assert summary["jobs_converted"] == 4 and summary["rejects"] == 0
    alive = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
    assert set(summary["ray_nodes"]) == alive and len(alive) == 2  # job tasks ran on both nodes
    from pipeline import tables

    assert tables.read_day("s3://cluster-warehouse/wh", "traces", DATE).num_rows == summary["ranks"]


def test_a_local_folder_is_refused_on_a_cluster(cluster, tmp_path):
    from prefect.exceptions import FailedRun

    from flows.nightly import nightly

    (tmp_path / "drops" / DATE / "job").mkdir(parents=True)
    with pytest.raises(FailedRun) as refused:
        nightly(DATE, str(tmp_path / "drops"), str(tmp_path / "warehouse"))
    assert str(refused.value) == (f"preflight: source {tmp_path / 'drops'} is a local folder, but the Ray "
                                  "cluster has 2 nodes that do not see it: use storage every node reaches (s3://...)")
    assert not (tmp_path / "warehouse").exists()  # refused before any task wrote anything


def test_an_unreachable_endpoint_is_found_before_work(cluster, s3, monkeypatch):
    import fsspec
    import s3fs

    from flows.nightly import nightly

    monkeypatch.setitem(fsspec.config.conf, "s3", {**fsspec.config.conf["s3"],
                                                   "endpoint_url": f"http://127.0.0.1:{_free_port()}"})
    s3fs.S3FileSystem.clear_instance_cache()
    from prefect.exceptions import FailedRun

    try:
        with pytest.raises(FailedRun) as refused:
            nightly(DATE, "s3://cluster-drops/fleet", "s3://cluster-warehouse/wh")
    finally:
        s3fs.S3FileSystem.clear_instance_cache()
    message = str(refused.value)
    assert message.startswith("preflight: source s3://cluster-drops/fleet cannot be reached: EndpointConnectionError")
    assert "\n" not in message


def test_a_day_without_a_drop_fails_in_one_line(cluster, s3):
    """The stage that stopped, and why: the run's message, as the operator sees it."""
    from prefect.exceptions import FailedRun

    from flows.nightly import nightly

    s3.mkdir("cluster-empty")
    with pytest.raises(FailedRun) as failed:
        nightly("2026-11-19", "s3://cluster-empty/fleet", "s3://cluster-empty/wh")
    assert str(failed.value) == "list day: s3://cluster-empty/fleet/2026-11-19: no drop for 2026-11-19"
    assert not s3.exists("cluster-empty/wh")


def test_listing_is_retried_then_fails_in_one_line(s3, monkeypatch):
    """An endpoint that stays down: the listing is tried again after each delay, then one line.

    botocore is told not to retry on its own here, so that each attempt takes a few seconds.
    """
    import fsspec
    import s3fs

    from pipeline.nightly.drop import list_day
    from pipeline.layout import StorageError, retried

    monkeypatch.setitem(fsspec.config.conf, "s3", {**fsspec.config.conf["s3"],
                                                   "endpoint_url": f"http://127.0.0.1:{_free_port()}",
                                                   "config_kwargs": {"retries": {"max_attempts": 1}}})
    s3fs.S3FileSystem.clear_instance_cache()
    started = time.monotonic()
    try:
        with pytest.raises(StorageError) as failed:
            retried("listing", "s3://cluster-drops/fleet", lambda: list_day("s3://cluster-drops/fleet", DATE),
                    delays=(0.5, 1))
    finally:
        s3fs.S3FileSystem.clear_instance_cache()
    assert time.monotonic() - started >= 1.5  # both delays were waited
    assert str(failed.value).startswith("listing s3://cluster-drops/fleet failed 3 times: EndpointConnectionError: ")
    assert "\n" not in str(failed.value)
