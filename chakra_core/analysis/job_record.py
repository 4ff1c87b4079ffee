"""What the fleet keeps of one converted job, from one JobAnalysis: its `traces` rows, its
collectives, its device time (`device_time` rows: job, rank, variant, family, ns, count;
`device_verdicts` rows: one per rank and variant with span, busy, idle by cause, overlap,
launches, what bounds the step and the number of steps, as recorded and as predicted), its
kernels by name (`kernels` rows), its stragglers (`stragglers` rows: one per straggler of a
job of several ranks, analysis/stragglers.py) and its program's fingerprint. The nightly writes these rows
to its tables; `chakra diff` compares two jobs through the same record. Jobs without device
kernels have no device or kernel rows."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from chakra_core.analysis import device_time
from chakra_core.analysis.device_time import CAUSES
from chakra_core.analysis.facade import VARIANTS, JobAnalysis
from chakra_core.analysis.history import fingerprint
from chakra_core.table_schema import TableSchema, column

# the step figures (device_time.STEP) a device_verdicts row keeps, declared (types, nulls) with the steps
VERDICT_FIGURES = ("span_ns", "busy_ns", "compute_ns", "busy_share", *(f"idle_{c}_ns" for c in CAUSES),
                   "exposed_comm_ns", "overlap", "launches", "launch_delay_p50_ns", "bound")

# The record's tables (the nightly adds its run_id: pipeline/tables.py)
_JOB, _RANK, _VARIANT = column("job_id", pa.string()), column("rank", pa.int32()), column("variant", pa.string())
DEVICE_TIME = TableSchema("device_time", (_JOB, _RANK, _VARIANT, *device_time.FAMILY.columns))
DEVICE_VERDICTS = TableSchema("device_verdicts", (
    _JOB, _RANK, _VARIANT, column("system", pa.string()),
    *(device_time.STEP.field(name) for name in VERDICT_FIGURES),
    column("steps", pa.int32())))
KERNELS = TableSchema("kernels", (_JOB, *device_time.TOP.columns, column("ranks", pa.int32())))
STRAGGLERS = TableSchema("stragglers", (
    _JOB, _RANK, column("cause", pa.string()), column("family", pa.string(), nullable=True),
    column("operator", pa.string(), nullable=True), column("cost_ns", pa.int64()), column("share", pa.float64()),
    column("step_ns", pa.int64())))


@dataclass
class JobRecord:
    job_id: str
    traces: list[dict]  # traces() rows, nested figures as dicts
    collectives: pa.Table | None  # with the rank; None for a job without ranks
    fingerprint: str
    device_time: list[dict] = field(default_factory=list)
    device_verdicts: list[dict] = field(default_factory=list)
    kernels: list[dict] = field(default_factory=list)
    stragglers: list[dict] = field(default_factory=list)
    path_step_ns: int = 0  # the critical path's step across the ranks (0: one rank)


def record_job(analysis: JobAnalysis) -> JobRecord:
    """The job's record (its Job's name is the job id); rows without run_id."""
    times, verdicts = device_rows(analysis)
    collectives = analysis.collectives() if analysis.job.tables else None
    return JobRecord(analysis.job.name, analysis.trace_rows(), collectives, fingerprint(analysis.job.tables),
                     times, verdicts, kernel_rows(analysis), straggler_rows(analysis),
                     analysis.straggler_report["step_ns"] if len(analysis.job.tables) > 1 else 0)


def straggler_rows(analysis: JobAnalysis) -> list[dict]:
    """One row per straggler of a job of several ranks, biggest cost first (none for one rank)."""
    if len(analysis.job.tables) < 2:
        return []
    report = analysis.straggler_report
    return [{"job_id": analysis.job.name, "rank": row["rank"], "cause": row["cause"], "family": row.get("family"),
             "operator": row.get("operator"), "cost_ns": row["cost_ns"], "share": row["share"],
             "step_ns": report["step_ns"]} for row in report["stragglers"]]


def device_rows(analysis: JobAnalysis) -> tuple[list[dict], list[dict]]:
    """(device_time rows, device_verdicts rows) of one job."""
    job_id = analysis.job.name
    if not analysis.device_ranks:
        return [], []
    times, verdicts = [], []
    for variant in VARIANTS:
        label = "recorded" if variant == "recorded" else analysis.prediction_label
        times += [{"job_id": job_id, "variant": variant, **row} for row in analysis.device_families(variant).to_pylist()]
        steps = analysis.device_steps(variant).to_pylist()
        counts = Counter(row["rank"] for row in steps if row["step"] != "all")
        verdicts += [{"job_id": job_id, "rank": row["rank"], "variant": variant, "system": label,
                      **{k: row[k] for k in VERDICT_FIGURES}, "steps": counts[row["rank"]]}
                     for row in steps if row["step"] == "all"]
    return times, verdicts


def kernel_rows(analysis: JobAnalysis) -> list[dict]:
    """One row per kernel name as recorded, over the job's ranks: count and total time summed,
    the median the median of the ranks' medians, and on how many ranks it ran."""
    if not analysis.device_ranks:
        return []
    by_name: dict[str, list[dict]] = {}
    for row in analysis.device_top_kernels("recorded", limit=None).to_pylist():
        by_name.setdefault(row["name"], []).append(row)
    return [{"job_id": analysis.job.name, "name": name, "family": rows[0]["family"],
             "count": sum(r["count"] for r in rows), "total_ns": sum(r["total_ns"] for r in rows),
             "median_ns": int(np.median([r["median_ns"] for r in rows])), "ranks": len(rows)}
            for name, rows in sorted(by_name.items(), key=lambda kv: -sum(r["total_ns"] for r in kv[1]))]
