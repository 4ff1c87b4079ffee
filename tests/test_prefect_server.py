"""deploy/prefect.yaml on a real Prefect server: the schedule fires, and a worker runs the flow.

As an operator would, with the installed `prefect` command: `prefect server start` on
127.0.0.1 (its own PREFECT_HOME, so its own SQLite database), `prefect work-pool create`,
`prefect deploy --all --prefect-file deploy/prefect.yaml`. The server's scheduler (its loop
shortened to 1 s) must then create the nightly deployment's scheduled runs at 02:00 UTC; under
SQLAlchemy 2.1 it failed every loop and created none. Then `prefect worker start --run-once`
runs one flow run of the deployment, source and warehouse in moto's S3 server, to COMPLETED;
its tables are there and the server lists the day's stages as its task runs.

Every process is started in its own session and stopped by its process group (terminate, then
kill), so nothing else on the machine is touched.
"""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from conftest import _free_port

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
PREFECT = str(Path(sys.executable).parent / "prefect")
POOL = "chakra-pool"  # deploy/prefect.yaml's work pool
DATE = "2026-11-20"


def start(args: list[str], env: dict, log: Path) -> subprocess.Popen:
    with open(log, "wb") as out:
        return subprocess.Popen(args, env=env, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def stop(proc: subprocess.Popen) -> None:
    """The process and whatever it started (its session's group): SIGTERM, then SIGKILL."""
    for sig, grace in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
        if proc.poll() is not None:
            break
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            continue


def wait_for(what: str, probe, timeout: float, log: Path | None = None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if result := probe():
            return result
        time.sleep(0.5)
    tail = log.read_text()[-3000:] if log and log.exists() else ""
    pytest.fail(f"{what}: not within {timeout:.0f} s\n{tail}")


def cli(env: dict, *args: str) -> str:
    done = subprocess.run([PREFECT, "--no-prompt", *args], env=env, cwd=REPO, capture_output=True, text=True,
                          timeout=90)
    assert done.returncode == 0, f"prefect {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture
def server(tmp_path, s3_server):
    from conftest import s3_env

    port = _free_port()
    api = f"http://127.0.0.1:{port}/api"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "RAY_"))}
    env.update(s3_env(s3_server), PREFECT_HOME=str(tmp_path / "prefect-home"), PREFECT_API_URL=api,
               PREFECT_SERVER_ANALYTICS_ENABLED="false", PREFECT_SERVER_SERVICES_SCHEDULER_LOOP_SECONDS="1",
               PREFECT_WORKER_QUERY_SECONDS="1", CHAKRA_FLEET_DIR=str(REPO), RAY_AUTH_MODE="disabled")
    log = tmp_path / "server.log"
    proc = start([PREFECT, "server", "start", "--host", "127.0.0.1", "--port", str(port)], env, log)
    try:
        wait_for("prefect server health", lambda: _healthy(api), 60, log)
        yield env, httpx.Client(base_url=api, timeout=10)
    finally:
        stop(proc)


def _healthy(api: str) -> bool:
    try:
        return httpx.get(f"{api}/health", timeout=1).status_code == 200
    except httpx.TransportError:
        return False


def _runs(client: httpx.Client, deployment_id: str) -> list[dict]:
    body = {"flow_runs": {"deployment_id": {"any_": [deployment_id]}}, "sort": "EXPECTED_START_TIME_ASC"}
    response = client.post("/flow_runs/filter", json=body)
    response.raise_for_status()
    return response.json()


def test_schedule_fires_and_a_worker_completes_a_run(server, s3, tmp_path):
    from tools.make_drop import make_drop

    env, client = server
    cli(env, "work-pool", "create", POOL, "--type", "process")
    cli(env, "deploy", "--all", "--prefect-file", "deploy/prefect.yaml")
    deployment = client.get("/deployments/name/nightly/nightly").json()
    parameters = deployment["parameter_openapi_schema"]["properties"]
    assert parameters["source"]["default"] == "out/object-store/drops"  # real defaults, not None
    assert parameters["warehouse"]["default"] == "out/warehouse" and parameters["representatives"]["default"] == 8

    scheduled = wait_for("scheduled runs of nightly/nightly",
                         lambda: [r for r in _runs(client, deployment["id"]) if r["state_type"] == "SCHEDULED"], 30,
                         tmp_path / "server.log")  # under SQLAlchemy 2.1: "Can't evaluate bulk DML statement"
    times = [dt.datetime.fromisoformat(r["expected_start_time"]) for r in scheduled]
    assert all((t.hour, t.minute) == (2, 0) and t.utcoffset() == dt.timedelta(0) for t in times)
    assert times[0] > dt.datetime.now(dt.timezone.utc)

    for bucket in ("prefect-drops", "prefect-warehouse"):
        s3.mkdir(bucket)
    make_drop("s3://prefect-drops/fleet", DATE, generated_jobs=2, copies_of_real=0, corrupt=False)
    sweep = tmp_path / "one-system.yaml"
    sweep.write_text(f"systems:\n  - {{name: ring-native, network: native-ring, "
                     f"system: {REPO}/pipeline/sweeps/ring_system.json}}\n")
    parameters = {"date": DATE, "source": "s3://prefect-drops/fleet", "warehouse": "s3://prefect-warehouse/wh",
                  "sweep": str(sweep), "num_cpus": 2, "synthetic_jobs": 0}
    created = wait_for("the flow run to be created", lambda: _created(client, deployment["id"], parameters), 60,
                       tmp_path / "server.log")  # a server under a whole suite's load may answer an error first
    run = created.json()

    log = tmp_path / "worker.log"
    worker = start([PREFECT, "worker", "start", "--pool", POOL, "--run-once", "--limit", "1"], env, log)
    try:
        state = wait_for("the flow run to finish", lambda: _final_state(client, run["id"]), 100, log)
    finally:
        stop(worker)
    assert state == "COMPLETED", log.read_text()[-3000:]
    assert s3.ls(f"prefect-warehouse/wh/tables/traces/data/date={DATE}")  # the night's committed data file
    assert s3.exists(f"prefect-warehouse/wh/reports/date={DATE}/index.html")  # the day's page, on S3 too
    tasks = client.post("/task_runs/filter", json={"flow_runs": {"id": {"any_": [run["id"]]}}}).json()
    stages = {"list day", "ingest, convert and statistics (Ray)", "simulate (Ray)", "compare with history",
              "what each change costs the step (Ray)", "select representatives", "synthesis (Ray)", "commit tables", "write report"}  # as the UI lists them
    # (run names end in "-<3 hex digits>"): the night's tables are one task, their commit
    assert {t["name"].rsplit("-", 1)[0] for t in tasks} == stages


def _created(client: httpx.Client, deployment_id: str, parameters: dict) -> httpx.Response | None:
    response = client.post(f"/deployments/{deployment_id}/create_flow_run", json={"parameters": parameters})
    return response if response.is_success else None


def _final_state(client: httpx.Client, run_id: str) -> str | None:
    state = client.get(f"/flow_runs/{run_id}").json()["state_type"]
    return state if state in ("COMPLETED", "FAILED", "CRASHED", "CANCELLED") else None
