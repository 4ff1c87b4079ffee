"""One job of a day: hash its files, convert (or copy) its rank traces into the warehouse,
and compute its statistics. Every file ends in exactly one of the ingest rows or reject rows.

A job is converted as a whole (process groups are inferred across ranks), so when one of its
trace files cannot be read, or two files claim one rank, the job's other files are rejected
too, naming the culprit. Its outputs are written to a staging folder and published (moved into
`traces/`) only once the whole job succeeded: a rejected job leaves nothing in the warehouse.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field

import pyarrow as pa

from chakra_core.analysis.facade import JobAnalysis
from chakra_core.analysis.validate import validate_table
from chakra_core.convert.job import convert_job
from chakra_core.convert.sources import convert_source
from chakra_core.errors import ChakraError
from chakra_core.format.etfile import read_table
from chakra_core.inputs import InputHashes, content_hashes, open_input
from chakra_core.format.job import Job, groups_url, rank_url, read_comm_groups, write_comm_groups
from chakra_core.outputs import open_output
from pipeline.device import device_rows
from pipeline.ingest import (
    SINGLE_FILE,
    InputFile,
    JobInput,
    groups_file,
    job_problem,
    source_file,
    source_options,
    unusable_files,
)
from pipeline.layout import (
    StorageError,
    describe,
    filesystem,
    join,
    publish,
    remove,
    staged,
    staging_dir,
    storage_fault,
    traces_dir,
)
from pipeline.tables import SCHEMAS


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


@dataclass
class _Published:
    et_files: list[str]  # in the warehouse's traces/, rank order
    comm_groups: str | None
    traces: list[dict]
    collectives: pa.Table | None
    device: tuple[list[dict], list[dict]]  # device_time and device_verdicts rows, without run_id
    reused: bool
    set_aside: dict[str, str] = field(default_factory=dict)  # side files the conversion did not use: name -> why


def process_job(job: JobInput, date: str, warehouse: str, run_id: str) -> JobOutcome:
    outcome = JobOutcome(job.job_id)
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
                                frozenset(_stored_name(f) for f in job.files if f.name in unusable))
            except Exception as exc:  # noqa: BLE001 - one bad job must not stop the night; the reason is recorded
                _raise_if_storage(exc, job, warehouse)
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
    outcome.device_time, outcome.device_verdicts = ([{**row, "run_id": run_id} for row in rows] for rows in done.device)
    outcome.prefix, outcome.ranks = join(out_dir, job.job_id), len(done.et_files)
    set_aside = {f.name: done.set_aside[_stored_name(f)] for f in usable if _stored_name(f) in done.set_aside}
    outcome.rejects += [_reject(job, f, hashes, "convert", set_aside[f.name], run_id)
                        for f in usable if f.name in set_aside]
    outcome.ingest = [{"job_id": job.job_id, "file": f.name, "kind": f.kind, "bytes": f.bytes,
                       "sha256": hashes[f.name], "status": "unchanged" if done.reused else "processed",
                       "duplicate_of": None, "run_id": run_id} for f in usable if f.name not in set_aside]
    return outcome


def _raise_if_storage(exc: Exception, job: JobInput, warehouse: str) -> None:
    """A fault of the storage (full, no rights, a bucket gone, a timeout) is not the job's: it
    ends the run with one line, and no input is rejected for it."""
    if storage_fault(exc) is not None:
        raise StorageError(f"storage failed while job {job.job_id} was processed (drop {job.url}, warehouse "
                           f"{warehouse}): {describe(exc)}") from None


def _hashes(job: JobInput, read: InputHashes) -> dict[str, str]:
    """The sha256 of each of the job's files that may be opened, by name."""
    return {f.name: read.of(f.url) for f in job.files if f.problem is None}


def _stored_name(f: InputFile) -> str:
    """The file's base name as stored (its `name` shows control characters escaped)."""
    return f.url.rsplit("/", 1)[-1]


def _publish(job: JobInput, out_dir: str, staging: str, read: InputHashes, accounted: frozenset[str]) -> _Published:
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
        tables, staged_files, staged_groups, set_aside = _convert(job, staging, accounted)
        et_files = [_moved(url, out_dir) for url in staged_files]
        summary = _summarise(job, tables, et_files, staged_groups)
        publish(staging, out_dir)
    comm_groups = _moved(staged_groups, out_dir) if staged_groups else None
    _write_manifest(out_dir, _hashes(job, read), et_files, comm_groups, set_aside)
    return _Published(et_files, comm_groups, *summary, reused=False, set_aside=set_aside)


def _moved(url: str, folder: str) -> str:
    return join(folder, url.rsplit("/", 1)[-1])


def _convert(job: JobInput, out_dir: str, accounted: frozenset[str]
             ) -> tuple[list[pa.Table], list[str], str | None, dict[str, str]]:
    """(rank tables, their files, communicator groups file, side files set aside by base name,
    with why) written into out_dir."""
    if job.trace_format == "pytorch_et":
        result = convert_job(job.url, out_dir, job.job_id, accounted=accounted)
        problem = result.lacking_rank or next(iter(result.mismatches), None)
        if problem:  # a rank missing, or ranks of two recordings: not one job
            raise InconsistentRanks(f"{job.job_id}: its ranks do not make one job: {problem}")
        set_aside = {url.rsplit("/", 1)[-1]: " ".join(why.split()) for url, why in result.set_aside.items()}
        return result.tables, result.et_files, result.comm_group_file, set_aside
    if job.trace_format in SINGLE_FILE:  # a FlexFlow graph or a text workload, options from job.json
        result = convert_source(source_file(job).url, out_dir, job.job_id, SINGLE_FILE[job.trace_format],
                                source_options(job))
        return result.tables, result.et_files, result.comm_group_file, {}
    return *_copy_chakra(job, out_dir), {}


def _summarise(job: JobInput, tables: list[pa.Table], paths: list[str], groups: str | None
               ) -> tuple[list[dict], pa.Table | None, tuple[list[dict], list[dict]]]:
    """traces rows (each with its published path), collectives and device time (device_rows)
    of the rank tables (with their communicator groups file)."""
    analysis = JobAnalysis(Job(tables, read_comm_groups(groups) if groups else {}, job.job_id))
    rows = [{"job_id": job.job_id, "path": path, "source_format": job.trace_format, **row}
            for path, row in zip(paths, analysis.trace_rows())]
    collectives = None
    if tables:
        found = analysis.collectives()
        collectives = found.add_column(0, "job_id", pa.array([job.job_id] * found.num_rows, pa.string())) \
            .cast(SCHEMAS["collectives"])
    return rows, collectives, device_rows(analysis)


def _blame(exc: Exception, usable: list[InputFile]) -> tuple[InputFile | None, str]:
    """The file a conversion error names (None when it names none of the job's) and the error, on one line."""
    message = str(exc) if isinstance(exc, (ChakraError, OSError, ValueError)) else f"{type(exc).__name__}: {exc}"
    message = " ".join(message.split())
    culprit = next((f for f in usable if f.url.split("://")[-1] in message or f.basename in message), None)
    return culprit, message


MANIFEST = "_manifest.json"
COPY_CHUNK = 1 << 20


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


def _copy_chakra(job: JobInput, out_dir: str) -> tuple[list[pa.Table], list[str], str | None]:
    """Chakra ETs are copied as <job>.<R>.et, byte for byte (gunzipped), and validated (ingest.job_problem
    checked that the ranks are 0..N-1, one file each); their communicator groups, checked, as
    <job>.comm_groups.json."""
    tables, urls = [], []
    for f in sorted((f for f in job.files if f.kind == "chakra_et"), key=lambda f: f.rank):
        url = rank_url(join(out_dir, job.job_id), f.rank)
        with open_input(f.url) as source, open_output(url, "wb", gzipped=False) as copy:
            shutil.copyfileobj(source, copy, COPY_CHUNK)
        tables.append(_validated(url, f.url))
        urls.append(url)
    source = groups_file(job)
    if source is None:
        return tables, urls, None
    groups = read_comm_groups(source.url)  # a bad file raises, naming itself and the key
    outside = next(((gid, rank) for gid, members in groups.items() for rank in members if rank >= len(urls)), None)
    if outside:
        raise ValueError(f"{source.url}: group {outside[0]} names NPU {outside[1]}, but the job has {len(urls)} ranks")
    return tables, urls, write_comm_groups(groups, groups_url(join(out_dir, job.job_id)))


def _validated(copy: str, original: str) -> pa.Table:
    """The copy's table, when it decodes without errors; problems name the original file."""
    try:
        table = read_table(copy)
    except ChakraError as exc:
        raise ValueError(str(exc).replace(copy, original)) from None
    errors = [x for x in validate_table(table, original) if x.severity == "error"]
    if errors:
        raise ValueError(f"{original}: {errors[0].message}")
    return table


def _reject(job: JobInput, f, hashes: dict, stage: str, reason: str, run_id: str) -> dict:
    return {"job_id": job.job_id, "file": f.name, "bytes": f.bytes, "sha256": hashes.get(f.name), "stage": stage,
            "reason": reason, "run_id": run_id}

