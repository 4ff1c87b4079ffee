"""The jobs of a sweep, from wherever they are: folders of job folders (local or s3://), a day the
nightly flow converted, synthetic jobs sampled from a saved synthesizer model, generated
jobs (`chakra generate` specs) and converted ones (`chakra convert` specs: a FlexFlow task
graph or an ASTRA-sim 1.0 text workload).

Listing (`list_jobs`, on the driver) only names the jobs and their NPU counts, so that the
sweep's size is known before any work. `prepare_job` (a Ray task per job) then makes the
synthetic, generated and converted ones under `WAREHOUSE/sweeps/<name>/jobs/<job_id>/` (reused by a
re-run: a marker written last holds their hash) and hashes every job's content: that hash,
with a point's configuration, is the key a re-run skips. A batch reads the job once into
worker memory (`read_sweep_job`): every rank decoded, the node tables its points share.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
from dataclasses import dataclass, replace
from functools import lru_cache

import fsspec

from chakra_core.analysis.fleet import find_jobs
from chakra_core.convert import sources
from chakra_core.format.etfile import read_table
from chakra_core.format.job import Job, groups_url, read_comm_groups
from chakra_core.inputs import sha256
from chakra_core.outputs import open_output
from chakra_core.warehouse.snapshots import SnapshotError, read_day
from pipeline.layout import filesystem, join
from pipeline.sweep.file import SweepError

MADE = "_sweep_job.json"  # written last into a made job's folder: its files and hash


@dataclass(frozen=True)
class Synthetic:
    model: str
    npus: int
    seed: int
    cluster: int


@dataclass(frozen=True)
class Generated:
    workload: str
    npus: int
    options: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Converted:
    source: str  # the FlexFlow graph or text workload (a URL)
    format: str
    options: tuple[tuple[str, object], ...]  # SourceOptions fields that differ from the defaults


@dataclass(frozen=True)
class SweepJob:
    job_id: str
    origin: str  # the job's folder, date=<d>, or the synthetic or generate spec
    npus: int  # the traced rank count
    files: tuple[str, ...] = ()  # rank files in rank order (made jobs: once prepared)
    comm_groups: str | None = None  # a candidate until prepared: None there when the file does not exist
    recipe: Synthetic | Generated | Converted | None = None
    sha256: str | None = None


@dataclass(frozen=True)
class Sources:
    folders: tuple[str, ...] = ()
    date: str | None = None
    warehouse: str | None = None  # of the date's traces
    synthetic: str | None = None  # a model file
    npus: tuple[int, ...] = ()
    count: int = 0
    generate: tuple[str, ...] = ()
    convert: tuple[str, ...] = ()


def list_jobs(sources: Sources) -> tuple[list[SweepJob], list[str]]:
    """Every job of the sources and a line per folder that is not a job; job ids must be unique."""
    jobs: list[SweepJob] = []
    problems: list[str] = []
    if sources.folders:
        found, problems = find_jobs(sources.folders)
        jobs += [SweepJob(j.job_id, j.folder, j.ranks, j.rank_files, j.comm_groups) for j in found]
    if sources.date:
        jobs += day_jobs(sources.warehouse, sources.date)
    if sources.synthetic:
        jobs += synthetic_jobs(sources.synthetic, sources.npus, sources.count)
    jobs += [generated_job(spec) for spec in sources.generate]
    jobs += [converted_job(spec) for spec in sources.convert]
    ids = [j.job_id for j in jobs]
    twice = next((i for i in ids if ids.count(i) > 1), None)
    if twice:
        raise SweepError(f"job {twice!r} comes from two sources; give each job once")
    if not jobs:
        raise SweepError("no jobs: give --jobs, --date, --synthetic, --generate or --convert"
                         + (f" ({'; '.join(problems[:3])})" if problems else ""))
    return jobs, problems


def day_jobs(warehouse: str, date: str) -> list[SweepJob]:
    """The jobs the nightly flow converted that day (its `traces` table)."""
    try:
        rows = read_day(warehouse, "traces", date).select(["job_id", "rank", "path"]).to_pylist()
    except SnapshotError:
        rows = []
    if not rows:
        raise SweepError(f"--date {date}: no traces for that day in {warehouse}")
    files: dict[str, dict[int, str]] = {}
    for row in rows:
        files.setdefault(row["job_id"], {})[row["rank"]] = row["path"]
    return [SweepJob(job, f"date={date}", len(ranks), tuple(ranks[r] for r in sorted(ranks)),
                     groups_url(ranks[0].rsplit(".", 2)[0]))  # .../<job>.0.et -> .../<job>.comm_groups.json
            for job, ranks in sorted(files.items())]


def synthetic_jobs(model_url: str, npus: tuple[int, ...], count: int) -> list[SweepJob]:
    """`count` jobs per NPU count, clusters in their training proportions at that count (as
    chakra_core.synth.sample.sample_jobs draws them)."""
    from chakra_core.synth.model import ModelFileError, load_model
    from chakra_core.synth.program import cluster_weights
    from chakra_core.synth.sample import allocate

    if not npus or count < 1 or min(npus) < 2:
        raise SweepError("--synthetic needs --npus N[,N...] (each at least 2) and --count K (at least 1)")
    try:
        model = load_model(model_url)
    except ModelFileError as exc:
        raise SweepError(f"--synthetic: {exc}") from None
    jobs = []
    for n in npus:
        clusters = [c for c, k in enumerate(allocate(cluster_weights(model, n), count)) for _ in range(k)]
        jobs += [SweepJob(f"synth-n{n}-{i:03d}", f"synthetic {model_url}", n, recipe=Synthetic(model_url, n, i, c))
                 for i, c in enumerate(clusters)]
    return jobs


def generated_job(spec: str) -> SweepJob:
    """`WORKLOAD --npus N [--option value ...]`, the options of `chakra generate`, checked now."""
    from chakra_core.generate.workloads import WORKLOADS

    words = shlex.split(spec)
    if not words or words[0] not in WORKLOADS:
        raise SweepError(f"--generate {spec!r}: expected WORKLOAD --npus N [--option value ...], WORKLOAD one of "
                         f"{', '.join(WORKLOADS)}")
    options = _option_pairs("--generate", spec, words[1:])
    workload = WORKLOADS[words[0]]
    try:
        npus = int(options.pop("npus"))
        for name, value in options.items():
            if name not in workload.options:
                raise ValueError(f"option {name} does not apply to {words[0]} (its options: "
                                 f"{', '.join(workload.options)})")
            workload.options[name].coerce(name, value)
    except KeyError:
        raise SweepError(f"--generate {spec!r}: --npus N is required") from None
    except ValueError as exc:
        raise SweepError(f"--generate {spec!r}: {exc}") from None
    job_id = "-".join(["gen", words[0], f"n{npus}", *(f"{k}{v}".replace(",", "_") for k, v in options.items())])
    return SweepJob(job_id, f"generate {spec}", npus, recipe=Generated(words[0], npus, tuple(options.items())))


def _option_pairs(flag: str, spec: str, words: list[str]) -> dict[str, str]:
    """`--key value` and `--key=value` words -> {key: value}, dashes in keys as underscores."""
    pairs = [w.split("=", 1) if "=" in w else [w] for w in words]
    flat = [part for pair in pairs for part in pair]
    if len(flat) % 2 or not all(k.startswith("--") for k in flat[::2]):
        raise SweepError(f"{flag} {spec!r}: expected --option value pairs after the first word")
    return {key[2:].replace("-", "_"): value for key, value in zip(flat[::2], flat[1::2])}


# chakra convert's flags (dashes as underscores) -> their types; each but `from` names one of sources.OPTIONS
FLAG_OPTIONS = {option.flag[2:].replace("-", "_"): option.name for option in sources.OPTIONS.values()}
CONVERT_OPTIONS = {"from": str, **{flag: sources.OPTIONS[name].type for flag, name in FLAG_OPTIONS.items()}}


def converted_job(spec: str) -> SweepJob:
    """`SRC [--npus N --passes P ...]`, a FlexFlow graph or text workload and `chakra convert`'s
    options, checked now (the file is read to tell its format and a graph's device count)."""
    from chakra_core.errors import ChakraError

    words = shlex.split(spec)
    if not words:
        raise SweepError(f"--convert {spec!r}: expected SRC [--option value ...]")
    source = words[0] if "://" in words[0] else os.path.abspath(words[0])
    raw = _option_pairs("--convert", spec, words[1:])
    try:
        unknown = sorted(set(raw) - set(CONVERT_OPTIONS))
        if unknown:
            raise ValueError(f"option {unknown[0]} is not one of chakra convert's ({', '.join(CONVERT_OPTIONS)})")
        values = {k: _coerced(k, v) for k, v in raw.items()}
        fmt = values.pop("from", None) or sources.detect_format(source)
        kind = sources.source(fmt)
        if not kind.single_file:
            one_file = [s.one_file for s in sources.SOURCES if s.single_file]
            raise ValueError(f"{words[0]} is not {' or '.join(one_file)}")
        options = sources.SourceOptions(**{FLAG_OPTIONS[k]: v for k, v in values.items()})
        sources.check_options(kind, options)
        npus = kind.devices(source, options)
    except (ValueError, ChakraError) as exc:
        raise SweepError(f"--convert {spec!r}: {exc}") from None
    stem = os.path.basename(source).rsplit(".", 1)[0].replace(".", "_")
    job_id = "-".join(["conv", stem, f"n{npus}", *(f"{k}{v}" for k, v in raw.items() if k not in ("npus", "from"))])
    differ = tuple((k, v) for k, v in vars(options).items() if v != getattr(sources.SourceOptions(), k))
    return SweepJob(job_id, f"convert {spec}", npus, recipe=Converted(source, fmt, differ))


def _coerced(key: str, value: str):
    try:
        return CONVERT_OPTIONS[key](value)
    except ValueError:
        raise ValueError(f"option {key}={value!r}: expected {CONVERT_OPTIONS[key].__name__}") from None


def prepare_job(job: SweepJob, store: str) -> SweepJob:
    """The job made (if it is synthetic or generated) and hashed, its groups file checked."""
    if job.recipe is not None:
        return _made(job, join(store, job.job_id))
    groups = job.comm_groups if job.comm_groups and exists(job.comm_groups) else None
    return replace(job, comm_groups=groups, sha256=content_hash(job.files, groups))


def content_hash(files: tuple[str, ...], comm_groups: str | None) -> str:
    """sha256 over the files' sha256 in rank order, then the groups file's: the content, not the names."""
    digest = hashlib.sha256()
    for url in (*files, *([comm_groups] if comm_groups else [])):
        digest.update(sha256(url).encode())
    return digest.hexdigest()


def _made(job: SweepJob, folder: str) -> SweepJob:
    marker = join(folder, MADE)
    if exists(marker):  # made by an earlier run: the same recipe makes the same job
        with fsspec.open(marker, "r") as f:
            made = json.load(f)
    else:
        written = _make(job.recipe, folder, job.job_id)
        ranks = tuple(u for u in written if u.endswith(".et"))
        groups = next((u for u in written if not u.endswith(".et")), None)
        made = {"files": ranks, "comm_groups": groups, "sha256": content_hash(ranks, groups)}
        with open_output(marker, "w") as f:
            json.dump(made, f)
    return replace(job, files=tuple(made["files"]), comm_groups=made["comm_groups"], sha256=made["sha256"])


def _make(recipe: Synthetic | Generated | Converted, folder: str, name: str) -> list[str]:
    if isinstance(recipe, Converted):
        result = sources.convert_source(recipe.source, folder, name, recipe.format,
                                        sources.SourceOptions(**dict(recipe.options)))
        return [*result.et_files, result.comm_group_file]
    if isinstance(recipe, Synthetic):
        from chakra_core.synth.sample import sample_job, write_sampled_job

        return write_sampled_job(sample_job(_model(recipe.model), recipe.npus, recipe.seed, recipe.cluster),
                                 folder, name)
    from chakra_core.generate.workloads import generate

    return generate(recipe.workload, recipe.npus, **dict(recipe.options)).write(folder, name)


@lru_cache(maxsize=4)
def _model(url: str):
    """A worker makes many jobs of one model: it is read once."""
    from chakra_core.synth.model import load_model

    return load_model(url)


def exists(url: str) -> bool:
    fs, path = filesystem(url)
    return fs.exists(path)


def read_sweep_job(job: SweepJob) -> Job:
    """The job in this worker's memory: its rank files (the ones hashed, in rank order) decoded,
    so that an unreadable job fails its batch at once with the file's name, and its groups file
    read (none when it does not exist). Read from storage once for a whole batch of points."""
    tables = [read_table(url) for url in job.files]
    groups = read_comm_groups(job.comm_groups) if job.comm_groups and exists(job.comm_groups) else {}
    return Job(tables, groups, job.job_id)
