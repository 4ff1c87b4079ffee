"""What every source's conversion returns and how its outputs are written (convert/sources.py):
`<prefix>.<R>.et` per rank, `<prefix>.comm_groups.json` and `<prefix>.report.json`, replacing an
earlier conversion with the same prefix as a set (its extra ranks removed; a failed conversion
leaves it whole)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field

import fsspec
import pyarrow as pa

from chakra_core.format.job import Job, groups_url, rank_url, remove_other_ranks, write_comm_groups
from chakra_core.outputs import afterwards, open_output, together

# Whether the caller analyses the tables next (JobResult.tables): the nightly does; `chakra convert`
# does not, and a converter that writes its tables batch by batch (pytorch/job.py) then never
# holds a whole one.
_TABLES_WANTED: ContextVar[bool] = ContextVar("tables_wanted", default=True)


@contextlib.contextmanager
def tables_not_kept() -> Iterator[None]:
    """Conversions inside the block may leave JobResult.tables empty."""
    token = _TABLES_WANTED.set(False)
    try:
        yield
    finally:
        _TABLES_WANTED.reset(token)


def tables_wanted() -> bool:
    return _TABLES_WANTED.get()


@dataclass
class JobResult:
    prefix: str
    out_dir: str
    ranks: list[int]
    et_files: list[str]
    comm_group_file: str
    report_file: str | None  # None: nothing to report (a copy of Chakra ETs)
    reports: list[dict]
    mismatches: list[str]
    inference_notes: list[str]
    nodes: int = 0
    host_nodes: int = 0
    unprofiled_step_ns: list[int] | None = None  # per timed step, the slowest rank's (every rank timed)
    input_notes: list[str] = field(default_factory=list)  # files seen and not used, each with why
    set_aside: dict[str, str] = field(default_factory=dict)  # side files of no use: url -> the reason
    lacking_rank: str | None = None  # a rank of the traces' world group the job lacks (pytorch/job.lacking_rank)
    tables: list[pa.Table] = field(default_factory=list, repr=False)  # as written, for a caller analysing them next (tables_wanted)
    source: dict | None = None  # a FlexFlow graph or text workload: what was read and how (convert.sources)
    profiler_cost: dict | None = None  # profiler_cost.json beside the traces, as read (checked by chakra calibrate)

    def summary(self) -> dict:
        return {"prefix": self.prefix, "out_dir": self.out_dir, "ranks": self.ranks, "et_files": self.et_files,
                "comm_group_file": self.comm_group_file, "nodes": self.nodes, "host_nodes": self.host_nodes,
                "collectives_match": not self.mismatches, "mismatches": self.mismatches,
                "inference": self.inference_notes, "ranks_report": self.reports,
                "inputs": self.input_notes + list(self.set_aside.values()),
                **({"unprofiled_step_ns": self.unprofiled_step_ns} if self.unprofiled_step_ns else {}),
                **({"source": self.source} if self.source else {}),
                **({"profiler_cost": self.profiler_cost} if self.profiler_cost else {})}


def write_converted(job: Job, out_dir: str, prefix: str, source: dict, mismatches: list[str],
                    unprofiled_step_ns: list[int] | None = None, set_aside: dict[str, str] | None = None) -> JobResult:
    """A job converted from another format written as a PyTorch one is: its ranks through
    Job.write, its groups ("{}" when it has none) and the report, whose `source` says what was read
    (with the unprofiled step times and the input files set aside, where the source has them)."""
    job_prefix = f"{out_dir}/{prefix}"
    result = JobResult(prefix, out_dir, list(range(job.npus)), [rank_url(job_prefix, r) for r in range(job.npus)],
                       groups_url(job_prefix), f"{job_prefix}.report.json", rank_reports(job), list(mismatches), [],
                       nodes=sum(t.num_rows for t in job.tables), source=source, tables=job.tables,
                       unprofiled_step_ns=unprofiled_step_ns, set_aside=dict(set_aside or {}))

    def write() -> None:
        job.write(out_dir, prefix)
        if not job.comm_groups:
            write_comm_groups({}, result.comm_group_file)

    return published(result, write)


def rank_reports(job: Job) -> list[dict]:
    """Per rank: nodes, compute nodes, sends, receives and collectives by type (ranks that share a
    table share its counts)."""
    from chakra_core.analysis.info import summarize_table

    summaries: dict[int, dict] = {}
    reports = []
    for rank, table in enumerate(job.tables):
        s = summaries.setdefault(id(table), summarize_table(table, f"rank {rank}"))
        types = s["node_types"]
        reports.append({"rank": rank, "nodes": s["nodes"], "compute": types.get("COMP_NODE", 0),
                        "sends": types.get("COMM_SEND_NODE", 0), "recvs": types.get("COMM_RECV_NODE", 0),
                        "collectives": {k: v["count"] for k, v in s["collectives"].items()},
                        "compute_us": s["total_duration_micros"], "notes": []})
    return reports


def published(result: JobResult, write: Callable[[], None]) -> JobResult:
    """Runs write (the ranks and groups), then writes the report: together they replace an
    earlier job of the prefix as a set (its extra ranks removed), or, when anything fails,
    leave it whole."""
    fs, root = fsspec.core.url_to_fs(result.out_dir)
    fs.makedirs(root, exist_ok=True)
    with together():
        write()
        if result.report_file:
            with open_output(result.report_file, "w") as f:
                json.dump(result.summary(), f, indent=1)
        afterwards(lambda: remove_other_ranks(f"{result.out_dir}/{result.prefix}", set(result.ranks)))
    return result
