"""The day's representative jobs: `chakra_core.analysis.select` over the warehouse's own rows.

Selection needs each job's statistics (its `traces` rows merged into one: select.merged_rank_rows,
computed where the job converted) and one simulation
on the reference system (`chakra_core.sim.reference`): the sweep's `native-ring` rows are
exactly that when the sweep has such an entry, else the jobs are simulated on the reference
system here (Ray tasks). A job without a successful reference simulation cannot be placed;
it still gets a row, with the reason in `status`. Every row also carries what the day's
subset estimates (`estimates`, `estimate_errors`, `estimate_error`): the day's figures, the
same on each row, so that one row answers "how far can these representatives be trusted".
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import pyarrow as pa

from chakra_core.analysis.select import (
    JobSummary,
    Selection,
    SelectionError,
    select_representatives,
)
from chakra_core.table_schema import TableSchema, column

DEFAULT_REPRESENTATIVES = 8
# representatives_table's rows: a job that could not be placed has only its status (the reason)
REPRESENTATIVES = TableSchema("representatives", (
    column("job_id", pa.string()), column("npus", pa.int32(), nullable=True),
    column("family", pa.string(), nullable=True), column("cluster", pa.int32(), nullable=True),
    column("representative", pa.bool_(), nullable=True),
    *(column(name, pa.float64(), nullable=True) for name in ("distance", "weight")),
    column("finish_ns", pa.int64(), nullable=True),
    *(column(name, pa.float64(), nullable=True) for name in (
        "cluster_time_share", "cluster_estimate_error", "coverage", "estimate_error")),
    *(column(name, pa.string(), nullable=True) for name in ("estimate_errors", "estimates")),
    column("k", pa.int32(), nullable=True), column("status", pa.string()), column("run_id", pa.string())))


def job_summaries(jobs: Mapping[str, tuple[int, dict]], reference_rows: list[dict]
                  ) -> tuple[list[JobSummary], dict[str, str]]:
    """Summaries of the jobs (job -> (ranks, select.merged_rank_rows of its traces rows)) with
    an `ok` reference simulation; the others with the reason."""
    simulated = {row["job_id"]: row for row in reference_rows}
    summaries, unplaced = [], {}
    for job_id, (ranks, row) in sorted(jobs.items()):
        sim = simulated.get(job_id)
        if sim is None or sim["status"] != "ok":
            unplaced[job_id] = f"not selected: no reference simulation ({sim['error'] if sim else 'not run'})"
            continue
        summaries.append(JobSummary(job_id, ranks, [row], sim["finish_ns"], sim["max_compute_ns"],
                                    sim["max_exposed_comm_ns"]))
    return summaries, unplaced


def _selected_rows(selection: Selection, summaries: list[JobSummary], run_id: str) -> list[dict]:
    clusters = {c["cluster"]: c for c in selection.clusters}
    npus = {s.job_id: s.npus for s in summaries}
    day = {"coverage": selection.coverage, "estimate_error": selection.error,
           "estimate_errors": json.dumps(selection.errors, sort_keys=True),
           "estimates": json.dumps(selection.estimates), "k": selection.k, "status": "ok", "run_id": run_id}
    return [{"job_id": job["job_id"], "npus": npus[job["job_id"]], "family": job["family"], "cluster": job["cluster"],
             "representative": job["representative"], "distance": job["distance"],
             "weight": clusters[job["cluster"]]["weight"] if job["representative"] else 0.0,
             "finish_ns": job["finish_ns"], "cluster_time_share": clusters[job["cluster"]]["time_share"],
             "cluster_estimate_error": clusters[job["cluster"]]["estimate_error"], **day}
            for job in selection.jobs]


def representatives_table(jobs: Mapping[str, tuple[int, dict]], reference_rows: list[dict], k: int,
                          run_id: str) -> pa.Table:
    """One `representatives` row per converted job of the day (columns: docs/pipeline.md)."""
    summaries, unplaced = job_summaries(jobs, reference_rows)
    rows = [{"job_id": job_id, "status": reason, "run_id": run_id} for job_id, reason in unplaced.items()]
    if summaries:
        try:
            rows += _selected_rows(select_representatives(summaries, min(k, len(summaries))), summaries, run_id)
        except SelectionError as exc:
            rows += [{"job_id": s.job_id, "status": f"not selected: {exc}", "run_id": run_id} for s in summaries]
    return REPRESENTATIVES.from_rows(sorted(rows, key=lambda r: r["job_id"]))
