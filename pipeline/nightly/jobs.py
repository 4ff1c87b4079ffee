"""One job of a day: hash its files, convert (or copy) its rank traces into the warehouse,
and compute its statistics. Every file ends in exactly one of the ingest rows or reject rows.

A job is converted as a whole (process groups are inferred across ranks), so when one of its
trace files cannot be read, or two files claim one rank, the job's other files are rejected
too, naming the culprit. Its outputs are written to a staging folder and published (moved into
`traces/`) only once the whole job succeeded: a rejected job leaves nothing in the warehouse.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field

import pyarrow as pa

from chakra_core.analysis.facade import JobAnalysis
from chakra_core.analysis import job_record, stats, step_work
from chakra_core.analysis.job_record import JobRecord, record_job
from chakra_core.errors import ChakraError
from chakra_core.format.etfile import read_table
from chakra_core.format.job import Job, read_comm_groups
from chakra_core.inputs import InputHashes, content_hashes
from chakra_core.outputs import open_output
from chakra_core.table_schema import TableSchema, column
from pipeline.nightly import bigjobs
from pipeline.nightly.ingest import InputFile, JobInput, job_input, job_problem, source_options, unusable_files
from pipeline.layout import (
    filesystem,
    join,
    publish,
    raise_if_storage,
    remove,
    staged,
    staging_dir,
    traces_dir,
)

# The tables of a job's files and traces (every row made here; rejects of files outside job folders: run.py)
_JOB, _FILE, _RUN = column("job_id", pa.string()), column("file", pa.string()), column("run_id", pa.string())
INGEST_LOG = TableSchema("ingest_log", (
    _JOB, _FILE, column("kind", pa.string()), column("bytes", pa.int64()), column("sha256", pa.string()),
    column("status", pa.string()), column("duplicate_of", pa.string(), nullable=True), _RUN))
REJECTS = TableSchema("rejects", (  # no job: a file outside job folders; no sha256: a file never opened
    column("job_id", pa.string(), nullable=True), _FILE, column("bytes", pa.int64()),
    column("sha256", pa.string(), nullable=True), column("stage", pa.string()), column("reason", pa.string()), _RUN))
TRACES = TableSchema("traces", (_JOB, column("rank", pa.int32()), column("path", pa.string()),
                                column("source_format", pa.string()), *stats.TRACE_ROW.columns,
                                *step_work.TRACE_FIGURES))
COLLECTIVES = TableSchema("collectives", (_JOB, column("rank", pa.int32()), *stats.COLLECTIVE_ROWS.columns))
# the job record's device and kernel rows, with the night's run id
DEVICE_TIME, DEVICE_VERDICTS, KERNELS, STRAGGLERS = (t.extended(back=[_RUN]) for t in (
    job_record.DEVICE_TIME, job_record.DEVICE_VERDICTS, job_record.KERNELS, job_record.STRAGGLERS))


class InconsistentRanks(ChakraError):
    """Rank traces that convert one by one but do not make one job; the job is rejected whole."""


@dataclass
class JobOutcome:
    job_id: str
    ingest: list[dict] = field(default_factory=list)
    rejects: list[dict] = field(default_factory=list)
    traces: list[dict] = field(default_factory=list)
    collectives: pa.Table | None = None
    prefix: str | None = None  # warehouse prefix of the rank files, when the job converted
    ranks: int = 0
    comm_groups: str | None = None
    device_time: list[dict] = field(default_factory=list)
    device_verdicts: list[dict] = field(default_factory=list)
    kernels: list[dict] = field(default_factory=list)
    stragglers: list[dict] = field(default_factory=list)
    path_step_ns: int = 0
    fingerprint: str | None = None
    by_rank: bool = False  # converted a Ray task per rank (pipeline/nightly/bigjobs.py)


@dataclass
class _Published:
    et_files: list[str]  # in the warehouse's traces/, rank order
    comm_groups: str | None
    traces: list[dict]
    collectives: pa.Table | None
    record: JobRecord  # device, kernel rows and fingerprint, without run_id
    reused: bool
    set_aside: dict[str, str] = field(default_factory=dict)  # side files the conversion did not use: name -> why


def process_job(job: JobInput, date: str, warehouse: str, run_id: str,
                per_rank_bytes: int = bigjobs.PER_RANK_BYTES, log: bigjobs.ProgressLog | None = None) -> JobOutcome:
    """per_rank_bytes: a PyTorch job whose largest rank reads this much converts a Ray task per
    rank (bigjobs.converts_by_rank; then this runs in a Ray task, and `log` hears of its ranks)."""
    outcome = JobOutcome(job.job_id, by_rank=bigjobs.converts_by_rank(job, per_rank_bytes))
    if job.problem is not None:  # nothing of it is opened
        outcome.rejects = [_reject(job, f, {}, "ingest", job.problem, run_id) for f in job.files]
        return outcome
    with content_hashes(f.url for f in job.files if f.problem is None) as read:  # hashed as they are read
        unusable = unusable_files(job)
        usable = [f for f in job.files if f.name not in unusable]
        out_dir = traces_dir(warehouse, date, job.job_id)
        stage, problem = "ingest", job_problem(job)
        if problem is not None and problem[0] is not None and problem[0].name in unusable:
            unusable[problem[0].name] = problem[1]  # a file the job cannot be told without says why
        if problem is None:
            try:
                done = _publish(job, out_dir, staging_dir(warehouse, date, job.job_id, run_id), read,
                                frozenset(_stored_name(f) for f in job.files if f.name in unusable), outcome.by_rank,
                                log)
            except Exception as exc:  # noqa: BLE001 - one bad job must not stop the night; the reason is recorded
                # a storage fault is not the job's: the run ends in one line, and no input is rejected for it
                raise_if_storage(exc, f"job {job.job_id} was processed (drop {job.url}, warehouse {warehouse})")
                stage, problem = "convert", _blame(exc, usable)
        hashes = _hashes(job, read)
    outcome.rejects = [_reject(job, f, hashes, "ingest", unusable[f.name], run_id)
                       for f in job.files if f.name in unusable]
    if problem is not None:
        remove(out_dir)  # an earlier run's publication of the job must not outlive this run's rejection
        culprit, reason = problem
        outcome.rejects += [_reject(job, f, hashes, stage, reason if culprit is None or culprit is f else
                                    f"{culprit.name} of this job was rejected", run_id) for f in usable]
        return outcome
    outcome.traces, outcome.collectives, outcome.comm_groups = done.traces, done.collectives, done.comm_groups
    outcome.device_time, outcome.device_verdicts, outcome.kernels, outcome.stragglers = (
        [{**row, "run_id": run_id} for row in rows]
        for rows in (done.record.device_time, done.record.device_verdicts, done.record.kernels,
                     done.record.stragglers))
    outcome.fingerprint, outcome.path_step_ns = done.record.fingerprint, done.record.path_step_ns
    outcome.prefix, outcome.ranks = join(out_dir, job.job_id), len(done.et_files)
    set_aside = {f.name: done.set_aside[_stored_name(f)] for f in usable if _stored_name(f) in done.set_aside}
    outcome.rejects += [_reject(job, f, hashes, "convert", set_aside[f.name], run_id)
                        for f in usable if f.name in set_aside]
    outcome.ingest = [{"job_id": job.job_id, "file": f.name, "kind": f.kind, "bytes": f.bytes,
                       "sha256": hashes[f.name], "status": "unchanged" if done.reused else "processed",
                       "duplicate_of": None, "run_id": run_id} for f in usable if f.name not in set_aside]
    return outcome


def _hashes(job: JobInput, read: InputHashes) -> dict[str, str]:
    """The sha256 of each of the job's files that may be opened, by name."""
    return {f.name: read.of(f.url) for f in job.files if f.problem is None}


def _stored_name(f: InputFile) -> str:
    """The file's base name as stored (its `name` shows control characters escaped)."""
    return f.url.rsplit("/", 1)[-1]


def _publish(job: JobInput, out_dir: str, staging: str, read: InputHashes, accounted: frozenset[str],
             by_rank: bool, log: bigjobs.ProgressLog | None) -> _Published:
    """The job's rank traces in the warehouse, with their statistics: an earlier run's when it
    converted exactly these files; else converted (or copied) into the staging folder,
    summarised from the tables in memory, and only then moved into place. accounted: base names
    of the files rejected alone, which the conversion leaves alone."""
    reused = _earlier_conversion(out_dir, lambda: _hashes(job, read))
    if reused is not None:
        tables = [read_table(url) for url in reused["et_files"]]
        return _Published(reused["et_files"], reused["comm_groups"],
                          *_summarise(job, tables, reused["et_files"], reused["comm_groups"]), reused=True,
                          set_aside=reused.get("set_aside", {}))
    with staged(staging):
        tables, staged_files, staged_groups, set_aside = _convert(job, staging, accounted, by_rank, log)
        et_files = [_moved(url, out_dir) for url in staged_files]
        summary = _summarise(job, tables, et_files, staged_groups)
        publish(staging, out_dir)
    comm_groups = _moved(staged_groups, out_dir) if staged_groups else None
    _write_manifest(out_dir, _hashes(job, read), et_files, comm_groups, set_aside)
    return _Published(et_files, comm_groups, *summary, reused=False, set_aside=set_aside)


def _moved(url: str, folder: str) -> str:
    return join(folder, url.rsplit("/", 1)[-1])


def _convert(job: JobInput, out_dir: str, accounted: frozenset[str], by_rank: bool,
             log: bigjobs.ProgressLog | None) -> tuple[list[pa.Table], list[str], str | None, dict[str, str]]:
    """(rank tables, their files, communicator groups file, side files set aside by base name,
    with why) written into out_dir by the job's source, as `chakra convert` would (its options
    from job.json), a Ray task per rank when by_rank. Ranks that do not make one job (one missing
    from the traces' world group, or collectives that do not match: two recordings) are an
    error, the whole job rejected."""
    if by_rank:  # (the files are then hashed apart from what the rank tasks read: InputHashes.of)
        result = bigjobs.convert_by_rank(job_input(job), out_dir, job.job_id, accounted, log)
    else:
        result = job.source.convert(job_input(job), out_dir, job.job_id, source_options(job), accounted=accounted)
    problem = result.lacking_rank or next(iter(result.mismatches), None)
    if problem:
        raise InconsistentRanks(f"{job.job_id}: its ranks do not make one job: {problem}")
    set_aside = {url.rsplit("/", 1)[-1]: " ".join(why.split()) for url, why in result.set_aside.items()}
    return result.tables, result.et_files, result.comm_group_file, set_aside


def _summarise(job: JobInput, tables: list[pa.Table], paths: list[str], groups: str | None
               ) -> tuple[list[dict], pa.Table | None, JobRecord]:
    """traces rows (each with its published path), collectives and the job's record
    (job_record.py) of the rank tables (with their communicator groups file)."""
    record = record_job(JobAnalysis(Job(tables, read_comm_groups(groups) if groups else {}, job.job_id)))
    rows = [{"job_id": job.job_id, "path": path, "source_format": job.trace_format, **row}
            for path, row in zip(paths, record.traces)]
    collectives = None
    if record.collectives is not None:
        found = record.collectives
        collectives = COLLECTIVES.from_table(
            found.add_column(0, "job_id", pa.array([job.job_id] * found.num_rows, pa.string())))
    return rows, collectives, record


def _blame(exc: Exception, usable: list[InputFile]) -> tuple[InputFile | None, str]:
    """The file a conversion error names (None when it names none of the job's) and the error, on one line."""
    message = str(exc) if isinstance(exc, (ChakraError, OSError, ValueError)) else f"{type(exc).__name__}: {exc}"
    message = " ".join(message.split())
    culprit = next((f for f in usable if f.url.split("://")[-1] in message or f.basename in message), None)
    return culprit, message


MANIFEST = "_manifest.json"


def _earlier_conversion(out_dir: str, hashes: Callable[[], dict[str, str]]) -> dict | None:
    """What an earlier run converted from exactly these files (same names, same contents), if
    its outputs are all still there; re-running a day then skips the conversion. The files are
    hashed only where there is such a run to compare with."""
    fs, path = filesystem(join(out_dir, MANIFEST))
    try:
        with fs.open(path, "r") as f:
            manifest = json.load(f)
    except (OSError, ValueError):
        return None
    if manifest.get("hashes") != hashes():
        return None
    outputs = manifest.get("et_files", []) + ([manifest["comm_groups"]] if manifest.get("comm_groups") else [])
    return manifest if outputs and all(filesystem(url)[0].exists(filesystem(url)[1]) for url in outputs) else None


def _write_manifest(out_dir: str, hashes: dict[str, str], et_files: list[str], comm_groups: str | None,
                    set_aside: dict[str, str]) -> None:
    """Written last, once the job is published, so a conversion or a publication interrupted
    half-way (on object stores a folder moves file by file) is never taken for a finished one."""
    with open_output(join(out_dir, MANIFEST), "w") as f:
        json.dump({"hashes": hashes, "et_files": et_files, "comm_groups": comm_groups, "set_aside": set_aside}, f,
                  indent=1)


def _reject(job: JobInput, f, hashes: dict, stage: str, reason: str, run_id: str) -> dict:
    return {"job_id": job.job_id, "file": f.name, "bytes": f.bytes, "sha256": hashes.get(f.name), "stage": stage,
            "reason": reason, "run_id": run_id}

