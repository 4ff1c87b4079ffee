"""One job of a day: hash its files, convert (or copy) its rank traces into the warehouse,
and compute its statistics. Every file ends in exactly one of the ingest rows or reject rows.

A job is converted as a whole (process groups are inferred across ranks), so when one of its
trace files cannot be read the job's other files are rejected too, naming the culprit.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pyarrow as pa

from chakra_core.convert.job import convert_job
from chakra_core.errors import ChakraError
from chakra_core.etfile import read_table, write_table
from chakra_core.stats import collective_rows, trace_row
from chakra_core.validate import validate_table
from pipeline.ingest import CHAKRA_ET, JobInput, sha256
from pipeline.layout import filesystem, join, traces_dir
from pipeline.tables import SCHEMAS


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


def process_job(job: JobInput, date: str, warehouse: str, run_id: str) -> JobOutcome:
    outcome = JobOutcome(job.job_id)
    hashes = {f.name: sha256(f.url) for f in job.files}
    unknown = [f for f in job.files if f.kind == "unknown"]
    for f in unknown:
        outcome.rejects.append(_reject(job, f, hashes, "ingest", "unknown file type (expected rank<R>.et.json[.gz],"
                                       " rank<R>.kineto.json[.gz], <name>.<R>.et or job.json)", run_id))
    usable = [f for f in job.files if f.kind != "unknown"]
    if job.trace_format == "none":
        for f in usable:
            outcome.rejects.append(_reject(job, f, hashes, "ingest", "the job folder holds no rank trace", run_id))
        return outcome
    out_dir = traces_dir(warehouse, date, job.job_id)
    reused = _earlier_conversion(out_dir, hashes)
    try:
        if reused is not None:  # the same files were converted by an earlier run of this day
            et_files, outcome.comm_groups = reused["et_files"], reused["comm_groups"]
        elif job.trace_format == "pytorch_et":
            result = convert_job(job.url, out_dir, job.job_id)
            et_files, outcome.comm_groups = result.et_files, result.comm_group_file
        else:
            et_files = _copy_chakra(job, out_dir)
            outcome.comm_groups = None
    except Exception as exc:  # noqa: BLE001 - one bad job must not stop the night; the reason is recorded
        message = str(exc) if isinstance(exc, (ChakraError, OSError, ValueError)) else f"{type(exc).__name__}: {exc}"
        culprit = next((f for f in usable if f.url.split("://")[-1] in message or f.name.split("/")[-1] in message),
                       None)
        for f in usable:
            reason = message if f is culprit or culprit is None else f"{culprit.name} of this job was rejected"
            outcome.rejects.append(_reject(job, f, hashes, "convert", reason, run_id))
        return outcome
    if reused is None:
        _write_manifest(out_dir, hashes, et_files, outcome.comm_groups)
    outcome.prefix, outcome.ranks = join(out_dir, job.job_id), len(et_files)
    collectives = []
    for rank, url in enumerate(et_files):
        table = read_table(url)
        outcome.traces.append({"job_id": job.job_id, "rank": rank, "path": url, "source_format": job.trace_format,
                               **trace_row(table)})
        rows = collective_rows(table)
        collectives.append(rows.add_column(0, "rank", pa.array([rank] * rows.num_rows, pa.int32()))
                           .add_column(0, "job_id", pa.array([job.job_id] * rows.num_rows, pa.string())))
    outcome.collectives = pa.concat_tables(collectives).cast(SCHEMAS["collectives"]) if collectives else None
    for f in usable:
        outcome.ingest.append({"job_id": job.job_id, "file": f.name, "kind": f.kind, "bytes": f.bytes,
                               "sha256": hashes[f.name], "status": "unchanged" if reused else "processed",
                               "duplicate_of": None, "run_id": run_id})
    return outcome


MANIFEST = "_manifest.json"


def _earlier_conversion(out_dir: str, hashes: dict[str, str]) -> dict | None:
    """What an earlier run converted from exactly these files (same names, same contents), if
    its outputs are all still there; re-running a day then skips the conversion."""
    fs, path = filesystem(join(out_dir, MANIFEST))
    try:
        with fs.open(path, "r") as f:
            manifest = json.load(f)
    except (OSError, ValueError):
        return None
    if manifest.get("hashes") != hashes:
        return None
    outputs = manifest.get("et_files", []) + ([manifest["comm_groups"]] if manifest.get("comm_groups") else [])
    return manifest if outputs and all(filesystem(url)[0].exists(filesystem(url)[1]) for url in outputs) else None


def _write_manifest(out_dir: str, hashes: dict[str, str], et_files: list[str], comm_groups: str | None) -> None:
    """Written last, so a conversion interrupted half-way is never taken for a finished one."""
    fs, path = filesystem(join(out_dir, MANIFEST))
    with fs.open(path, "w") as f:
        json.dump({"hashes": hashes, "et_files": et_files, "comm_groups": comm_groups}, f, indent=1)


def _copy_chakra(job: JobInput, out_dir: str) -> list[str]:
    """Chakra ETs are validated and copied as <job>.<R>.et (ranks 0..N-1, none missing)."""
    by_rank = {}
    for f in job.files:
        if f.kind == "chakra_et":
            by_rank[int(CHAKRA_ET.match(f.name.rsplit("/", 1)[-1]).group(2))] = f
    if sorted(by_rank) != list(range(len(by_rank))):
        raise ValueError(f"{job.url}: ranks {sorted(by_rank)} are not 0..{len(by_rank) - 1}")
    urls = []
    for rank, f in sorted(by_rank.items()):
        table = read_table(f.url)  # an unreadable file raises, naming itself
        errors = [x for x in validate_table(table, f.url) if x.severity == "error"]
        if errors:
            raise ValueError(f"{f.url}: {errors[0].message}")
        url = join(out_dir, f"{job.job_id}.{rank}.et")
        write_table(table, url)
        urls.append(url)
    return urls


def _reject(job: JobInput, f, hashes: dict, stage: str, reason: str, run_id: str) -> dict:
    return {"job_id": job.job_id, "file": f.name, "bytes": f.bytes, "sha256": hashes.get(f.name), "stage": stage,
            "reason": reason, "run_id": run_id}

