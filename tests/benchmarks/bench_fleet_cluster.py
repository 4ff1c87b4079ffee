"""Benchmark: a night on a Ray cluster of several nodes, with the drops and the warehouse on S3.
The per-job overhead of the nightly flow (a Ray task per job, its files on S3, the Iceberg
catalog's commit) on a day of many tiny jobs: jobs per second and the driver's peak memory.

    .venv/bin/python tests/benchmarks/bench_fleet_cluster.py [--jobs 2000] [--nodes 3] [--num-cpus 1]

Everything is started here, as docs/deployment.md says and as tests/test_ray_cluster.py does,
on 127.0.0.1:

- S3: moto's server (moto.server.ThreadedMotoServer, in this process, on a free port), two
  buckets, `bench-drops` and `bench-warehouse`; every process finds it through the environment
  (FSSPEC_S3_ENDPOINT_URL, FSSPEC_S3_KEY / _SECRET, AWS_*: fake credentials);
- the catalog as deployed for a warehouse on S3: CHAKRA_CATALOG_URI=sqlite:////tmp/bfc-.../catalog.sqlite;
- Ray: a head (`ray start --head --block`) and NODES-1 more nodes (`ray start --address
  127.0.0.1:PORT --block`, each in a working directory of its own), --num-cpus CPUs each
  (default 1: three nodes on the 2-core machine already ask for 3 CPUs), RAY_AUTH_MODE=disabled,
  the S3 variables in each node's own environment;
- the drop: DATE's jobs at s3://bench-drops/drops/DATE/<job_id>/, written as tools/make_drop.py
  writes generated jobs (its writer, `<job_id>.<rank>.et` files and a job.json), but tiny:
  the five families of chakra_core.generate.families in turn, on 2 and 4 NPUs alternately (52 to
  170 nodes a rank, about 80 on average; no recorded runs, no corrupt files, no drift).

Then the driver, a fresh process with RAY_ADDRESS=127.0.0.1:PORT, its own PREFECT_HOME
(Prefect's ephemeral API; PREFECT_API_URL unset): it connects, waits until every node is
alive, starts a worker on each node, then runs
flows.nightly.nightly(DATE, "s3://bench-drops/drops", "s3://bench-warehouse/wh",
sweep=<one system: ring-native on pipeline/sweeps/ring_system.json>, synthetic_jobs=0,
representatives=1). Measured: the wall time of that call (the night, end to end: preflight,
listing, a Ray task per job, a simulation per job, selection, the commit of every table, the
report page), jobs per second over it, the stages' walls, and the driver's peak RSS
(`getrusage(RUSAGE_SELF).ru_maxrss` of the driver alone, not Ray's or Prefect's other
processes). Printed: jobs, converted, ranks, nodes, the Ray nodes that ran job tasks
(summary["ray_nodes"], named head / node2 / node3 by their node manager's port), the committed
row counts of `traces` and `sim_results` read back through
chakra_core.warehouse.query.open_warehouse("s3://bench-warehouse/wh"), and the data files per
table after the commit. Also the CPU seconds of the driver and of this process during the
night (this process is idle then but for moto's server: that is moto's CPU).

Every process started here (moto, the Ray nodes and what they start, the driver and its
Prefect server) is stopped at the end, also on failure or Ctrl-C: the `ray start` process
groups are terminated (killed after 5 s), then any process left whose command line names this
run's temporary folder; never `ray stop`. The temporary folder is removed.

Default runtime on the 2-core development machine: about 55 minutes for 2,000 jobs (the drop
5 minutes, the night 47; measured 2026-12-06 under other work, load average 5-8), `--jobs 200`
about 4-5 minutes. The figures are in docs/benchmarks.md ("A night on a three-node Ray cluster
with S3"). Exit status 0 whatever the figures (a report), also when the night fails: then the
driver's error is printed.

moto's server answers some listings with HTTP 500 when a key is deleted while it lists the
bucket (a KeyError in moto's list_objects: it is not safe against concurrent deletes, and the
pipeline renames every file it writes); botocore retries them. They are counted and printed,
not shown one traceback each.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # conftest's s3_env
sys.path.insert(0, str(ROOT / "tests" / "benchmarks"))

from bench_fleet_driver import peak_rss, measured_nightly, private_prefect  # noqa: E402  (the measured night)
from process_groups import stop_process_groups  # noqa: E402

from pipeline.cluster import end_processes  # noqa: E402

RAY = str(Path(sys.executable).parent / "ray")
DATE = "2026-11-20"
DROPS_BUCKET, WAREHOUSE_BUCKET = "bench-drops", "bench-warehouse"
SOURCE = f"s3://{DROPS_BUCKET}/drops"
WAREHOUSE = f"s3://{WAREHOUSE_BUCKET}/wh"
SIZES = (2, 4)  # NPUs of the tiny jobs, alternately
SWEEP = ("# one system: ring-native on the reference system file\nsystems:\n"
         f"  - {{name: ring-native, network: native-ring, system: {ROOT}/pipeline/sweeps/ring_system.json}}\n")


def _mb(n: float) -> str:
    return f"{n / 1e6:,.0f}"


# ------------------------------------------------------------------ S3 and the drop (this process)


def _free_ports(count: int) -> list[int]:
    """Ports free now and distinct (each socket stays bound until all are chosen)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def s3_env(endpoint: str, catalog: str) -> dict[str, str]:
    """The S3 settings of every process (tests/conftest.py's, fake credentials), and the catalog."""
    from conftest import s3_env as test_s3_env

    return {**test_s3_env(endpoint), "CHAKRA_CATALOG_URI": catalog}


def plan(index: int) -> tuple[str, int]:
    """(family, npus) of tiny job `index`: the families in turn, each on 2 then 4 NPUs."""
    from tools.make_drop import FAMILIES

    return FAMILIES[index % len(FAMILIES)], SIZES[(index // len(FAMILIES)) % len(SIZES)]


def write_drop(jobs: int, threads: int = 8) -> dict:
    """The day's tiny generated jobs on S3, written by tools/make_drop.py's writer (threads: the
    drop is not what is measured)."""
    import random

    from chakra_core.generate.families import generate_family
    from tools.make_drop import SHORT, GeneratedJob, _Drop, _generated_info, _write_generated

    def write(indices: range) -> _Drop:
        drop = _Drop(SOURCE, DATE, drift=False)
        for index in indices:
            family, npus = plan(index)
            info, tables = generate_family(family, npus, random.Random(f"bench-fleet-cluster:{index}"))
            job = GeneratedJob(f"gen-{SHORT[family]}-{index:04d}-n{npus}", family, npus, info, tables)
            _write_generated(drop, job, _generated_info(job, 0, index))
        return drop

    step = -(-jobs // threads) if jobs else 1
    with ThreadPoolExecutor(threads) as pool:
        drops = list(pool.map(write, [range(i, min(i + step, jobs)) for i in range(0, jobs, step)]))
    return {"jobs": sum(len(d.jobs) for d in drops), "files": sum(d.files for d in drops),
            "bytes": sum(d.bytes for d in drops), "rank_traces": sum(d.rank_traces for d in drops)}


# ------------------------------------------------------------------ the Ray nodes (this process)


def _ray_start(env: dict, cwd: str, temp_dir: str, *args: str, ports: list[int]) -> subprocess.Popen:
    """`ray start --block` with its output in <cwd>/ray-start.log; ports fixed (the node
    manager's names the node in the report)."""
    names = ["--dashboard-agent-listen-port", "--metrics-export-port", "--runtime-env-agent-port",
             "--dashboard-agent-grpc-port", "--node-manager-port", "--object-manager-port"]
    fixed = [str(x) for name, port in zip(names, ports) for x in (name, port)]
    log = Path(cwd, "ray-start.log")
    with open(log, "wb") as out:
        proc = subprocess.Popen([RAY, "start", "--block", "--node-ip-address", "127.0.0.1", "--disable-usage-stats",
                                 "--temp-dir", temp_dir, *fixed, *args],
                                env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    proc.log = str(log)
    proc.node_manager_port = ports[4]
    return proc


STARTED = "Ray runtime started."  # what `ray start` prints once its node is up (then --block waits)


def _node(env: dict, cwd: str, temp: str, *args: str, head: bool, procs: list) -> subprocess.Popen | None:
    """One `ray start --block`, up (its log says so) within 120 s, else stopped and None. A
    port picked free can be taken before Ray binds it, and on a loaded machine a node's raylet
    may not register within Ray's own 30 s: either way the start is for the caller to retry."""
    port = client = None
    if head:
        port, client, *ports = _free_ports(8)
        args = ("--head", "--port", str(port), "--include-dashboard", "false", "--ray-client-server-port",
                str(client), *args)
    else:
        ports = _free_ports(6)
    proc = _ray_start(env, cwd, temp, *args, ports=ports)
    procs.append(proc)  # at once: stopped by the caller whatever happens next
    proc.gcs_port = port
    deadline = time.monotonic() + 120
    while proc.poll() is None and time.monotonic() < deadline:
        if STARTED in _tail(proc.log, 100_000):
            return proc
        time.sleep(0.3)
    why = f"exit {proc.returncode}" if proc.poll() is not None else "after 120 s"
    print(f"(a `ray start` failed or hung ({why}), tried again; its output:\n{_tail(proc.log, 1500)})", flush=True)
    stop_process_groups([proc])
    procs.remove(proc)
    return None


def start_cluster(env: dict, tmp: str, nodes: int, num_cpus: int, procs: list) -> tuple[str, dict[int, str]]:
    """A head, then nodes-1 more nodes joining it, one at a time, each tried up to 3 times.
    Returns the address and node manager port -> node name; every process started is appended
    to procs (stopped by the caller)."""
    temp = os.path.join(tmp, "ray")  # short: Ray's socket paths live under it (< 107 characters)
    os.makedirs(temp, exist_ok=True)
    names: dict[int, str] = {}
    address = None
    for n in range(1, nodes + 1):
        name = "head" if n == 1 else f"node{n}"
        folder = os.path.join(tmp, name)  # a working directory of its own, as on another machine
        os.makedirs(folder, exist_ok=True)
        join = () if n == 1 else ("--address", address)
        for _ in range(3):
            proc = _node(env, folder, temp, "--num-cpus", str(num_cpus), *join, head=n == 1, procs=procs)
            if proc is not None:
                break
        else:
            raise RuntimeError(f"the Ray {name} did not start in 3 tries")
        names[proc.node_manager_port] = name
        if n == 1:
            address = f"127.0.0.1:{proc.gcs_port}"
    return address, names


def _tail(path: str, chars: int = 3000) -> str:
    try:
        return Path(path).read_text(errors="replace")[-chars:]
    except OSError as e:
        return f"({path}: {e})"


def stop_leftovers(tmp: str) -> list[int]:
    """Processes still alive whose command line names this run's temporary folder (Ray's
    servers and workers of the nodes started here, which may have left their process group):
    terminated by id, killed after 5 s. Returns their ids."""
    def ours() -> list[int]:
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == os.getpid():
                continue
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if tmp in cmdline and state != "Z":
                found.append(int(entry))
        return found

    left = ours()
    end_processes(set(left), 5)
    return left


# ------------------------------------------------------------------ the driver (its own process)


def _rss() -> int:
    """This process's resident memory now, in bytes."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def run_driver(tmp: str, nodes: int) -> dict:
    """The night, in this fresh process, on the cluster RAY_ADDRESS names."""
    private_prefect(tmp)
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    ray.init(address=os.environ["RAY_ADDRESS"], log_to_driver=False)  # start_ray() in the flow then keeps it
    deadline = time.monotonic() + 120
    while sum(n["Alive"] for n in ray.nodes()) < nodes:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{nodes} Ray nodes not alive within 120 s: {sum(n['Alive'] for n in ray.nodes())}")
        time.sleep(0.5)
    alive = [n for n in ray.nodes() if n["Alive"]]
    node_ports = {n["NodeID"]: n["NodeManagerPort"] for n in alive}
    warm = ray.remote(num_cpus=1)(lambda: os.getpid())  # a worker on every node before the clock starts
    ray.get([warm.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote()
             for n in alive])
    before, rss_now, cpu_before = peak_rss(), _rss(), _cpu()
    try:
        summary, wall, peak, stages = measured_nightly(DATE, SOURCE, WAREHOUSE, sweep=os.path.join(tmp, "sweep.yaml"),
                                                       synthetic_jobs=0, representatives=1)
        cpu = _cpu() - cpu_before
    finally:
        ray.shutdown()
    if not isinstance(summary, dict):  # a Failed state: the flow's one line
        raise RuntimeError(f"the flow failed: {summary}")  # noqa: TRY004
    from chakra_core.warehouse.query import open_warehouse

    con, files_by_table, warnings = open_warehouse(WAREHOUSE)
    rows = {name: con.execute(f"SELECT count(*) FROM {name}").fetchone()[0] for name in ("traces", "sim_results")}
    con.close()
    return {"jobs": summary["jobs"], "jobs_converted": summary["jobs_converted"], "ranks": summary["ranks"],
            "nodes": summary["nodes"], "simulations": summary["simulations"], "rejects": summary["rejects"],
            "ray_nodes": summary["ray_nodes"], "node_ports": node_ports, "rows": rows, "warnings": warnings,
            "files": {name: len(urls) for name, urls in sorted(files_by_table.items())},
            "rss_before": before, "rss_now": rss_now, "peak": peak, "wall": wall, "driver_cpu": cpu, "stages": stages}


def _driver_main(tmp: str, nodes: int) -> int:
    try:
        result = run_driver(tmp, nodes)
    except BaseException as e:  # noqa: BLE001  (the report says what failed)
        result = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}
    Path(tmp, "result.json").write_text(json.dumps(result))
    return 0 if "error" not in result else 1


# ------------------------------------------------------------------ the report (this process)


class MotoErrors(logging.Handler):
    """Counts the requests moto's server answered with an error (werkzeug's "Error on request",
    with its exception) instead of printing each traceback; the clients retry them."""

    def __init__(self):
        super().__init__(logging.ERROR)
        self.count = 0
        self.kinds: dict[str, int] = {}

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1
        error = record.exc_info[1] if record.exc_info else None
        kind = f"{type(error).__name__} in {_where(record.exc_info[2])}" if error else record.getMessage()[:80]
        self.kinds[kind] = self.kinds.get(kind, 0) + 1

    def summary(self) -> str:
        kinds = "; ".join(f"{n:,} {kind}" for kind, n in self.kinds.items())
        return f"{self.count:,}" + (f" ({kinds})" if kinds else "")


def _where(tb) -> str:
    """The innermost function of moto in a traceback."""
    where = "?"
    while tb is not None:
        if "moto" in tb.tb_frame.f_code.co_filename:
            where = f"moto {tb.tb_frame.f_code.co_name}"
        tb = tb.tb_next
    return where


def print_result(r: dict, names: dict[int, str], moto_cpu: float) -> None:
    name_of = {node: names.get(port, f"port {port}") for node, port in r["node_ports"].items()}
    ran = [f"{name_of.get(node, '?')} ({node[:8]})" for node in r["ray_nodes"]]
    print(f"\njobs {r['jobs']:,}, converted {r['jobs_converted']:,}, ranks {r['ranks']:,}, nodes {r['nodes']:,}, "
          f"simulations {r['simulations']:,}, rejected files {r['rejects']}")
    print(f"night wall {r['wall']:.1f} s: {r['jobs'] / r['wall']:.2f} jobs/s, "
          f"{1000 * r['wall'] / max(r['jobs'], 1):.0f} ms a job")
    print(f"driver RSS once connected {_mb(r['rss_now'])} MB (its peak so far {_mb(r['rss_before'])} MB), "
          f"peak {_mb(r['peak'])} MB "
          f"(+{(r['peak'] - r['rss_before']) / 1e6:,.0f} MB in the night); driver CPU {r['driver_cpu']:.1f} s, "
          f"moto (this process) CPU {moto_cpu:.1f} s, peak RSS {_mb(peak_rss())} MB")
    print("stages (wall s, the driver's peak MB by its end): "
          + "; ".join(f"{name} {wall:.1f} s ({_mb(peak)})" for name, peak, wall in r["stages"]))
    print(f"Ray nodes that ran job tasks: {len(r['ray_nodes'])} of {len(r['node_ports'])} alive: {', '.join(ran)}")
    rows = r["rows"]
    print(f"committed rows (open_warehouse on {WAREHOUSE}): traces {rows['traces']:,} "
          f"({'=' if rows['traces'] == r['ranks'] else '!='} ranks {r['ranks']:,}), sim_results "
          f"{rows['sim_results']:,} ({'=' if rows['sim_results'] == r['simulations'] else '!='} simulations "
          f"{r['simulations']:,})")
    written = {name: n for name, n in r["files"].items() if n}
    empty = sorted(set(r["files"]) - set(written))
    print(f"data files per table after the commit: {', '.join(f'{k} {v}' for k, v in written.items())}; "
          f"no file (no rows tonight): {', '.join(empty) or 'none'}")
    for w in r["warnings"]:
        print(f"  warning: {w}")


def run(args) -> None:
    tmp = tempfile.mkdtemp(prefix="bfc-", dir="/tmp")  # short: Ray's socket paths live under it
    procs: list[subprocess.Popen] = []
    server = driver = None
    moto_errors = MotoErrors()
    started = time.perf_counter()
    try:
        from moto import server as moto_server

        port = _free_ports(1)[0]
        server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        server.start()
        werkzeug = logging.getLogger("werkzeug")
        werkzeug.setLevel(logging.WARNING)  # not a line per request
        werkzeug.addHandler(moto_errors)
        werkzeug.propagate = False
        env = s3_env(f"http://127.0.0.1:{port}", f"sqlite:///{tmp}/catalog.sqlite")
        os.environ.update(env)
        import fsspec

        fsspec.config.set_conf_env(fsspec.config.conf)  # FSSPEC_S3_* into fsspec's defaults (read at import)
        s3 = fsspec.filesystem("s3")
        for bucket in (DROPS_BUCKET, WAREHOUSE_BUCKET):
            s3.mkdir(bucket)
        t0 = time.perf_counter()
        drop = write_drop(args.jobs)
        print(f"drop: {drop['jobs']:,} tiny jobs ({'/'.join(map(str, SIZES))} NPUs, five families), "
              f"{drop['rank_traces']:,} rank traces, {drop['files']:,} files, {drop['bytes'] / 1e6:,.1f} MB on "
              f"moto S3 in {time.perf_counter() - t0:.1f} s; moto's error answers (retried): {moto_errors.summary()}",
              flush=True)
        moto_errors.count, moto_errors.kinds = 0, {}  # from here: the night's
        Path(tmp, "sweep.yaml").write_text(SWEEP)

        node_env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
        node_env.update(env, RAY_AUTH_MODE="disabled")
        t0 = time.perf_counter()
        address, names = start_cluster(node_env, tmp, args.nodes, args.num_cpus, procs)
        print(f"Ray: {args.nodes} nodes on 127.0.0.1 ({address}), {args.num_cpus} CPU each, up in "
              f"{time.perf_counter() - t0:.1f} s", flush=True)

        driver_env = dict(node_env, RAY_ADDRESS=address)
        cpu0 = _cpu()
        with open(Path(tmp, "driver.log"), "wb") as log:
            driver = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--_driver", tmp,
                                       "--nodes", str(args.nodes)], env=driver_env, cwd=ROOT, stdout=log,
                                      stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + args.timeout
        dead: set[int] = set()
        while driver.poll() is None:
            for proc in procs:
                if proc.poll() is not None and proc.pid not in dead:
                    dead.add(proc.pid)
                    print(f"WARNING: `ray start` of {names.get(proc.node_manager_port)} exited with "
                          f"{proc.returncode} during the night; its output:\n{_tail(proc.log)}", flush=True)
            if time.monotonic() > deadline:
                print(f"the driver ran past --timeout {args.timeout} s: stopped", flush=True)
                break
            time.sleep(0.5)
        moto_cpu = _cpu() - cpu0
        result_file = Path(tmp, "result.json")
        result = json.loads(result_file.read_text()) if result_file.exists() else None
        if result is None or "error" in result:
            print(f"\nthe night FAILED: {(result or {}).get('error', f'no result, driver exit {driver.poll()}')}")
            print((result or {}).get("traceback", "")[-6000:])
            print(f"the driver's output (last 6,000 characters):\n{_tail(str(Path(tmp, 'driver.log')), 6000)}")
        else:
            print_result(result, names, moto_cpu)
        print(f"moto's error answers during the night (retried by the clients): {moto_errors.summary()}")
    except Exception:  # noqa: BLE001  (a report: exit 0 whatever failed)
        print(f"\nthe benchmark FAILED:\n{traceback.format_exc()}")
        for proc in procs:
            if proc.poll() is not None:
                print(f"`ray start` ({proc.log}) exited with {proc.returncode}:\n{_tail(proc.log)}")
    finally:
        if driver is not None:
            stop_process_groups([driver])  # its session: Prefect's ephemeral server with it
        stop_process_groups(procs)
        left = stop_leftovers(tmp)
        if left:
            print(f"(stopped {len(left)} leftover process(es) of this run: {left})")
        if server is not None:
            server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"\n({time.perf_counter() - started:.0f} s in all)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=2000, help="tiny jobs in the day (default 2000)")
    parser.add_argument("--nodes", type=int, default=3, help="Ray nodes: a head and NODES-1 more (default 3)")
    parser.add_argument("--num-cpus", type=int, default=1, help="CPUs of each Ray node (default 1)")
    parser.add_argument("--timeout", type=int, default=3600, help="stop the night after this many s (default 3600)")
    parser.add_argument("--_driver", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args._driver:
        return _driver_main(args._driver, args.nodes)
    print(f"a night of {args.jobs:,} tiny jobs on {args.nodes} Ray nodes ({args.num_cpus} CPU each) on 127.0.0.1, "
          f"drops and warehouse on moto S3, SQLite catalog; {os.cpu_count()} cores here, load average "
          f"{os.getloadavg()[0]:.1f}", flush=True)
    for signum in (signal.SIGTERM, signal.SIGHUP):  # a `kill` unwinds like Ctrl-C: everything is stopped
        signal.signal(signum, _interrupted)
    run(args)
    return 0


def _interrupted(signum, frame) -> None:
    raise KeyboardInterrupt(f"stopped by {signal.Signals(signum).name}")


if __name__ == "__main__":
    sys.exit(main())
