#!/usr/bin/env python
"""Make one day's drop for the nightly pipeline: real PyTorch runs, generated Chakra jobs, bad files.

Usage::

    python -m tools.make_drop --root URL --date YYYY-MM-DD [--generated-jobs N]
        [--copies-of-real K] [--no-corrupt] [--other-formats] [--no-gpu-runs] [--seed S] [--min-rank-traces N] [--json]

or, from Python, ``make_drop(root, date, generated_jobs=6, copies_of_real=1, corrupt=True,
other_formats=False, seed=0, gpu_runs=True)``. ROOT is any fsspec URL (a local path, ``file://``, ``memory://``,
``s3://bucket/prefix``). The drop is written as ``ROOT/<date>/<job_id>/...``, one folder per
job, each with a ``job.json`` (``job_id``, ``model``, ``family``, ``parallelism``, ``npus``,
``source``, ``expected``, ...) and either

- per-rank PyTorch traces ``rank<R>.et.json.gz`` + ``rank<R>.kineto.json.gz``
  (``source: "pytorch-gloo"``): every run recorded in ``datasets/pytorch-gloo/`` copied as job
  ``gloo-<run>``, ``copies_of_real`` times (extra copies are ``gloo-<run>-c1``, ``-c2``, ...;
  byte-identical rank files, separate jobs); ``program.json`` files are not copied;
- the same with ``rank<R>.timing.json`` (``source: "gpu-h200"``, leave out with
  ``gpu_runs=False``; none without ``copies_of_real``): every GPU run of ``datasets/gpu-h200/``
  once, as job ``gpu-<run>``;
- per-rank Chakra ETs ``<job_id>.<R>.et`` (``source: "generated"``), written with
  ``chakra_core.format.job.Job.write``, deterministic from the seed. The five families of
  ``chakra_core.generate.families`` cycle through the jobs: data_parallel, tensor_parallel,
  pipeline_parallel, dlrm and moe. NPU counts 4, 8 and 16 (pipeline_parallel only 4 and 8:
  what-if scaling of send/recv needs the simulated NPU count to be a multiple of the traced one).

With corrupt=True, three jobs the pipeline must reject, each marked ``"expected": "reject"``
with a ``reason`` and the ``bad_files`` in its job.json: ``bad-truncated-gzip`` (a real rank
ET cut in half), ``bad-malformed-json`` (a valid gzip of text that is not JSON) and
``bad-truncated-et`` (a generated Chakra ET cut in the middle of a node message); and
``bad-unknown-file``, a valid generated job with a ``notes.txt`` beside its traces, whose
``notes.txt`` alone is to be rejected (``"expected": "accept"``, with the reason and
``bad_files``) while its traces convert.

With other_formats=True, two jobs of other sources (``source: "other-formats"``), each one file
of ``datasets/other-formats/`` beside its job.json: ``flexflow-alexnet-n4`` (the FlexFlow task
graph ``alexnet.4.graph``) and ``text-dlrm-n8`` (the ASTRA-sim 1.0 text workload
``DLRM_HybridParallel.txt``, with ``npus`` 8 and ``passes`` 2 in its job.json, which the pipeline
passes to the converter).

Days differ (tools/drift.py, unless drift=False): every job's times drift within 2% from day to
day, deterministically from the date, and every Wednesday carries an injected regression: the
GPU job ``gpu-gpt``'s GEMM kernels 40% slower and ``gen-dp-000-n8``'s all-reduces moving twice
the bytes.

Existing files of the same names are overwritten; nothing else under ROOT is removed.
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import json
import random
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import fsspec
import pyarrow as pa

from chakra_core.format.job import Job, split_rank_url
from chakra_core.generate import families
from chakra_core.generate.families import STEPS, generate_family
from tools.drift import (BYTES_JOB, GEMM_JOB, GEMM_SLOWDOWN, drifted_kineto, drifted_tables, factor,
                         is_regression_day)

DATASETS = Path(__file__).resolve().parents[1] / "datasets"

REAL_DIR = DATASETS / "pytorch-gloo"
OTHER_DIR = DATASETS / "other-formats"
# job id -> (file under OTHER_DIR, job.json fields beyond the common ones)
OTHER_JOBS = {
    "flexflow-alexnet-n4": ("flexflow/alexnet.4.graph", {"model": "alexnet", "family": "flexflow", "npus": 4,
                                                         "parallelism": "FlexFlow strategy (data and model)"}),
    "text-dlrm-n8": ("text/DLRM_HybridParallel.txt", {"model": "dlrm", "family": "dlrm", "npus": 8, "passes": 2,
                                                      "parallelism": "HYBRID_DLRM"}),
}
GPU_SOURCE = "gpu-h200"
GPU_DIR = DATASETS / GPU_SOURCE

FAMILIES = tuple(families.FAMILIES)  # data_parallel, tensor_parallel, pipeline_parallel, dlrm, moe
SHORT = {"data_parallel": "dp", "tensor_parallel": "tp", "pipeline_parallel": "pp", "dlrm": "dlrm", "moe": "moe"}
# NPU counts per family, taken in turn: job i is family FAMILIES[i % 5] with the (i // 5)-th
# size of its cycle, so the first five jobs (one per family) are all at 4 or 8 NPUs.
SIZE_CYCLE = {
    "data_parallel": (8, 16, 4),
    "tensor_parallel": (4, 16, 8),
    "pipeline_parallel": (4, 8),
    "dlrm": (8, 4, 16),
    "moe": (8, 16, 4),
}
# Recorded runs: scenario -> family (job.json already has model and parallelism).
REAL_FAMILY = {"mlp_ddp": "data_parallel", "transformer_ddp": "data_parallel", "dlrm": "dlrm",
               "collectives": "collectives"}
PYTORCH_RANK_TRACE = re.compile(r"^rank\d+\.et\.json\.gz$")
REAL_FILE = re.compile(r"^rank\d+\.(et|kineto)\.json\.gz$")
GPU_FILE = re.compile(r"^rank\d+\.(et\.json\.gz|kineto\.json\.gz|timing\.json)$")


def _is_rank_trace(name: str) -> bool:
    """A rank's trace: a recorded rank<R>.et.json.gz or a Chakra <job>.<R>.et."""
    return bool(PYTORCH_RANK_TRACE.match(name) or split_rank_url(name))


# ------------------------------------------------------------------ jobs


@dataclass
class GeneratedJob:
    job_id: str
    family: str
    npus: int
    info: dict  # job.json fields beyond the common ones
    tables: list[pa.Table] = field(default_factory=list)


def _rng(seed: int, key: str) -> random.Random:
    return random.Random(f"make_drop:{seed}:{key}")  # str seeds hash with sha512: stable across runs


def plan_generated(index: int) -> tuple[str, int]:
    """(family, npus) of generated job `index` (independent of the seed)."""
    family = FAMILIES[index % len(FAMILIES)]
    cycle = SIZE_CYCLE[family]
    return family, cycle[(index // len(FAMILIES)) % len(cycle)]


def generate_job(index: int, seed: int = 0) -> GeneratedJob:
    """Generated job `index` of a drop made with `seed`: its id, job.json fields and one table per rank."""
    family, npus = plan_generated(index)
    job_id = f"gen-{SHORT[family]}-{index:03d}-n{npus}"
    info, tables = generate_family(family, npus, _rng(seed, f"job{index}"))
    return GeneratedJob(job_id, family, npus, info, tables)


# ------------------------------------------------------------------ writing


def _gzip(data: bytes) -> bytes:
    return gzip.compress(data, compresslevel=6, mtime=0)


def _json_bytes(obj: dict) -> bytes:
    return (json.dumps(obj, indent=1) + "\n").encode()


def _varint_at(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return value, pos


def truncate_mid_message(data: bytes) -> bytes:
    """The .et bytes cut in the middle of the payload of the middle node message."""
    frames, pos = [], 0
    while pos < len(data):
        length, start = _varint_at(data, pos)
        frames.append((start, length))
        pos = start + length
    start, length = frames[max(1, len(frames) // 2)]
    return data[:start + max(1, length // 2)]


class _Drop:
    """Writes files under ROOT/<date>/ and keeps the counts for the summary."""

    def __init__(self, root: str, date: str, drift: bool):
        self.date, self.drift = date, drift
        self.fs, base = fsspec.core.url_to_fs(root)
        self.base = f"{base.rstrip('/')}/{date}" if base.rstrip("/") else date
        self.jobs: list[dict] = []
        self.files = 0
        self.bytes = 0
        self.rank_traces = 0
        self.accepted_rank_traces = 0

    def job_dir(self, job_id: str) -> str:
        path = f"{self.base}/{job_id}"
        self.fs.makedirs(path, exist_ok=True)
        return path

    def _count(self, name: str, size: int) -> None:
        self.files += 1
        self.bytes += size
        if _is_rank_trace(name):
            self.rank_traces += 1

    def put(self, job_dir: str, name: str, data: bytes) -> None:
        self.fs.pipe_file(f"{job_dir}/{name}", data)
        self._count(name, len(data))

    def put_job(self, job_dir: str, job: Job) -> list[str]:
        """Job.write into job_dir; returns the paths written."""
        paths = [fsspec.core.url_to_fs(url)[1] for url in job.write(self.fs.unstrip_protocol(job_dir))]
        for path in paths:
            self._count(path.rsplit("/", 1)[-1], self.fs.size(path))
        return paths

    def finish_job(self, info: dict, rank_traces: int) -> None:
        if info.get("expected") != "reject":
            self.accepted_rank_traces += rank_traces
        self.jobs.append(info)


def _real_runs(real_dir: Path) -> list[Path]:
    return sorted(p for p in real_dir.iterdir() if p.is_dir() and (p / "job.json").is_file())


def _real_files(run: Path, pattern: re.Pattern = REAL_FILE) -> list[Path]:
    def key(p: Path):
        rank = int(re.match(r"rank(\d+)", p.name).group(1))
        return rank, p.name
    return sorted((p for p in run.iterdir() if pattern.match(p.name)), key=key)


def _real_info(run: Path, job_id: str, copy: int, source: str = "pytorch-gloo") -> dict:
    original = json.loads((run / "job.json").read_text())
    scenario = original.get("scenario", run.name.rsplit("-w", 1)[0])
    info = {"job_id": job_id, "model": original.get("model", ""), "family": REAL_FAMILY.get(scenario, scenario),
            "parallelism": original.get("parallelism", ""), "npus": original["world_size"],
            "source": source, "expected": "accept", "recorded_run": run.name, "copy": copy}
    if source == GPU_SOURCE:  # every GPU run is a DDP job; its job.json does not say so
        info.update(family="data_parallel", parallelism="ddp")
    info.update({k: v for k, v in original.items() if k not in info and k != "job_id"})
    return info


def _write_real(drop: _Drop, run: Path, job_id: str, copy: int, source: str = "pytorch-gloo") -> None:
    d = drop.job_dir(job_id)
    files = _real_files(run, GPU_FILE if source == GPU_SOURCE else REAL_FILE)
    for p in files:
        data = p.read_bytes()
        if drop.drift and p.name.endswith(".kineto.json.gz"):  # the day's drift, and a regression day's slower GEMMs
            slower = GEMM_SLOWDOWN if job_id == GEMM_JOB and is_regression_day(drop.date) else 1.0
            data = drifted_kineto(data, factor(drop.date, job_id), slower)
        drop.put(d, p.name, data)
    info = _real_info(run, job_id, copy, source)
    drop.put(d, "job.json", _json_bytes(info))
    drop.finish_job(info, sum(1 for p in files if _is_rank_trace(p.name)))


def _generated_info(job: GeneratedJob, seed: int, index: int) -> dict:
    return {"job_id": job.job_id, "model": job.info["model"], "family": job.family,
            "parallelism": job.info["parallelism"], "npus": job.npus, "source": "generated", "expected": "accept",
            "generator": "tools/make_drop.py", "seed": seed, "index": index, "steps": STEPS,
            **{k: v for k, v in job.info.items() if k not in ("model", "parallelism")}}


def _write_generated(drop: _Drop, job: GeneratedJob, info: dict, extra: dict[str, bytes] | None = None,
                     truncate_rank: int | None = None) -> None:
    d = drop.job_dir(job.job_id)
    tables = job.tables
    if drop.drift and info.get("index", -1) >= 0:  # the day's drift, a regression day's doubled all-reduces
        doubled = job.job_id == BYTES_JOB and is_regression_day(drop.date)
        tables = drifted_tables(tables, factor(drop.date, job.job_id), 2 if doubled else 1)
    paths = drop.put_job(d, Job(tables, name=job.job_id))
    if truncate_rank is not None:
        path = paths[truncate_rank]
        whole = drop.fs.cat_file(path)
        cut = truncate_mid_message(whole)
        drop.fs.pipe_file(path, cut)
        drop.bytes += len(cut) - len(whole)
    for name, data in (extra or {}).items():
        drop.put(d, name, data)
    drop.put(d, "job.json", _json_bytes(info))
    drop.finish_job(info, job.npus)


def _write_corrupt(drop: _Drop, real_dir: Path, seed: int) -> None:
    run = real_dir / "mlp_ddp-w2"
    if not run.is_dir():
        run = _real_runs(real_dir)[0]
    files = _real_files(run)

    def real_based(job_id: str, bad_name: str, bad_data: bytes, reason: str) -> None:
        d = drop.job_dir(job_id)
        for p in files:
            drop.put(d, p.name, bad_data if p.name == bad_name else p.read_bytes())
        info = _real_info(run, job_id, 0)
        info.update(expected="reject", reason=reason, bad_files=[bad_name])
        drop.put(d, "job.json", _json_bytes(info))
        drop.finish_job(info, sum(1 for p in files if _is_rank_trace(p.name)))

    rank0 = (run / "rank0.et.json.gz").read_bytes()
    real_based("bad-truncated-gzip", "rank0.et.json.gz", rank0[:len(rank0) // 2],
               "rank0.et.json.gz: gzip stream truncated (the file was cut in half)")
    not_json = ("rank 1 crashed while writing its execution trace\n"
                "Traceback (most recent call last):\n  File \"train.py\", line 88, in <module>\n"
                "RuntimeError: [gloo] Connection closed by peer\n{\"nodes\": [").encode()
    real_based("bad-malformed-json", "rank1.et.json.gz", _gzip(not_json),
               "rank1.et.json.gz: valid gzip, but the text is not JSON")

    # Chakra-format bad jobs, generated like index 0 / 1 jobs but on 4 NPUs and their own seeds
    info, tables = generate_family("data_parallel", 4, _rng(seed, "bad-truncated-et"))
    job = GeneratedJob("bad-truncated-et", "data_parallel", 4, info, tables)
    ji = _generated_info(job, seed, -1)
    ji.update(expected="reject", reason="bad-truncated-et.1.et: truncated in the middle of a node message",
              bad_files=["bad-truncated-et.1.et"])
    _write_generated(drop, job, ji, truncate_rank=1)

    info, tables = generate_family("tensor_parallel", 4, _rng(seed, "bad-unknown-file"))
    job = GeneratedJob("bad-unknown-file", "tensor_parallel", 4, info, tables)
    ji = _generated_info(job, seed, -1)
    ji.update(reason="notes.txt: unknown file type next to the rank traces (rejected alone; the job converts)",
              bad_files=["notes.txt"])
    notes = b"operator notes: rerun this job with NCCL_DEBUG=INFO if it hangs again\n"
    _write_generated(drop, job, ji, extra={"notes.txt": notes})


def _write_other(drop: _Drop, job_id: str) -> None:
    """A job of one FlexFlow graph or text workload; the pipeline converts it (job.json: its options)."""
    relative, fields = OTHER_JOBS[job_id]
    d = drop.job_dir(job_id)
    source = OTHER_DIR / relative
    drop.put(d, source.name, source.read_bytes())
    info = {"job_id": job_id, **fields, "source": "other-formats", "expected": "accept", "file": source.name}
    drop.put(d, "job.json", _json_bytes(info))
    drop.finish_job(info, 0)


def count_real_rank_traces(real_dir: Path = REAL_DIR) -> int:
    return sum(1 for run in _real_runs(real_dir) for p in _real_files(run) if _is_rank_trace(p.name))


def generated_jobs_for(min_rank_traces: int, copies_of_real: int = 1, real_dir: Path = REAL_DIR) -> int:
    """The fewest generated jobs that bring the accepted rank trace files to at least min_rank_traces."""
    have = count_real_rank_traces(real_dir) * copies_of_real if copies_of_real else 0
    jobs = 0
    while have < min_rank_traces:
        have += plan_generated(jobs)[1]
        jobs += 1
    return jobs


def make_drop(root: str, date: str, *, generated_jobs: int = 6, copies_of_real: int = 1, corrupt: bool = True,
              other_formats: bool = False, seed: int = 0, real_dir: str | Path | None = None,
              gpu_runs: bool = True, drift: bool = True) -> dict:
    """Writes one day's drop under ROOT/<date>/ and returns a summary (see the module docstring)."""
    date = datetime.date.fromisoformat(date).isoformat()
    if generated_jobs < 0 or copies_of_real < 0:
        raise ValueError("generated_jobs and copies_of_real must be >= 0")
    real = Path(real_dir) if real_dir is not None else REAL_DIR
    started = time.perf_counter()
    drop = _Drop(root, date, drift)
    runs = _real_runs(real) if copies_of_real or corrupt else []
    if (copies_of_real or corrupt) and not runs:
        raise FileNotFoundError(f"no recorded runs (folders with job.json) under {real}")
    for run in runs if copies_of_real else []:
        for copy in range(copies_of_real):
            _write_real(drop, run, f"gloo-{run.name}" + (f"-c{copy}" if copy else ""), copy)
    for run in _real_runs(GPU_DIR) if gpu_runs and copies_of_real else []:
        _write_real(drop, run, f"gpu-{run.name}", 0, GPU_SOURCE)
    for index in range(generated_jobs):
        job = generate_job(index, seed)
        _write_generated(drop, job, _generated_info(job, seed, index))
    if corrupt:
        _write_corrupt(drop, real, seed)
    for job_id in OTHER_JOBS if other_formats else ():
        _write_other(drop, job_id)
    by_source: dict[str, int] = {}
    by_family: dict[str, int] = {}
    rejects = 0
    for info in drop.jobs:
        if info["expected"] == "reject":
            rejects += 1
            continue
        by_source[info["source"]] = by_source.get(info["source"], 0) + 1
        key = f"{info['family']}/{info['npus']}"
        by_family[key] = by_family.get(key, 0) + 1
    return {
        "root": root, "date": date, "path": drop.fs.unstrip_protocol(drop.base), "seed": seed,
        "jobs": len(drop.jobs), "accepted_jobs": len(drop.jobs) - rejects, "reject_jobs": rejects,
        "jobs_by_source": by_source, "jobs_by_family_npus": dict(sorted(by_family.items())),
        "rank_traces": drop.rank_traces, "accepted_rank_traces": drop.accepted_rank_traces,
        "files": drop.files, "bytes": drop.bytes, "seconds": round(time.perf_counter() - started, 3),
        "job_ids": [info["job_id"] for info in drop.jobs],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--root", required=True, help="fsspec URL of the drop root (the day goes under ROOT/<date>/)")
    p.add_argument("--date", required=True, help="YYYY-MM-DD")
    p.add_argument("--generated-jobs", type=int, default=6, help="generated Chakra jobs (default 6)")
    p.add_argument("--copies-of-real", type=int, default=1,
                   help="copies of every recorded run in datasets/pytorch-gloo (default 1; 0 for none)")
    p.add_argument("--no-corrupt", action="store_true", help="leave out the four jobs that must be rejected")
    p.add_argument("--other-formats", action="store_true",
                   help="add a FlexFlow task graph job and an ASTRA-sim text workload job (datasets/other-formats)")
    p.add_argument("--no-gpu-runs", action="store_true", help="leave out the GPU runs of datasets/gpu-h200")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-drift", action="store_true",
                   help="every day's drop the same: no drift of times, no injected regression (tools/drift.py)")
    p.add_argument("--min-rank-traces", type=int, default=0,
                   help="raise --generated-jobs until the accepted jobs hold at least N rank trace files")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    args = p.parse_args(argv)
    generated = max(args.generated_jobs, generated_jobs_for(args.min_rank_traces, args.copies_of_real))
    try:
        summary = make_drop(args.root, args.date, generated_jobs=generated, copies_of_real=args.copies_of_real,
                            corrupt=not args.no_corrupt, other_formats=args.other_formats, seed=args.seed,
                            gpu_runs=not args.no_gpu_runs, drift=not args.no_drift)
    except (ValueError, OSError) as exc:
        print(f"make_drop: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(summary, indent=1))
        return 0
    src = summary["jobs_by_source"]
    print(f"drop {summary['path']}: {summary['jobs']} jobs ({src.get('pytorch-gloo', 0)} real on gloo, "
          f"{src.get(GPU_SOURCE, 0)} real on a GPU, {src.get('generated', 0)} generated, "
          f"{src.get('other-formats', 0)} of other formats, {summary['reject_jobs']} to reject)")
    print(f"  rank trace files: {summary['rank_traces']} ({summary['accepted_rank_traces']} in accepted jobs)")
    print(f"  files: {summary['files']}, bytes: {summary['bytes']:,} ({summary['bytes'] / 2**20:.1f} MiB), "
          f"written in {summary['seconds']:.1f} s")
    families = summary["jobs_by_family_npus"]
    print("  accepted jobs by family/npus: " + ", ".join(f"{k} x{v}" for k, v in families.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
