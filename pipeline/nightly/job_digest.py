"""What a night keeps of a job once its worker has written the job's rows as table files.

A Ray task processes a job (pipeline/nightly/jobs.py: process_job), writes every row it made as data
files of the night's tables (chakra_core/warehouse/parts.py) and returns a JobDigest: the
files' URLs and what the driver needs to schedule, select and summarise, a few KB a job
whatever its ranks and nodes. The driver never holds a job's rows (docs/pipeline.md,
'What the driver holds').
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from chakra_core.analysis.history import figures
from chakra_core.analysis.select import merged_rank_rows
from pipeline.nightly.jobs import JobOutcome
from pipeline.tables import write_rows


@dataclass
class JobDigest:
    job_id: str
    files: dict[str, list[str]] = field(default_factory=dict)  # table -> data files written for the job
    prefix: str | None = None  # warehouse prefix of the rank files, when the job converted
    ranks: int = 0
    nodes: int = 0
    comm_groups: str | None = None
    fingerprint: str | None = None
    by_rank: bool = False
    files_processed: int = 0
    rejected_files: int = 0
    figures: dict[str, float] = field(default_factory=dict)  # its job_history figures but the simulated ones
    selection_row: dict | None = None  # select.merged_rank_rows of its traces rows


def part_name(run_id: str, job_id: str) -> str:
    """A job's data file name: the run, then a hash of the job id (any text: never a path)."""
    return f"{run_id}-{hashlib.sha256(job_id.encode()).hexdigest()[:20]}"


def digest(outcome: JobOutcome, warehouse: str, date: str, run_id: str) -> JobDigest:
    """Write the job's rows as data files of the night's tables; what the driver keeps of it."""
    name = part_name(run_id, outcome.job_id)
    rows = {"ingest_log": outcome.ingest, "rejects": outcome.rejects, "traces": outcome.traces,
            "device_time": outcome.device_time, "device_verdicts": outcome.device_verdicts,
            "kernels": outcome.kernels, "stragglers": outcome.stragglers}
    if outcome.collectives is not None:
        rows["collectives"] = outcome.collectives
    files = {table: urls for table, data in rows.items() if (urls := write_rows(warehouse, table, date, name, data))}
    found = JobDigest(outcome.job_id, files, outcome.prefix, outcome.ranks, sum(t["nodes"] for t in outcome.traces),
                      outcome.comm_groups, outcome.fingerprint, outcome.by_rank, len(outcome.ingest),
                      len(outcome.rejects))
    if outcome.prefix:
        found.figures = figures(outcome.traces, outcome.collectives, outcome.device_time, outcome.device_verdicts,
                                None, outcome.path_step_ns, outcome.stragglers)
        found.selection_row = merged_rank_rows(outcome.traces) if outcome.traces else None
    return found
