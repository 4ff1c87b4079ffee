"""Benchmark: the nightly flow's driver memory as the day grows. The peak RSS of the process
that runs the flow, for days of 2 and 16 copies of one 64-rank transformer job.

    .venv/bin/python tests/benchmarks/bench_fleet_driver.py [--copies 2,16] [--curve] [--num-cpus N]

The job: `chakra generate transformer --npus 64 --tp 8 --pp 2 --layers 48 --micro-batches 8`
(chakra_core/generate/workloads.py; 1,601 nodes a rank, 102,464 in all, 53,248 of them
collectives and send/recv), generated once. A day of N copies is a drop laid out as
tools/make_drop.py lays out generated jobs, SOURCE/<date>/<job_id>/<job_id>.<rank>.et and
<job_id>.comm_groups.json, N job folders of byte-identical files under different job ids, and
nothing else (no recorded runs, no corrupt files, no job.json). Each size runs in a fresh
process: a local Ray with --num-cpus CPUs (pipeline.cluster.start_ray; default: every CPU),
then flows.nightly.nightly(date, source, warehouse, sweep=<a sweep of one system, ring-native
on the reference system>, synthetic_jobs=0, representatives=1), Prefect's ephemeral API in a
private PREFECT_HOME (PREFECT_API_URL unset, so no server elsewhere sees these runs). The
figure is that process's own peak RSS (`resource.getrusage(RUSAGE_SELF).ru_maxrss`: the driver
only, not Ray's workers or servers, nor Prefect's ephemeral server, which are other processes),
taken as the flow returns; the peak reached by the end of each stage (the flow's stage runner,
pipeline.tables.commit_night and the report page's task, wrapped; nothing in pipeline/ or
flows/ is changed) says where it was reached. After the flow, once the peak is taken: the rows
of the `collectives` table and each table's data files in its current snapshot
(chakra_core.warehouse.query.open_warehouse; a table with no rows tonight has none; the
compaction should leave one per table with rows). Printed per size: jobs, ranks, nodes,
collectives rows, the driver's RSS once Ray is up (before the flow) and its peak, the flow's
wall time, the data files per table; then the peak's growth from the first size to the last (the target: at most +25 MB from 2 to 16 copies; before the tasks
wrote their own rows the driver held the day's tables, 448 MB -> 561 MB). MB are 10^6 bytes.

--curve runs 1, 4, 16 and 64 copies instead (64 copies: 4,096 ranks, 6.6 M nodes, 0.7 GB of
drop; about 4 minutes on this machine). Everything is written in temporary folders, removed
at the end.

Default runtime on the 2-core development machine: about 2 minutes (the 16-copy day dominates).
Exit status 0 whatever the figures (a report).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
DATE = "2026-11-20"
DEFAULT_COPIES = "2,16"
CURVE = "1,4,16,64"
TARGET_GROWTH_MB = 25
TEMPLATE = "tfm"  # the generated job's file prefix
JOB = ["transformer", "--npus", "64", "--tp", "8", "--pp", "2", "--layers", "48", "--micro-batches", "8"]
SWEEP = """# one system: the reference system on a ring of the job's own NPU count (no what-if scaling)
systems:
  - {name: ring-native, network: native-ring, system: reference}
"""


def peak_rss() -> int:
    """This process's peak RSS in bytes (ru_maxrss is KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


# ------------------------------------------------------------------ the drop (the parent process)


def generate_template(folder: Path) -> dict:
    """The job, once: `chakra generate` in a process of its own (its tables never in ours)."""
    done = subprocess.run([sys.executable, "-m", "chakra_core.cli", "generate", *JOB, "-o", str(folder),
                           "--name", TEMPLATE, "--json"], capture_output=True, text=True, check=False, cwd=ROOT)
    if done.returncode != 0:
        raise RuntimeError(f"chakra generate failed ({done.returncode}): {done.stderr[-3000:]}")
    return json.loads(done.stdout)


def make_day(template: Path, source: Path, copies: int) -> dict:
    """SOURCE/<date>/<job_id>/ for each copy: the template's files, renamed to the job's id."""
    files = sorted(p for p in template.iterdir() if p.name.startswith(TEMPLATE + "."))
    total = 0
    for i in range(copies):
        job_id = f"tfm64-{i:03d}"
        folder = source / DATE / job_id
        folder.mkdir(parents=True)
        for p in files:
            shutil.copyfile(p, folder / (job_id + p.name[len(TEMPLATE):]))
            total += p.stat().st_size
    return {"jobs": copies, "files": copies * len(files), "bytes": total}


# ------------------------------------------------------------------ one size (its own process)


def private_prefect(tmp: str) -> None:
    """Prefect's ephemeral API in a database of this run's own (others may run flows), quiet."""
    os.environ["PREFECT_HOME"] = os.path.join(tmp, "prefect")
    os.environ.pop("PREFECT_API_URL", None)  # never a server this shell points at
    os.environ.pop("PREFECT_API_KEY", None)
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")  # a loaded machine is slow


def measured_nightly(*args, **kwargs) -> tuple[object, float, int, list[tuple[str, int, float]]]:
    """flows.nightly.nightly(*args, **kwargs) in this process: (its result, wall s, this process's
    peak RSS after it, [(stage, the peak by its end, its wall s)]), the stages being the flow's
    own, the commit and the report page (each wrapped for the run, then put back)."""
    import flows.nightly as nightly_module
    from pipeline import tables as tables_module

    stages: list[tuple[str, int, float]] = []
    flow_stage, commit_night, report = nightly_module.run_stage, tables_module.commit_night, nightly_module.write_report

    def measured(name, call):
        def wrapper(*call_args, **call_kwargs):
            t0 = time.perf_counter()
            try:
                return call(*call_args, **call_kwargs)
            finally:
                stages.append((name or call_args[0], peak_rss(), time.perf_counter() - t0))
        return wrapper

    nightly_module.run_stage = measured(None, flow_stage)
    tables_module.commit_night = measured("commit tables", commit_night)
    nightly_module.write_report = measured("report page", report)
    try:
        started = time.perf_counter()
        summary = nightly_module.nightly(*args, **kwargs)
        return summary, time.perf_counter() - started, peak_rss(), stages
    finally:
        nightly_module.run_stage, tables_module.commit_night = flow_stage, commit_night
        nightly_module.write_report = report


def run_size(tmp: str, num_cpus: int) -> dict:
    private_prefect(tmp)
    import ray

    from pipeline.cluster import start_ray

    source = Path(tmp, "source").as_uri()
    warehouse = Path(tmp, "warehouse").as_uri()
    sweep = os.path.join(tmp, "sweep.yaml")
    start_ray(num_cpus=num_cpus)
    ray.get([ray.remote(lambda: None).remote() for _ in range(num_cpus)])  # workers up before the clock starts
    before = peak_rss()
    try:
        summary, wall, peak, stages = measured_nightly(DATE, source, warehouse, sweep=sweep, num_cpus=num_cpus,
                                                       synthetic_jobs=0, representatives=1)
    finally:
        ray.shutdown()
    if not isinstance(summary, dict):  # a Failed state: the flow's one line
        raise RuntimeError(f"the flow failed: {summary}")  # noqa: TRY004
    from chakra_core.warehouse.query import open_warehouse

    con, files_by_table, _ = open_warehouse(warehouse)
    collectives = con.execute("SELECT count(*) FROM collectives").fetchone()[0]
    con.close()
    return {"jobs": summary["jobs"], "jobs_converted": summary["jobs_converted"], "ranks": summary["ranks"],
            "nodes": summary["nodes"], "simulations": summary["simulations"], "rejects": summary["rejects"],
            "collectives": collectives, "files": {name: len(urls) for name, urls in sorted(files_by_table.items())},
            "rss_before": before, "peak": peak, "wall": wall, "stages": stages}


# ------------------------------------------------------------------ report


def _child(tmp: str, num_cpus: int) -> dict:
    done = subprocess.run([sys.executable, os.path.abspath(__file__), "--_tmp", tmp, "--num-cpus", str(num_cpus)],
                          capture_output=True, text=True, check=False, cwd=ROOT)
    if done.returncode != 0:
        raise RuntimeError(f"the flow's process failed ({done.returncode}):\n{done.stderr[-6000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _mb(n: float) -> str:
    return f"{n / 1e6:,.0f}"


def print_size(copies: int, drop: dict, r: dict) -> None:
    print(f"\n== {copies} copies: {r['jobs']} jobs ({r['jobs_converted']} converted), {r['ranks']:,} ranks, "
          f"{r['nodes']:,} nodes, {r['collectives']:,} collectives rows, {r['simulations']} simulations, "
          f"{r['rejects']} rejected files; drop {drop['files']:,} files, {drop['bytes'] / 1e6:,.0f} MB")
    print(f"  driver RSS once Ray is up {_mb(r['rss_before'])} MB, peak {_mb(r['peak'])} MB "
          f"(+{(r['peak'] - r['rss_before']) / 1e6:,.0f} MB in the flow); flow {r['wall']:.1f} s")
    reached = [f"{name} {_mb(peak)} ({wall:.1f} s)" for name, peak, wall in r["stages"]]
    print("  the peak by the end of each stage, MB: " + "; ".join(reached))
    written = {name: n for name, n in r["files"].items() if n}
    empty = sorted(set(r["files"]) - set(written))
    print(f"  data files per table after the commit: {', '.join(f'{k} {v}' for k, v in written.items())} "
          f"({'one per table' if set(written.values()) == {1} else 'NOT one per table'}); no rows tonight, no "
          f"file: {', '.join(empty) or 'none'}")


def print_table(rows: list[tuple[int, dict]]) -> None:
    print(f"\n{'copies':>6s} {'jobs':>5s} {'ranks':>6s} {'nodes':>11s} {'collectives':>12s} {'driver peak MB':>15s} "
          f"{'wall s':>7s} {'files/table':>12s}")
    for copies, r in rows:
        counts = sorted({n for n in r["files"].values() if n})  # the tables with rows tonight
        shown = "-" if not counts else str(counts[0]) if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"
        print(f"{copies:6d} {r['jobs']:5d} {r['ranks']:6,d} {r['nodes']:11,d} {r['collectives']:12,d} "
              f"{_mb(r['peak']):>15s} {r['wall']:7.1f} {shown:>12s}")
    if len(rows) > 1:
        (c0, first), (c1, last) = rows[0], rows[-1]
        growth = (last["peak"] - first["peak"]) / 1e6
        verdict = "meets" if growth <= TARGET_GROWTH_MB else "misses"
        print(f"\ndriver peak from {c0} to {c1} copies: {_mb(first['peak'])} -> {_mb(last['peak'])} MB, "
              f"{growth:+,.0f} MB ({verdict} the target of at most +{TARGET_GROWTH_MB} MB"
              + (" from 2 to 16 copies)" if (c0, c1) == (2, 16) else "; that target is set for 2 to 16 copies)"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--copies", default=DEFAULT_COPIES,
                        help=f"copies of the job in each day, comma-separated (default {DEFAULT_COPIES})")
    parser.add_argument("--curve", action="store_true", help=f"copies {CURVE} (1x, 4x, 16x, 64x) instead")
    parser.add_argument("--num-cpus", type=int, default=len(os.sched_getaffinity(0)), help="Ray CPUs (default: all)")
    parser.add_argument("--_tmp", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args._tmp:
        print(json.dumps(run_size(args._tmp, args.num_cpus)))
        return 0
    sizes = [int(s) for s in (CURVE if args.curve else args.copies).split(",")]
    started = time.perf_counter()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-fleet-driver-") as tmp:
        template = Path(tmp, "template")
        job = generate_template(template)
        print(f"the job: transformer on {job['npus']} NPUs (tp 8, pp 2, 48 layers, 8 micro-batches), "
              f"{job['nodes_per_rank']['max']:,} nodes a rank, {job['nodes_per_rank']['total']:,} in all; "
              f"Ray on {args.num_cpus} CPUs", flush=True)
        for copies in sizes:
            day = Path(tmp, f"{copies}x")
            drop = make_day(template, day / "source", copies)
            Path(day, "sweep.yaml").write_text(SWEEP)
            try:
                r = _child(str(day), args.num_cpus)
            except RuntimeError as e:
                print(f"\n== {copies} copies: FAILED\n{e}", flush=True)
                continue
            finally:
                shutil.rmtree(day, ignore_errors=True)
            rows.append((copies, r))
            print_size(copies, drop, r)
            print(f"  ({time.perf_counter() - started:.0f} s so far)", flush=True)
    if rows:
        print_table(rows)
    print(f"\n({time.perf_counter() - started:.0f} s in all)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
