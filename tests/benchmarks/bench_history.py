"""Benchmark: what the nightly's comparison with history adds, with a year of history.

    .venv/bin/python tests/benchmarks/bench_history.py [--jobs 1000] [--days 365] [--metrics 36]

Writes `--days` days of `job_history` (generated rows: `--jobs` jobs x `--metrics` metrics, each
job's times drifting within 2% a day, one job in fifty 40% slower on the last day) into a
local warehouse the way the nightly writes it, then times, in this process, the night's
detection: pipeline.history.read_history (the 28 days before the night, three columns) and
regression_rows over the night's rows. Peak memory is the process's peak RSS growth over the
detection (ru_maxrss before and after, the writing done first). The same-run baseline reads
the whole year the naive way (every part, every column), which is what a detection without
partition pruning would pay. Target on this machine (2 cores): under 5 s and 1 GB. Exit status
0 whatever the figures.
"""

from __future__ import annotations

import argparse
import datetime as dt
import random
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import pyarrow.parquet as pq  # noqa: E402

from pipeline import tables  # noqa: E402
from pipeline.history import read_history, regression_rows  # noqa: E402

LAST_DAY = dt.date(2026, 11, 26)


def _metrics(count: int) -> list[str]:
    heads = ["step_ns", "predicted_step_ns", "sim_finish_ns", "host_ns", "ranks", "nodes"]
    parts = [f"family_ns:f{i}" for i in range(count - len(heads))]
    return heads + parts


def day_rows(day: int, days: int, jobs: int, metrics: list[str]) -> list[dict]:
    rows = []
    for j in range(jobs):
        rng = random.Random(f"{j}:{day}")
        slower = 1.4 if day == days - 1 and j % 50 == 0 else 1.0
        for m in metrics:
            base = 1e6 * (1 + (hash(m) % 97))
            noise = 1.0 if m in ("ranks", "nodes") else rng.uniform(0.98, 1.02)  # counts do not drift
            value = float(base * noise * (slower if m.startswith(("family_ns:f0", "step")) else 1))
            rows.append({"job_id": f"job-{j:05d}", "fingerprint": "f" * 16, "metric": m, "value": value,
                         "unit": "ns", "run_id": "bench"})
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=1000)
    p.add_argument("--days", type=int, default=365)
    p.add_argument("--metrics", type=int, default=36)
    args = p.parse_args()
    metrics = _metrics(args.metrics)
    with tempfile.TemporaryDirectory() as tmp:
        warehouse = Path(tmp).as_uri()
        started = time.perf_counter()
        dates = [(LAST_DAY - dt.timedelta(days=args.days - 1 - d)).isoformat() for d in range(args.days)]
        for d, date in enumerate(dates[:-1]):
            tables.write_day(warehouse, "job_history", date, tables.from_rows("job_history",
                                                                             day_rows(d, args.days, args.jobs, metrics)))
        today = day_rows(args.days - 1, args.days, args.jobs, metrics)
        written = time.perf_counter() - started
        print(f"history: {args.days - 1} days x {args.jobs:,} jobs x {len(metrics)} metrics "
              f"({(args.days - 1) * args.jobs * len(metrics):,} rows) written in {written:.1f} s")

        rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        started = time.perf_counter()
        history = read_history(warehouse, dates[-1])
        read = time.perf_counter() - started
        flagged = regression_rows(today, history, "bench")
        detection = time.perf_counter() - started
        grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) / 1024

        started = time.perf_counter()
        naive = sum(pq.read_table(f"{tmp}/tables/job_history/date={date}/part-0.parquet").num_rows
                    for date in dates[:-1])
        baseline = time.perf_counter() - started
    jobs = len({r["job_id"] for r in flagged})
    print(f"detection: {detection:.2f} s ({read:.2f} s reading 28 days of history), peak RSS growth "
          f"{grown_mib:,.0f} MiB; {len(flagged)} flagged change(s) in {jobs} job(s) "
          f"(injected: {len(range(0, args.jobs, 50))} jobs)")
    print(f"baseline: reading the whole history ({naive:,} rows, every column) {baseline:.2f} s; "
          f"detection / baseline = {detection / baseline:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
