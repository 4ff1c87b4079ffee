"""Benchmark: the fleet's memory with a year of nights: the night's detection, the day page's
queries, and the naive whole-year read.

    .venv/bin/python tests/benchmarks/bench_history.py [--jobs 1000] [--days 365] [--metrics 36] [--ranks 8]
                                                       [--warehouse DIR]

Writes `--days` nights into a local warehouse (Iceberg tables, SQL catalog in
WAREHOUSE/catalog.sqlite) the way the nightly does: per night each table's rows as one data file
(pipeline.tables.write_rows), then all the night's tables committed by ONE
chakra_core.warehouse.commit.commit_day call (one commit per table, every declared table, as
tables.commit_night does). Per night, for `--jobs` jobs of `--ranks` ranks:

    job_history      jobs x --metrics   (times drifting within 2% a day; one job in fifty 40% slower
                                         on the last day, step time and one kernel family)
    traces           a row per rank
    device_verdicts  a row per rank and variant (recorded, predicted)
    device_time      a row per rank, variant and kernel family (4)
    sim_results      a row per job and system (3; one job in 25 fails on one)
    representatives  a row per job (8 representatives)
    regressions      40 rows, rejects 5, fidelity 4, nights 1

Required columns the generator does not set are filled as tests/table_rows.py complete() fills
them (empty values), so every row passes its table's declaration. It prints how long the writing
took (commits apart) and what the tables hold at the end (data files, snapshots, manifests).

Then, in a fresh process (modules imported first; their import time printed apart):
1. the night's detection for the last day: pipeline.nightly.history.read_history (the 28 days
   before the night, three columns, from the committed snapshot's file list) and regression_rows
   over the night's rows; peak RSS growth over it (ru_maxrss before and after);
2. the day page's queries for the last day: daily.open_day (open_warehouse: a view per table
   over its current snapshot) + daily.sections_of (every section's SQL) -- what
   daily.day_sections(url, day) does -- then daily.days_index and daily.history (the 90-day trend
   of every job of the day), the rest of what chakra_core/viz/report.py asks;
3. the same-run baseline: the whole year of job_history, every column, read file by file from the
   current snapshot's file list (what a detection without partition pruning would pay).

Targets on this machine (2 cores): the day page's queries (open + sections) and the 28-day
history read each under 2 s; the detection under 1 GB. `--warehouse DIR` keeps the warehouse
(written there when DIR holds no catalog yet, reused as it is otherwise: for profiling the
reads again without rewriting a year). Exit status 0 whatever the figures.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402

from pipeline import tables  # noqa: E402
from table_rows import complete  # noqa: E402

LAST_DAY = dt.date(2026, 11, 26)
TARGET_S = 2.0
TARGET_MIB = 1024
SYSTEMS = ("ring-8", "switch-8", "mesh-8")
FAMILIES = ("gemm", "attention", "elementwise", "communication")
VARIANTS = ("recorded", "predicted")


def _metrics(count: int) -> list[str]:
    heads = ["step_ns", "predicted_step_ns", "sim_finish_ns", "host_ns", "ranks", "nodes"]
    parts = [f"family_ns:f{i}" for i in range(count - len(heads))]
    return heads + parts


def filled(table: str, columns: dict[str, object], n: int) -> pa.Table:
    """`n` rows of `table` from the given columns: every other required column filled with
    complete()'s empty value, every other nullable one null; in the declaration's order."""
    declared = tables.TABLES[table]
    defaults = complete(table, {})
    arrays = []
    for field in declared.schema:
        if field.name in columns:
            value = columns[field.name]
            arrays.append(pa.array(value, field.type) if not isinstance(value, (str, int, float, bool))
                          else pa.array([value] * n, field.type))
        elif field.name in defaults:
            arrays.append(pa.array([defaults[field.name]] * n, field.type))
        else:
            arrays.append(pa.nulls(n, field.type))
    return pa.Table.from_arrays(arrays, schema=declared.schema)


def job_history(day: int, days: int, jobs: int, metrics: list[str], run_id: str) -> pa.Table:
    """jobs x metrics rows: each job's figures drifting within 2% a day (counts fixed), one job in
    fifty 40% slower on the last day (step times and family f0)."""
    rng = np.random.default_rng(day)
    base = np.array([1e6 * (1 + zlib.crc32(m.encode()) % 97) for m in metrics])
    noise = rng.uniform(0.98, 1.02, size=(jobs, len(metrics)))
    noise[:, [i for i, m in enumerate(metrics) if m in ("ranks", "nodes")]] = 1.0
    if day == days - 1:
        slowed = [i for i, m in enumerate(metrics) if m == "family_ns:f0" or m.startswith("step")]
        noise[np.ix_(np.arange(0, jobs, 50), slowed)] *= 1.4
    ids = [f"job-{j:05d}" for j in range(jobs) for _ in metrics]
    return filled("job_history", {"job_id": ids, "fingerprint": "f" * 16, "metric": metrics * jobs,
                                  "value": (base * noise).ravel(), "unit": "ns", "run_id": run_id}, len(ids))


def night(day: int, days: int, date: str, jobs: int, ranks: int, metrics: list[str], run_id: str
          ) -> dict[str, pa.Table | list[dict]]:
    """One night's rows of every table the day page reads (and job_history)."""
    rng = np.random.default_rng(100_000 + day)
    ids = [f"job-{j:05d}" for j in range(jobs)]
    out: dict[str, pa.Table | list[dict]] = {"job_history": job_history(day, days, jobs, metrics, run_id)}

    n = jobs * ranks  # traces: a row per rank
    job_of_rank = [i for i in ids for _ in range(ranks)]
    rank = list(range(ranks)) * jobs
    out["traces"] = filled("traces", {
        "job_id": job_of_rank, "rank": rank,
        "path": [f"traces/{date}/{j}/rank{r}.et" for j, r in zip(job_of_rank, rank)],
        "source_format": "pytorch", "nodes": rng.integers(50_000, 150_000, n), "num_ops": rng.integers(1_000, 9_000, n),
        "compute_micros": rng.integers(10**5, 10**6, n), "run_id": run_id}, n)

    n = jobs * ranks * len(VARIANTS)  # device_verdicts: per rank and variant
    span = rng.integers(10**8, 10**9, n)
    busy = (span * rng.uniform(0.5, 0.95, n)).astype(np.int64)
    idle = span - busy
    variant = [v for _ in range(jobs * ranks) for v in VARIANTS]
    out["device_verdicts"] = filled("device_verdicts", {
        "job_id": [j for j in job_of_rank for _ in VARIANTS], "rank": [r for r in rank for _ in VARIANTS],
        "variant": variant, "system": ["" if v == "recorded" else SYSTEMS[0] for v in variant],
        "span_ns": span, "busy_ns": busy, "compute_ns": busy, "busy_share": busy / span,
        "idle_host_launch_ns": idle // 4, "idle_synchronisation_ns": idle // 4, "idle_communication_ns": idle // 4,
        "idle_other_ns": idle - 3 * (idle // 4), "launches": rng.integers(10**3, 10**5, n),
        "bound": rng.choice(["compute", "communication", "host"], n).tolist(), "steps": 10, "run_id": run_id}, n)

    n = jobs * ranks * len(VARIANTS) * len(FAMILIES)  # device_time: per rank, variant and family
    out["device_time"] = filled("device_time", {
        "job_id": [j for j in job_of_rank for _ in VARIANTS for _ in FAMILIES],
        "rank": [r for r in rank for _ in VARIANTS for _ in FAMILIES],
        "variant": [v for _ in range(jobs * ranks) for v in VARIANTS for _ in FAMILIES],
        "family": list(FAMILIES) * (jobs * ranks * len(VARIANTS)), "ns": rng.integers(10**6, 10**9, n),
        "count": rng.integers(10, 10**4, n), "run_id": run_id}, n)

    n = jobs * len(SYSTEMS)  # sim_results: per job and system, one job in 25 failing on the last system
    failed = [j % 25 == 0 and s == SYSTEMS[-1] for j in range(jobs) for s in SYSTEMS]
    finish = rng.integers(10**8, 10**9, n)
    out["sim_results"] = filled("sim_results", {
        "job_id": [i for i in ids for _ in SYSTEMS], "system": list(SYSTEMS) * jobs, "topology": "ring",
        "npus": ranks, "traced_npus": ranks, "status": ["error" if f else "ok" for f in failed],
        "error": ["out of memory" if f else None for f in failed],
        "finish_ns": [None if f else int(t) for f, t in zip(failed, finish)],
        "comm_ns": [None if f else int(t) // 5 for f, t in zip(failed, finish)]}, n)

    representative = [j % (jobs // 8 or 1) == 0 for j in range(jobs)]  # representatives: a row per job
    out["representatives"] = filled("representatives", {
        "job_id": ids, "npus": ranks, "family": [f"family-{j % 10}" for j in range(jobs)],
        "cluster": [j % 8 for j in range(jobs)], "representative": representative,
        "distance": rng.uniform(0, 1, jobs), "weight": rng.uniform(1, 100, jobs),
        "finish_ns": rng.integers(10**8, 10**9, jobs), "cluster_time_share": rng.uniform(0, 0.25, jobs),
        "cluster_estimate_error": rng.uniform(0, 0.1, jobs), "estimate_error": 0.03,
        "estimate_errors": '{"p50": 0.02, "p90": 0.05}', "k": 8, "status": "ok", "run_id": run_id}, jobs)

    previous = (dt.date.fromisoformat(date) - dt.timedelta(days=1))
    out["regressions"] = [complete("regressions", {  # 40 flagged changes
        "job_id": ids[(20 * i + day) % jobs], "metric": metrics[i % len(metrics)], "before": 1e6, "after": 1.4e6,
        "change": 0.4, "threshold": 0.1, "noise": 0.01, "kind": "regression", "cause": "family_ns:f0",
        "explained": 0.9, "baseline_date": previous, "history_days": 27, "run_id": run_id}) for i in range(40)]
    out["rejects"] = [complete("rejects", {
        "job_id": ids[(7 * i + day) % jobs], "file": f"drop/{date}/bad-{i}.json", "bytes": 1000 + i,
        "stage": "convert", "reason": "not a trace", "run_id": run_id}) for i in range(5)]
    out["fidelity"] = [complete("fidelity", {
        "npus": ranks, "cluster": c, "real_jobs": 100, "synthetic_jobs": 100, "composition_tv": 0.05,
        "message_size_ks_worst": 0.1, "message_size_ks": "{}", "iteration_time_relative_error": 0.04,
        "meets_targets": True, "verdict": "ok", "run_id": run_id}) for c in range(4)]
    out["nights"] = [complete("nights", {
        "run_id": run_id, "jobs": jobs, "jobs_converted": jobs, "jobs_by_rank": 0, "ranks": jobs * ranks,
        "nodes": 10**5 * jobs * ranks, "files_processed": jobs * ranks, "rejected_files": 5,
        "simulations": jobs * len(SYSTEMS)})]
    return out


def write_year(warehouse: str, dates: list[str], args, metrics: list[str]) -> None:
    from chakra_core.warehouse import commit

    schemas = {name: t.schema for name, t in tables.TABLES.items()}  # every table, as commit_night commits
    generate = write = committing = 0.0
    commits: list[float] = []
    started = time.perf_counter()
    for d, date in enumerate(dates):
        run_id = f"{d:06x}bench"[:12]
        t0 = time.perf_counter()
        rows = night(d, len(dates), date, args.jobs, args.ranks, metrics, run_id)
        t1 = time.perf_counter()
        files = {name: tables.write_rows(warehouse, name, date, f"{run_id}-night", data) for name, data in rows.items()}
        t2 = time.perf_counter()
        commit.commit_day(warehouse, date, files, schemas, run_id)
        t3 = time.perf_counter()
        generate, write, committing = generate + t1 - t0, write + t2 - t1, committing + t3 - t2
        commits.append(t3 - t2)
        if (d + 1) % 30 == 0 or d + 1 == len(dates):
            print(f"  {d + 1} nights written, {time.perf_counter() - started:.0f} s; last night's commit "
                  f"{t3 - t2:.2f} s", flush=True)
    total = time.perf_counter() - started
    first, last = commits[:10], commits[-10:]
    print(f"writing: {len(dates)} nights in {total:.0f} s ({total / 60:.1f} min): generating rows {generate:.0f} s, "
          f"writing data files {write:.0f} s, commits {committing:.0f} s (one commit_day a night, "
          f"{len(schemas)} tables; first 10 nights {sum(first) / len(first):.2f} s each, last 10 "
          f"{sum(last) / len(last):.2f} s each)")


def holdings(warehouse: str) -> None:
    """What each table holds at the end: data files of the current snapshot, snapshots, manifests."""
    from chakra_core.warehouse import catalog as catalogs
    from chakra_core.warehouse import snapshots

    catalog = catalogs.open_catalog(warehouse)
    total_files = total_snapshots = 0
    print(f"{'table':<18}{'data files':>11}{'snapshots':>10}{'manifests':>10}{'metadata.json':>15}")
    for name in catalogs.table_names(catalog):
        table = catalogs.load(catalog, name)
        files = len(snapshots.data_files(table))
        current = table.current_snapshot()
        manifests = len(current.manifests(table.io)) if current else 0
        metadata = table.metadata_location
        size = os.path.getsize(metadata.removeprefix("file://")) if metadata.startswith("file://") else 0
        n = len(table.snapshots())
        total_files, total_snapshots = total_files + files, total_snapshots + n
        print(f"{name:<18}{files:>11,}{n:>10,}{manifests:>10,}{size / 2**20:>13.1f} MiB")
    print(f"{'all tables':<18}{total_files:>11,}{total_snapshots:>10,}")


def measure(warehouse: str, last: str, args) -> dict:
    """In this (fresh) process: detection, the day page, the baseline; their figures."""
    started = time.perf_counter()
    import duckdb  # noqa: F401
    import pyarrow.parquet as pq
    import pyiceberg.catalog.sql  # noqa: F401
    import pyiceberg.expressions  # noqa: F401
    import pyiceberg.io.fsspec  # noqa: F401

    from chakra_core.analysis import daily
    from chakra_core.warehouse import catalog as catalogs
    from chakra_core.warehouse import snapshots
    from pipeline.nightly.history import read_history, regression_rows
    imports = time.perf_counter() - started

    metrics = _metrics(args.metrics)
    today = job_history(args.days - 1, args.days, args.jobs, metrics, "bench").to_pylist()
    out: dict = {"imports_s": imports}

    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.perf_counter()
    history = read_history(warehouse, last)
    out["read_s"] = time.perf_counter() - started
    flagged = regression_rows(today, history, "bench")
    out["detection_s"] = time.perf_counter() - started
    out["detection_mib"] = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) / 1024
    out["history_days"] = max((len(v) for v in history.values()), default=0)
    out["flagged"], out["flagged_jobs"] = len(flagged), len({r["job_id"] for r in flagged})
    del today, history, flagged  # the report is a process of its own: no night's rows alive beside it
    gc.collect()

    started = time.perf_counter()
    day = daily.open_day(warehouse, last)
    out["open_s"] = time.perf_counter() - started
    started = time.perf_counter()
    sections = daily.sections_of(day)
    out["sections_s"] = time.perf_counter() - started
    out["section_rows"] = {name: t.num_rows for name, t in sections.items()}
    started = time.perf_counter()
    index = daily.days_index(day)
    out["index_s"], out["index_days"] = time.perf_counter() - started, len(index)
    started = time.perf_counter()
    trend = daily.history(day, [r["job_id"] for r in sections["jobs"].to_pylist()])
    out["trend_s"], out["trend_rows"] = time.perf_counter() - started, trend.num_rows

    started = time.perf_counter()
    catalog = catalogs.open_catalog(warehouse)
    table = catalogs.load(catalog, "job_history")
    files = snapshots.data_files(table)
    out["baseline_plan_s"] = time.perf_counter() - started
    rows = 0
    for f in files:
        rows += pq.read_table(f.url.removeprefix("file://")).num_rows
    out["baseline_s"], out["baseline_rows"], out["baseline_files"] = time.perf_counter() - started, rows, len(files)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=1000)
    p.add_argument("--days", type=int, default=365)
    p.add_argument("--metrics", type=int, default=36)
    p.add_argument("--ranks", type=int, default=8)
    p.add_argument("--warehouse", help="keep the warehouse in this folder (reused when it holds a catalog)")
    p.add_argument("--_measure", help=argparse.SUPPRESS)
    args = p.parse_args()
    dates = [(LAST_DAY - dt.timedelta(days=args.days - 1 - d)).isoformat() for d in range(args.days)]
    if args._measure:
        print(json.dumps(measure(args._measure, dates[-1], args)))
        return 0
    metrics = _metrics(args.metrics)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(args.warehouse or tmp).resolve()
        warehouse = folder.as_uri()
        print(f"warehouse: {folder}; {args.days} nights x {args.jobs:,} jobs x {args.ranks} ranks "
              f"({args.metrics} metrics per job)", flush=True)
        if (folder / "catalog.sqlite").exists():
            print("  reused as it is (it holds a catalog)")
        else:
            write_year(warehouse, dates, args, metrics)
        holdings(warehouse)
        child = subprocess.run([sys.executable, __file__, "--_measure", warehouse, "--jobs", str(args.jobs),
                                "--days", str(args.days), "--metrics", str(args.metrics), "--ranks", str(args.ranks)],
                               capture_output=True, text=True)
        if child.returncode:
            print(child.stdout + child.stderr, file=sys.stderr)
            return 0
        r = json.loads(child.stdout.strip().splitlines()[-1])
        if child.stderr.strip():
            print(child.stderr.strip(), file=sys.stderr)

    def met(seconds: float) -> str:
        return f"target < {TARGET_S:g} s {'met' if seconds < TARGET_S else 'MISSED'}"

    print(f"(fresh process; importing duckdb, pyiceberg and the modules first took {r['imports_s']:.2f} s, "
          "not counted below)")
    print(f"detection: {r['detection_s']:.2f} s ({r['read_s']:.2f} s reading {r['history_days']} days of history: "
          f"{met(r['read_s'])}), peak RSS growth {r['detection_mib']:,.0f} MiB (target < 1 GiB "
          f"{'met' if r['detection_mib'] < TARGET_MIB else 'MISSED'}); {r['flagged']} flagged change(s) in "
          f"{r['flagged_jobs']} job(s) (injected: {len(range(0, args.jobs, 50))} jobs)")
    page = r["open_s"] + r["sections_s"]
    print(f"day page: {page:.2f} s = open_warehouse {r['open_s']:.2f} s + {len(r['section_rows'])} sections "
          f"{r['sections_s']:.2f} s ({met(page)}); days_index {r['index_s']:.2f} s ({r['index_days']} days); "
          f"90-day history of the day's jobs {r['trend_s']:.2f} s ({r['trend_rows']:,} rows)")
    print("  section rows: " + ", ".join(f"{k} {v:,}" for k, v in r["section_rows"].items()))
    print(f"baseline: the whole year of job_history, every column ({r['baseline_rows']:,} rows, "
          f"{r['baseline_files']} files): {r['baseline_s']:.2f} s ({r['baseline_plan_s']:.2f} s of it listing "
          f"the snapshot's files); 28-day read / baseline = {r['read_s'] / r['baseline_s']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
