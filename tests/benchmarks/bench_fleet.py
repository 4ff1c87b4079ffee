"""Benchmark: the fleet's cost curve. The nightly flow on drops of growing size, stage by stage,
and one very large rank converted under a memory bound.

    .venv/bin/python tests/benchmarks/bench_fleet.py [--sizes 1,4,16] [--num-cpus N]
        [--large-copies 36] [--bound-gib 3] [--no-large]

Drops (tools/make_drop.py): size k has k times the default drop's recorded gloo jobs
(`copies_of_real=k`) and generated jobs (`generated_jobs=6k`, the families and NPU counts
cycling as in the default drop), plus the three jobs to reject: k = 1 is the default drop
(18 jobs, 84 rank traces). Each size runs in a fresh process: a local Ray with --num-cpus
CPUs (default: every CPU), the nightly flow (flows/nightly.py, Prefect's ephemeral API in a
private PREFECT_HOME) on the drop. The flow's stages are timed through the `stage` hook that
run_day offers (the flow's own stage runner, wrapped), the commit of the night's tables by
wrapping pipeline.tables.commit_night (the compaction of each table's data files, which the Ray
tasks wrote, and one Iceberg commit per table; the stage "commit tables"); nothing in pipeline/
or flows/ is changed. Printed per stage:
wall time, the day's nodes per second of that stage, core-microseconds per node (wall x the
CPUs the stage can use / nodes: Ray stages use every CPU, the driver's stages one), the
driver's peak RSS during the stage (VmHWM, reset at the stage's start through
/proc/self/clear_refs) and the Ray workers' (each worker of this driver's Ray found under
/proc, its VmHWM reset at the stage's start and sampled every 50 ms: the largest worker, and
the largest sum over workers at one time). The 1x size is the same-run baseline of the
larger ones: per-node cost should stay flat as the drop grows.

The large rank: the ResNet PyTorch trace of datasets/pytorch-et repeated --large-copies times
with shifted ids, parents, tensor and storage ids (36 copies = 518,112 nodes, ~495 MB of
JSON, streamed to disk by tests/benchmarks/bench_convert.py's build_large), converted with
chakra_core.convert.pytorch.job.convert_job (what a pipeline worker runs for a job) in a subprocess
whose address space is capped with setrlimit(RLIMIT_AS) at --bound-gib: if the conversion
ever needed more, it would fail with MemoryError, so finishing proves the bound. Its
same-process baseline is the 14,392-node ResNet file converted first (nodes per second of a
small and a large rank). Printed: nodes/s, peak RSS, peak address space, and the bound.

Default runtime on the 2-core development machine: about 7 minutes under load (the 16x drop
dominates; --sizes 1,4 takes about 3). Exit status 0 whatever the figures (a report).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
DATE = "2026-11-20"
DEFAULT_SIZES = "1,4,16"
LARGE_COPIES = 36
BOUND_GIB = 3.0
POLL_S = 0.05
RESNET = ROOT / "datasets" / "pytorch-et" / "resnet_ddp.rank0.et.json.gz"


# ------------------------------------------------------------------ /proc


def _status(pid: int | str, key: str) -> int | None:
    """A VmXXX line of /proc/<pid>/status in bytes; None if the process is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        return None
    return None


def _reset_peak(pid: int | str) -> None:
    """Resets the process's VmHWM to its current RSS (Linux >= 4.0)."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def _workers(root_pid: int) -> list[int]:
    """Ray worker processes started under root_pid (its raylet's children: `ray::IDLE`,
    `ray::<task>`), not the agents; other users' Ray instances on the machine are not ours."""
    parent, title = {}, {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                title[int(entry)] = f.read().split(b"\0", 1)[0].decode(errors="replace")
        except OSError:
            continue
        parent[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    out = []
    for pid, name in title.items():
        if not name.startswith("ray::") or "Agent" in name:
            continue
        p = parent.get(pid)
        while p and p != root_pid:
            p = parent.get(p)
        if p == root_pid:
            out.append(pid)
    return out


class Monitor:
    """Peak memory of the driver and of this driver's Ray workers, stage by stage."""

    def __init__(self):
        self.pid = os.getpid()
        self.stages: list[dict] = []
        self._current: dict | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._known: list[int] = []
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.wait(POLL_S):
            self._sample()

    def _sample(self) -> None:
        workers = _workers(self.pid)
        peaks, total = [], 0
        for pid in workers:
            hwm, rss = _status(pid, "VmHWM"), _status(pid, "VmRSS")
            if hwm is not None:
                peaks.append(hwm)
                total += rss or 0
        with self._lock:
            self._known = workers
            cur = self._current
            if cur is not None:
                cur["workers_seen"] = max(cur["workers_seen"], len(workers))
                cur["worker_peak"] = max([cur["worker_peak"], *peaks])
                cur["workers_total_peak"] = max(cur["workers_total_peak"], total)

    def start(self, name: str) -> None:
        self._sample()
        with self._lock:
            for pid in self._known:
                _reset_peak(pid)
        _reset_peak(self.pid)
        with self._lock:
            self._current = {"name": name, "started": time.perf_counter(), "driver_start": _status(self.pid, "VmRSS"),
                             "worker_peak": 0, "workers_total_peak": 0, "workers_seen": 0}

    def end(self) -> dict:
        self._sample()
        with self._lock:
            cur, self._current = self._current, None
        cur["wall"] = time.perf_counter() - cur.pop("started")
        cur["driver_peak"] = _status(self.pid, "VmHWM")
        self.stages.append(cur)
        return cur

    def close(self) -> None:
        self._stop.set()
        self._thread.join()


# ------------------------------------------------------------------ one drop size (its own process)


def run_size(size: int, num_cpus: int, tmp: str) -> dict:
    os.environ["PREFECT_HOME"] = os.path.join(tmp, "prefect")  # a private API database (others may run flows)
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    import ray

    import flows.nightly as nightly_module
    from pipeline import tables as tables_module
    from pipeline.cluster import start_ray
    from tools.make_drop import make_drop

    source = Path(tmp, "source").as_uri()
    warehouse = Path(tmp, "warehouse").as_uri()
    drop = make_drop(source, DATE, generated_jobs=6 * size, copies_of_real=size, corrupt=True)
    start_ray(num_cpus=num_cpus)
    ray.get([ray.remote(lambda: None).remote() for _ in range(num_cpus)])  # workers up before the clock starts
    monitor = Monitor()
    flow_stage, commit_night = nightly_module.run_stage, tables_module.commit_night
    commits = {"calls": 0, "open": False}

    def timed_stage(name, step, counts):
        monitor.start(name)
        try:
            return flow_stage(name, step, counts)
        finally:
            monitor.end()

    def timed_commit(*args, **kwargs):
        if not commits["open"]:  # a retried commit (a transient storage error) stays one stage
            monitor.start("commit tables")
            commits["open"] = True
        commits["calls"] += 1
        snapshots = commit_night(*args, **kwargs)  # a failure leaves the stage open for the retry
        monitor.end()
        commits["open"] = False
        return snapshots

    nightly_module.run_stage, tables_module.commit_night = timed_stage, timed_commit
    try:
        started = time.perf_counter()
        summary = nightly_module.nightly(DATE, source, warehouse, num_cpus=num_cpus)
        flow_wall = time.perf_counter() - started
        if commits["open"]:  # no try succeeded
            monitor.end()
    finally:
        nightly_module.run_stage, tables_module.commit_night = flow_stage, commit_night
        monitor.close()
        ray.shutdown()
    if not isinstance(summary, dict):  # a Failed state: the flow's one line
        raise RuntimeError(f"the flow failed: {summary}")  # noqa: TRY004
    return {"size": size, "num_cpus": num_cpus, "drop": {k: drop[k] for k in ("jobs", "rank_traces", "files", "bytes")},
            "jobs": summary["jobs"], "jobs_converted": summary["jobs_converted"], "ranks": summary["ranks"],
            "nodes": summary["nodes"], "simulations": summary["simulations"], "rejects": summary["rejects"],
            "synthetic_jobs": summary["synthetic"]["jobs"], "commits": commits["calls"],
            "flow_wall": flow_wall, "stages": monitor.stages}


# ------------------------------------------------------------------ the large rank (its own process)


def run_large(src: str, out: str, bound: int) -> dict:
    """Converts the small ResNet file (the baseline), then the large one, under RLIMIT_AS = bound."""
    resource.setrlimit(resource.RLIMIT_AS, (bound, bound))
    from chakra_core.cli import configure_arrow_memory
    from chakra_core.convert.pytorch.job import convert_job

    configure_arrow_memory()  # as the chakra command and a pipeline worker (its tasks call the same code) do
    base_rss, base_vm = _status("self", "VmRSS"), _status("self", "VmSize")
    t0 = time.perf_counter()
    small = convert_job(str(RESNET), out + "-small", "small").host_nodes
    small_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    try:
        nodes = convert_job(src, out, "large").host_nodes
        error = None
    except MemoryError as exc:
        nodes, error = 0, f"MemoryError: {exc}"
    return {"nodes": nodes, "seconds": time.perf_counter() - t0, "small_nodes": small, "small_seconds": small_s,
            "error": error, "bound": bound, "base_rss": base_rss, "base_vm": base_vm,
            "peak_rss": _status("self", "VmHWM"), "peak_vm": _status("self", "VmPeak"),
            "et_bytes": sum(p.stat().st_size for p in Path(out).glob("*.et"))}


# ------------------------------------------------------------------ report


def _child(*args: str) -> dict:
    done = subprocess.run([sys.executable, os.path.abspath(__file__), *args], capture_output=True, text=True,
                          check=False)
    if done.returncode != 0:
        raise RuntimeError(f"child {args} failed ({done.returncode}): {done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _mb(n: float | None) -> str:
    return "-" if n is None else f"{n / 1e6:,.0f}"


RAY_STAGES = ("ingest, convert and statistics (Ray)", "simulate (Ray)", "synthesis (Ray)")


def print_size(r: dict, baseline: dict | None) -> None:
    d = r["drop"]
    print(f"\n== {r['size']}x drop: {r['jobs']} jobs ({r['jobs_converted']} converted; {r['rejects']} files rejected), "
          f"{r['ranks']} rank traces, {r['nodes']:,} nodes, {r['simulations']} simulations, "
          f"{r['synthetic_jobs']} synthetic jobs; drop {d['files']} files, {d['bytes'] / 1e6:.1f} MB; "
          f"Ray on {r['num_cpus']} CPUs")
    print(f"  {'stage':40s} {'wall s':>8s} {'nodes/s':>10s} {'core-us/node':>12s} {'driver MB':>10s} "
          f"{'worker MB':>10s} {'workers MB':>10s}" + ("  vs 1x per node" if baseline else ""))
    base = {s["name"]: s for s in baseline["stages"]} if baseline else {}
    for s in r["stages"]:
        cpus = r["num_cpus"] if s["name"] in RAY_STAGES else 1
        per_node = s["wall"] * cpus / max(r["nodes"], 1) * 1e6
        line = (f"  {s['name']:40s} {s['wall']:8.2f} {r['nodes'] / s['wall']:10,.0f} {per_node:12.2f} "
                f"{_mb(s['driver_peak']):>10s} {_mb(s['worker_peak'] or None):>10s} "
                f"{_mb(s['workers_total_peak'] or None):>10s}")
        b = base.get(s["name"])
        if b:
            line += f"  {s['wall'] / r['nodes'] / (b['wall'] / baseline['nodes']):6.2f}x"
        print(line)
    staged = sum(s["wall"] for s in r["stages"])
    print(f"  {'whole flow':40s} {r['flow_wall']:8.2f} {r['nodes'] / r['flow_wall']:10,.0f}   "
          f"(outside the stages: {r['flow_wall'] - staged:.1f} s, the flow's Prefect start-up and "
          "bookkeeping, and the report page after the commit)")
    print("  (driver MB: the driver's peak RSS in the stage; worker MB: the largest Ray worker's peak RSS; "
          "workers MB: the largest sum of the workers' RSS at one time)")


def print_large(r: dict) -> None:
    gib = r["bound"] / 2**30
    print(f"\n== one large rank: {r['nodes']:,} nodes, converted with convert_job under RLIMIT_AS = {gib:.1f} GiB")
    if r["error"]:
        print(f"  FAILED under the bound: {r['error']} (peak RSS {_mb(r['peak_rss'])} MB)")
        return
    rate, small_rate = r["nodes"] / r["seconds"], r["small_nodes"] / r["small_seconds"]
    print(f"  {r['seconds']:.1f} s = {rate:,.0f} nodes/s; same-process baseline, the 14,392-node ResNet file first: "
          f"{small_rate:,.0f} nodes/s (large / small per-node rate {rate / small_rate:.2f})")
    print(f"  peak RSS {_mb(r['peak_rss'])} MB (after imports {_mb(r['base_rss'])} MB), peak address space "
          f"{_mb(r['peak_vm'])} MB (after imports {_mb(r['base_vm'])} MB) under the bound of {r['bound'] / 1e6:,.0f} MB: "
          f"{'PASS' if r['peak_vm'] <= r['bound'] else 'FAIL'}; {r['et_bytes'] / 1e6:.0f} MB of .et written")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default=DEFAULT_SIZES, help=f"drop sizes, multiples of the default (default "
                        f"{DEFAULT_SIZES})")
    parser.add_argument("--num-cpus", type=int, default=len(os.sched_getaffinity(0)), help="Ray CPUs (default: all)")
    parser.add_argument("--large-copies", type=int, default=LARGE_COPIES,
                        help=f"ResNet copies in the large rank (default {LARGE_COPIES}: ~495 MB of JSON)")
    parser.add_argument("--bound-gib", type=float, default=BOUND_GIB,
                        help=f"address-space bound of the large rank's conversion (default {BOUND_GIB} GiB)")
    parser.add_argument("--no-large", action="store_true", help="skip the large rank")
    parser.add_argument("--_size", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--_tmp", help=argparse.SUPPRESS)
    parser.add_argument("--_large", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args._size:
        print(json.dumps(run_size(args._size, args.num_cpus, args._tmp)))
        return 0
    if args._large:
        src, out, bound = args._large
        print(json.dumps(run_large(src, out, int(bound))))
        return 0
    sizes = [int(s) for s in args.sizes.split(",")]
    started = time.perf_counter()
    results = []
    for size in sizes:
        with tempfile.TemporaryDirectory(prefix=f"bench-fleet-{size}x-") as tmp:
            r = _child("--_size", str(size), "--num-cpus", str(args.num_cpus), "--_tmp", tmp)
        results.append(r)
        print_size(r, results[0] if r is not results[0] else None)
        print(f"  ({time.perf_counter() - started:.0f} s so far)", flush=True)
    if not args.no_large:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from bench_convert import build_large

        with tempfile.TemporaryDirectory(prefix="bench-fleet-large-") as tmp:
            src = Path(tmp, "large.et.json")
            t0 = time.perf_counter()
            nodes = build_large(args.large_copies, src)
            print(f"\nbuilt the large rank: {nodes:,} nodes, {src.stat().st_size / 1e6:.0f} MB of JSON in "
                  f"{time.perf_counter() - t0:.0f} s", flush=True)
            print_large(_child("--_large", str(src), str(Path(tmp, "out")), str(int(args.bound_gib * 2**30))))
    print(f"\n({time.perf_counter() - started:.0f} s in all)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
