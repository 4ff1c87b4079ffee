"""Issue 41, item 2: faults of the storage are not bad input. A full disk, a store that forbids,
a bucket gone or a timeout are told apart from input errors, retried only when they may pass,
end the run in one line naming the storage and what was written, and reject no input. Runs of
one day are serialised by a lock in the warehouse; a killed run's helpers end with it."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from chakra_core.convert.chakra import copy as chakra_copy

from chakra_core.errors import ChakraError
from pipeline.nightly import jobs as jobs_module
from pipeline import layout
from pipeline.nightly.jobs import process_job
from pipeline.day_lock import DayLocked, day_lock, lock_url
from pipeline.layout import StorageError, retried, storage_fault
from test_pipeline_accounting import DATE, SOURCE, WAREHOUSE, chakra_job, warehouse_files
from pipeline.cluster import descendants, process_start
from pipeline.nightly.drop import list_day

PROJECT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("exc, kind", [
    (OSError(errno.ENOSPC, "No space left on device"), "permanent"),
    (OSError(errno.EDQUOT, "Disk quota exceeded"), "permanent"),
    (PermissionError(errno.EACCES, "Permission denied"), "permanent"),
    (OSError(errno.EROFS, "Read-only file system"), "permanent"),
    (FileNotFoundError(errno.ENOENT, "The specified bucket does not exist"), "permanent"),
    (TimeoutError("read timed out"), "transient"),
    (ConnectionResetError("connection reset by peer"), "transient"),
    (OSError(errno.ETIMEDOUT, "Connection timed out"), "transient"),
    (ValueError("byte 3: not a trace"), None),
    (ChakraError("x.et: node 4: bad"), None),
    (FileNotFoundError(errno.ENOENT, "no such file"), None),
    (NotADirectoryError(errno.ENOTDIR, "Not a directory"), "permanent"),
], ids=lambda v: type(v).__name__ if isinstance(v, BaseException) else str(v))
def test_storage_faults_are_told_from_input_errors(exc, kind):
    assert storage_fault(exc) == kind


def test_a_full_disk_is_not_retried_and_is_one_line(monkeypatch):
    calls, slept = [], []
    monkeypatch.setattr(layout.time, "sleep", slept.append)

    def full():
        calls.append(1)
        raise OSError(errno.ENOSPC, "No space left on device", "/wh/tables/x/part-0.parquet")

    with pytest.raises(StorageError) as info:
        retried("writing", "file:///wh", full)
    assert len(calls) == 1 and not slept
    assert str(info.value) == ("writing file:///wh: No space left on device [ENOSPC] (/wh/tables/x/part-0.parquet)")


def test_a_timeout_is_retried_then_one_line(monkeypatch):
    monkeypatch.setattr(layout.time, "sleep", lambda s: None)
    calls = []

    def slow():
        calls.append(1)
        raise TimeoutError("read timed out")

    with pytest.raises(StorageError, match="failed 4 times: TimeoutError: read timed out"):
        retried("listing", "s3://b/drops", slow)
    assert len(calls) == 4


@pytest.mark.parametrize("fault", [OSError(errno.ENOSPC, "No space left on device"),
                                   PermissionError(errno.EACCES, "Permission denied")], ids=["ENOSPC", "EACCES"])
def test_a_storage_fault_in_a_job_rejects_none_of_its_files(memfs, monkeypatch, fault):
    """Before: the good inputs landed in rejects with `[Errno 28] No space left on device`."""
    from tools import make_drop as md  # noqa: F401  (chakra_job's generator)

    chakra_job(SOURCE, "j", {"j.0.et": 0, "j.1.et": 1, "j.2.et": 2, "j.3.et": 3})

    def failing(*args, **kwargs):
        raise fault

    monkeypatch.setattr(chakra_copy, "open_output", failing)  # the Chakra ETs' copy (convert/chakra/copy.py)
    job = next(j for j in list_day(SOURCE, DATE)[0] if j.job_id == "j")
    with pytest.raises(StorageError) as info:
        process_job(job, DATE, WAREHOUSE, "r1")
    message = str(info.value)
    assert "\n" not in message and WAREHOUSE in message and "job j" in message
    assert errno.errorcode[fault.errno] in message
    assert not [p for p in warehouse_files() if not p.startswith(".staging")]


def test_one_run_of_a_day_at_a_time(memfs):
    with day_lock(WAREHOUSE, DATE):
        with pytest.raises(DayLocked, match=f"another run of {DATE} holds the warehouse's lock"):
            with day_lock(WAREHOUSE, DATE):
                pass
    with day_lock(WAREHOUSE, DATE):  # released: the next run goes
        pass
    fs, path = layout.filesystem(lock_url(WAREHOUSE, DATE))
    assert not fs.exists(path)


def test_a_dead_runs_lock_is_taken_over(tmp_path):
    warehouse = tmp_path.as_uri()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    lock = Path(layout.filesystem(lock_url(warehouse, DATE))[1])
    lock.parent.mkdir(parents=True)
    import socket

    lock.write_text(json.dumps({"host": socket.gethostname(), "pid": int(dead.stdout), "since": time.time()}))
    with day_lock(warehouse, DATE):
        assert json.loads(lock.read_text())["pid"] == os.getpid()
    assert not lock.exists()


@pytest.mark.slow
def test_the_lock_is_exclusive_on_s3(s3):
    s3.mkdir("chakra-locks")
    with day_lock("s3://chakra-locks/wh", DATE):
        with pytest.raises(DayLocked):
            with day_lock("s3://chakra-locks/wh", DATE):
                pass
    assert not s3.exists(f"chakra-locks/wh/.locks/date={DATE}.json")


def _alive(pid: int) -> bool:
    """Running, not a zombie nor a process being torn down (its command line already gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return state != "Z" and bool(command)


@pytest.mark.slow
def test_a_killed_run_takes_its_ray_and_prefect_server_with_it(tmp_path):
    """SIGTERM (what a scheduler or `kill` sends) ends the run's Ray and Prefect's temporary server too."""
    from test_pipeline import make_small_drop

    make_small_drop(tmp_path / "source", DATE)
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "prefect"), "RAY_AUTH_MODE": "disabled",
           "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "180"}  # a loaded machine starts it slowly
    env.pop("PREFECT_API_URL", None)
    run = subprocess.Popen([sys.executable, "-m", "flows.nightly", "--date", DATE, "--source",
                            str(tmp_path / "source"), "--warehouse", str(tmp_path / "wh"), "--num-cpus", "1"],
                           cwd=PROJECT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline, helpers = time.monotonic() + 240, set()
    while time.monotonic() < deadline and run.poll() is None:
        helpers |= descendants(run.pid)
        if (tmp_path / "wh" / ".locks").exists() and len(helpers) >= 3:  # Ray's processes are up and work began
            break
        time.sleep(0.5)
    assert run.poll() is None, run.stderr.read().decode()[-2000:]
    helpers |= descendants(run.pid)
    run.send_signal(signal.SIGTERM)
    run.wait(timeout=60)
    said = run.stderr.read().decode()
    assert (run.returncode, said.splitlines()[-1]) == (130, "nightly: stopped by SIGTERM"), said[-3000:]
    # The issue saw Ray's agents and Prefect's server alive long after (they never ended). Ending them
    # takes seconds: Ray's processes and Prefect's uvicorn stop gracefully, slowly on a loaded 2-core
    # machine (a whole suite beside it), so they get 30 s to go.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(_alive(p) for p in helpers):
        time.sleep(0.5)
    left = {p: Path(f"/proc/{p}/cmdline").read_bytes()[:80] for p in helpers if _alive(p)}
    for p in left:  # never leave them to the next test
        os.kill(p, signal.SIGKILL)
    assert not left, left
    assert not (tmp_path / "wh" / ".locks" / f"date={DATE}.json").exists()  # the lock went with the run


@pytest.mark.slow
def test_a_full_warehouse_ends_the_night_in_one_line_and_rejects_nothing(tmp_path, monkeypatch):
    """Before: the run died with a 147-line traceback after 9 of 10 tables, ENOSPC retried for 15 s."""
    import ray
    from prefect.exceptions import FailedRun

    from flows import nightly as nightly_module
    from pipeline import tables
    from pipeline.cluster import start_ray
    from test_pipeline import DATE as DAY, make_small_drop

    from pyiceberg.catalog.sql import SqlCatalog

    make_small_drop(tmp_path / "source", DAY)
    real_commit, calls = SqlCatalog.commit_table, []

    def full(catalog, table, requirements, updates):
        calls.append(table.name()[-1])
        if table.name()[-1] == "fidelity":
            raise OSError(errno.ENOSPC, "No space left on device", "tables/fidelity/metadata")
        return real_commit(catalog, table, requirements, updates)

    monkeypatch.setattr(SqlCatalog, "commit_table", full)
    ray.shutdown()
    start_ray(num_cpus=2)
    try:
        with pytest.raises(FailedRun) as info:
            nightly_module.nightly(DAY, (tmp_path / "source").as_uri(), (tmp_path / "wh").as_uri(), synthetic_jobs=0)
    finally:
        ray.shutdown()
    message = str(info.value)
    assert calls.count("fidelity") == 1  # a full disk is not retried
    order = list(tables.TABLES)
    assert "No space left on device [ENOSPC]" in message
    assert f"{order.index('fidelity')} of {len(order)} tables committed" in message
    assert "no input was rejected" in message and "\n" not in message
    rejects = tables.read_day((tmp_path / "wh").as_uri(), "rejects", DAY).to_pylist()
    assert not any("space" in r["reason"] for r in rejects)
    assert not (tmp_path / "wh" / ".locks" / f"date={DAY}.json").exists()  # released


def _lock_file(warehouse: str) -> Path:
    lock = Path(layout.filesystem(lock_url(warehouse, DATE))[1])
    lock.parent.mkdir(parents=True, exist_ok=True)
    return lock


@pytest.mark.parametrize("held", [
    {"since": float("nan")}, {"since": 1e20}, {"since": "yesterday"}, {"pid": 2**70}, {"pid": True}, {"host": 7}])
def test_a_lock_of_damaged_fields_is_one_line_then_taken_over(tmp_path, held):
    """Issue 47: `since` NaN, 1e20 or a string, or a pid of 2**70, crashed the night with a
    traceback and left the lock behind."""
    import socket

    lock = _lock_file(tmp_path.as_uri())
    lock.write_text(json.dumps({"host": socket.gethostname(), "pid": os.getpid(), "since": time.time(), **held},
                               allow_nan=True))
    with pytest.raises(DayLocked, match=r"a lock that cannot be read \(not a lock's fields\), written [0-9]+ s ago"):
        with day_lock(tmp_path.as_uri(), DATE):
            pass
    old = time.time() - 120  # a minute is a lock writer's grace: then it is a dead run's
    os.utime(lock, (old, old))
    with day_lock(tmp_path.as_uri(), DATE):
        assert json.loads(lock.read_text())["pid"] == os.getpid()
    assert not lock.exists()


def test_a_lock_of_a_live_unrelated_process_is_taken_over(tmp_path):
    """Issue 47: a lock naming a live process of this host that did not take it (its pid reused)
    refused the day for 24 hours."""
    import socket

    lock = _lock_file(tmp_path.as_uri())
    lock.write_text(json.dumps({"host": socket.gethostname(), "pid": os.getppid(), "since": time.time(),
                                "started": "another-boot:12345"}))
    with day_lock(tmp_path.as_uri(), DATE):
        assert json.loads(lock.read_text())["token"]
    lock.write_text(json.dumps({"host": socket.gethostname(), "pid": os.getpid(), "since": time.time(),
                                "started": process_start(os.getpid())}))
    with pytest.raises(DayLocked, match=f"host '{socket.gethostname()}', pid {os.getpid()}, since "):
        with day_lock(tmp_path.as_uri(), DATE):  # the process that took it, alive: refused
            pass


def test_a_lock_written_over_a_day_ago_is_taken_over_whatever_it_says(tmp_path):
    """A lock file two days old that claims to be written now by this live process: its `since`
    is data, the store's time of writing is not; the day is not refused for another day."""
    import socket

    lock = _lock_file(tmp_path.as_uri())
    lock.write_text(json.dumps({"host": socket.gethostname(), "pid": os.getpid(), "since": time.time(),
                                "started": process_start(os.getpid())}))
    then = time.time() - 2 * 24 * 3600
    os.utime(lock, (then, then))
    with day_lock(tmp_path.as_uri(), DATE):
        assert json.loads(lock.read_text())["token"]


@pytest.mark.parametrize("kind", ["folder", "fifo"])
def test_something_else_in_the_locks_place_is_one_line(tmp_path, kind):
    """Issue 47: a folder in the lock's place was a traceback, a FIFO hung the night."""
    lock = _lock_file(tmp_path.as_uri())
    lock.mkdir() if kind == "folder" else os.mkfifo(lock)
    started = time.monotonic()
    with pytest.raises(DayLocked, match="is not a lock .a folder, FIFO or device in the lock's place.: remove it"):
        with day_lock(tmp_path.as_uri(), DATE):
            pass
    assert time.monotonic() - started < 5


def test_prefects_temporary_server_gets_time_to_start_beside_another_night():
    """Issue 47: a second night started 4 s after a first died with "Timed out while attempting to
    connect to ephemeral Prefect API server" (Prefect gives its temporary server 20 s); a setting
    made outside is kept."""
    code = ("import flows.nightly; from prefect.settings import get_current_settings; "
            "print(get_current_settings().server.ephemeral.startup_timeout_seconds)")
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert run.stdout.split() == ["120"], run.stderr
    env["PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"] = "33"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert run.stdout.split() == ["33"], run.stderr


@pytest.mark.slow
def test_a_killed_night_leaves_nothing_of_its_own_running(tmp_path):
    """Issue 47: after `kill -9` of a run, Ray's processes and Prefect's server were still alive
    15 s later (no exit handler runs): the run's caretaker (pipeline/caretaker.py) ends them."""
    code = ("import time; from pipeline.cluster import start_ray; start_ray(1); "
            "import subprocess, sys; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); "
            "print('ready', flush=True); time.sleep(600)")
    driver = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                              cwd=Path(__file__).resolve().parents[1])
    try:
        assert driver.stdout.readline().strip() == "ready"
        time.sleep(2)  # (the caretaker looks every second)
        started = descendants(driver.pid)
        assert len(started) >= 3  # Ray's processes, the sleeper, the caretaker
        driver.kill()
        driver.wait()
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and [p for p in started if _alive(p)]:
            time.sleep(0.5)
        assert not [p for p in started if _alive(p)]
    finally:
        for pid in [driver.pid, *descendants(driver.pid)]:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def test_a_full_warehouse_while_a_job_writes_its_rows_is_a_storage_fault(memfs, monkeypatch):
    """Issue 47: a full disk met where a worker writes its job's rows is one line (StorageError),
    not Ray's stack frames nor a rejected job."""
    import ray

    from pipeline.nightly import job_digest, run

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", "tables/traces/data/x.parquet")

    monkeypatch.setattr(job_digest, "write_rows", full)
    chakra_job(SOURCE, "j", {"j.0.et": 0, "j.1.et": 1})
    job = list_day(SOURCE, DATE)[0][0]
    ray.shutdown()
    try:
        with pytest.raises(StorageError, match=r"storage failed while the rows of job j were written to the "
                                               r"warehouse .*No space left on device \[ENOSPC\]"):
            run._process_remote(job, DATE, WAREHOUSE, "r", 1 << 40, None)
    finally:
        ray.shutdown()
