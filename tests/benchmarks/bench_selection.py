"""Benchmark: the representative subset's estimate error against k, new method vs today's.

    .venv/bin/python tests/benchmarks/bench_selection.py [--seed 0]

Two fleets:
- the nightly drop: `tools/make_drop.py` (the 8 recorded gloo runs, converted, and 6
  generated jobs of five families; no corrupt files) written to a temporary folder, twice:
  families derived from the traces (the collective kind carrying most bytes: what `chakra
  select` and the nightly flow see) and families from each job's job.json (6 families);
- a generated fleet: tests/test_selection_quality.py's day 1 (20 make_drop jobs and 6 jobs of
  `chakra_core.generate.workloads`), 26 jobs.

Per k: the largest group error (jobs, time, exposed_comm, time_by_family, bytes_by_kind;
`chakra_core.analysis.select.group_errors`), and the error of the estimated fleet time on a
network selection never saw (a 10 GB/s, 2 µs ring: `slower_network_ns`), of
- new: `chakra_core.analysis.select` (greedy forward selection, minimax-calibrated weights);
- old: today's method until issue 18, reimplemented here as the same-run baseline: k-means
  (10 restarts, --seed) on the standardised features, the member nearest each centroid, the
  estimate = representative x the cluster's job count; also its `coverage` of the fleet's time.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
from sklearn.cluster import KMeans

REPO = Path(__file__).resolve().parents[2]
for folder in (REPO, REPO / "tests"):
    sys.path.insert(0, str(folder))

from test_selection_quality import fleet_jobs, generated_fleet, slower_network_ns  # noqa: E402

from chakra_core.analysis.select import (  # noqa: E402
    Estimands,
    estimands,
    feature_matrix,
    greedy_path,
    group_errors,
    job_family,
    max_error,
    standardised,
    summarize_job,
)

DATE = "2026-01-01"


def drop_fleet(work: Path) -> tuple[list, np.ndarray]:
    """The nightly drop's jobs, converted where they are PyTorch traces, as summaries with
    families, and their times on the hold-out network."""
    from chakra_core.analysis.fleet import find_jobs, load_job
    from chakra_core.convert.pytorch.job import convert_job
    from tools.make_drop import make_drop

    make_drop(str(work / "drop"), DATE, corrupt=False)
    summaries, holdout = [], []
    for folder in sorted((work / "drop" / DATE).iterdir()):
        info = json.loads((folder / "job.json").read_text())
        if not list(folder.glob("*.et")):  # recorded PyTorch runs: convert first, as the pipeline does
            convert_job(str(folder), str(work / "converted" / folder.name), folder.name)
            folder = work / "converted" / folder.name
        [job], _ = find_jobs([str(folder)])
        tables, groups = load_job(job)
        summary = summarize_job(folder.name, tables, groups)
        summary.family = info["family"]
        summaries.append(summary)
        holdout.append(slower_network_ns(tables, groups))
    return summaries, np.array(holdout, dtype=np.float64)


def baseline_errors(jobs: list, fleet: Estimands, holdout: np.ndarray, k: int, seed: int
                    ) -> tuple[dict[str, float], float, float]:
    """Today's method at k: (group errors of its estimate, its coverage of the fleet's time,
    its hold-out time error)."""
    standard = standardised(feature_matrix(jobs)[1])
    labels = KMeans(n_clusters=k, n_init=10, random_state=seed).fit_predict(standard)
    estimate = np.zeros(fleet.values.shape[1])
    misplaced = holdout_estimate = 0.0
    for c in range(k):
        members = np.flatnonzero(labels == c)
        rep = members[np.argmin(np.linalg.norm(standard[members] - standard[members].mean(axis=0), axis=1))]
        estimate += len(members) * fleet.values[rep]
        holdout_estimate += len(members) * holdout[rep]
        misplaced += abs(len(members) * jobs[rep].finish_ns - sum(jobs[m].finish_ns for m in members))
    total = sum(j.finish_ns for j in jobs)
    return (group_errors(fleet.columns, estimate, fleet.totals), max(0.0, 1 - misplaced / total),
            _relative(holdout_estimate, holdout.sum()))


def _relative(estimate: float, actual: float) -> float:
    return abs(estimate - actual) / actual


def curve(name: str, jobs: list, holdout: np.ndarray, seed: int) -> None:
    fleet = estimands(jobs)
    started = time.perf_counter()
    path = greedy_path(fleet, len(jobs))
    seconds = time.perf_counter() - started
    families = {job_family(j) for j in jobs}
    print(f"\n{name}: {len(jobs)} jobs, {len(families)} families; new method's whole path "
          f"in {seconds:.2f} s")
    print(f"{'k':>3} {'old error':>10} {'old coverage':>13} {'old hold-out':>13} {'new error':>10} "
          f"{'new hold-out':>13}  new per group")
    for k in range(1, len(jobs) + 1):
        old, coverage, old_holdout = baseline_errors(jobs, fleet, holdout, k, seed)
        new = path[min(k, len(path)) - 1]  # the path stops once exact: later k add nothing
        new_holdout = _relative(new.weights @ holdout[new.chosen], holdout.sum())
        groups = " ".join(f"{g}={e:.3f}" for g, e in new.errors.items())
        print(f"{k:>3} {max_error(old):>10.1%} {coverage:>13.1%} {old_holdout:>13.1%} {new.error:>10.1%} "
              f"{new_holdout:>13.1%}  {groups}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=0, help="the old method's k-means seed")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-selection-") as work:
        drop, holdout = drop_fleet(Path(work))
    curve("nightly drop (make_drop), families derived", [replace(j, family=None) for j in drop], holdout, args.seed)
    curve("nightly drop (make_drop), families of job.json", drop, holdout, args.seed)
    generated = fleet_jobs(0)
    curve("generated fleet (test_selection_quality day 1)", generated_fleet(0),
          np.array([slower_network_ns(tables, groups) for _, _, tables, groups in generated], dtype=np.float64),
          args.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
