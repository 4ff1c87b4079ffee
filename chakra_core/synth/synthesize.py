"""Training on a fleet, sampling jobs and judging them in one call: what `chakra synthesize`
and the nightly flow run.

- `load_training(folders)`: every job under the folders (chakra_core.analysis.fleet), each
  validated, profiled (its master trace checks the cross-rank constraints) and simulated on
  the reference system; a job that cannot be read, fails validation or whose ranks disagree
  is reported in `skipped` with the reason, never dropped silently.
- `fit(training)`: the model and each training job's cluster.
- `synthesize(...)`: fit (or load) a model, sample K jobs of N NPUs, write them as
  `OUT/<job>/<job>.<rank>.et` (+ `<job>.comm_groups.json`), check each (validation and a
  simulation on the reference system), and write `OUT/fidelity.json` and the model.

Node names of the synthetic traces come from sample.VOCABULARY. If a training trace holds a
string of at least MIN_STRING_LENGTH characters that occurs inside one of those words (a
node named "conv", say), the model is fitted with `node_names=False` and every synthetic
name is left empty, so that no training string can reappear through a name.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from chakra_core.analysis.fleet import find_jobs, load_job
from chakra_core.analysis.validate import validate_table
from chakra_core.errors import ChakraError
from chakra_core.outputs import open_output
from chakra_core.synth.fidelity import JobMeasure, fidelity_report, measure_job
from chakra_core.synth.fit import fit_model
from chakra_core.synth.master import CrossRankError
from chakra_core.synth.model import SynthModel, load_model, save_model
from chakra_core.synth.profile import JobProfile, profile_job
from chakra_core.synth.sample import (
    VOCABULARY,
    SampledJob,
    sample_jobs,
    write_sampled_job,
)

MIN_STRING_LENGTH = 4  # shorter strings ("0", "mm") are too common to be secrets, and are not scanned
STRING_COLUMNS = ("name", "pg_name", "op_schema", "op_type")
Progress = Callable[[str, int, int], None]


@dataclass
class TrainingJob:
    job_id: str
    profile: JobProfile
    measure: JobMeasure


@dataclass
class Training:
    jobs: list[TrainingJob] = field(default_factory=list)
    skipped: list[dict] = field(default_factory=list)  # {"job", "reason"}
    vocabulary_clashes: set[str] = field(default_factory=set)  # synthetic words a training string occurs in


def table_strings(table: pa.Table) -> set[str]:
    """The distinct strings a node table carries in names and string attributes."""
    found: set[str] = set()
    for name in STRING_COLUMNS:
        if name in table.column_names:
            found.update(v for v in pc.unique(table.column(name)).to_pylist() if v)
    if "other_attrs" in table.column_names:
        attrs = pc.list_flatten(table.column("other_attrs"))
        if len(attrs):
            found.update(v for v in pc.unique(pc.struct_field(attrs, "string")).to_pylist() if v)
            lists = pc.list_flatten(pc.struct_field(attrs, "string_list"))
            found.update(v for v in pc.unique(lists).to_pylist() if v)
    return found


def vocabulary_clashes(strings: set[str]) -> set[str]:
    """The synthesizer's words that contain one of these strings (of at least MIN_STRING_LENGTH)."""
    longest = max(len(w) for w in VOCABULARY)
    candidates = [s for s in strings if MIN_STRING_LENGTH <= len(s) <= longest]
    return {w for w in VOCABULARY for s in candidates if s in w}


def load_training(folders: Sequence[str], simulate: bool = True, progress: Progress | None = None,
                  map_jobs: Callable | None = None) -> Training:
    """Every usable job under the folders (see the module docstring). `map_jobs(read, jobs)`
    yields read(job) for each job in order (default: one after another here); the nightly
    flow passes one that reads them as Ray tasks."""
    found, problems = find_jobs(folders)
    training = Training(skipped=[{"job": None, "reason": p} for p in problems])
    outcomes = (map_jobs or map)(functools.partial(read_training_job, simulate=simulate), found)
    for i, (job, skipped, clashes) in enumerate(outcomes):
        if progress:
            progress("reading training jobs", i, len(found))
        if skipped is not None:
            training.skipped.append(skipped)
            continue
        training.vocabulary_clashes |= clashes
        training.jobs.append(job)
    if progress:
        progress("reading training jobs", len(found), len(found))
    return training


def read_training_job(job, simulate: bool = True) -> tuple[TrainingJob | None, dict | None, set[str]]:
    """(the job's profile and measure, None, its vocabulary clashes), or (None, why it is
    skipped, empty): one job of load_training, on its own so that jobs can be read in parallel."""
    try:
        tables, groups = load_job(job)
    except (ChakraError, OSError, ValueError) as exc:
        return None, {"job": job.job_id, "reason": f"unreadable: {exc}"}, set()
    errors = [f for path, t in zip(job.rank_files, tables) for f in validate_table(t, path) if f.severity == "error"]
    if errors:
        more = f" (and {len(errors) - 1} more finding(s))" if len(errors) > 1 else ""
        return None, {"job": job.job_id, "reason": f"invalid: {errors[0].message}{more}"}, set()
    try:
        _, profile = profile_job(job.job_id, tables, groups)
    except CrossRankError as exc:
        return None, {"job": job.job_id, "reason": f"ranks disagree: {exc}"}, set()
    try:
        measure = measure_job(profile, tables, groups, simulate)
    except (ChakraError, ValueError, ArithmeticError) as exc:  # e.g. times beyond int64: the job is skipped
        return None, {"job": job.job_id, "reason": f"not simulated: {type(exc).__name__}: {exc}"}, set()
    clashes: set[str] = set()
    for table in tables:
        clashes |= vocabulary_clashes(table_strings(table))
    return TrainingJob(job.job_id, profile, measure), None, clashes


@dataclass
class FitResult:
    model: SynthModel
    cluster_of: dict[str, int]  # training job -> cluster (kept in memory only: job ids are training strings)


def fit(training: Training, seed: int = 0, progress: Progress | None = None) -> FitResult:
    if not training.jobs:
        reasons = "; ".join(s["reason"] for s in training.skipped[:3])
        raise ChakraError(f"no usable training jobs{': ' + reasons if reasons else ''}")
    model, clusters = fit_model([j.profile for j in training.jobs], [j.measure for j in training.jobs], seed,
                                node_names=not training.vocabulary_clashes,
                                progress=(lambda done, total: progress("fitting clusters", done, total))
                                if progress else None)
    return FitResult(model, {j.job_id: int(c) for j, c in zip(training.jobs, clusters)})


def check_job(job: SampledJob, simulate: bool = True) -> tuple[JobMeasure, list[str]]:
    """A synthetic job's measures and its problems (validation errors, a failed simulation)."""
    problems = []
    for table in {id(t): t for t in job.tables}.values():
        problems += [f.message for f in validate_table(table) if f.severity == "error"]
    _, profile = profile_job("synthetic", job.tables, job.comm_groups)
    measure = measure_job(profile, job.tables, job.comm_groups, simulate)
    if measure.error:
        problems.append(f"simulation: {measure.error}")
    return measure, problems


def synthesize(out_dir: str, npus: int, count: int, *, train: Sequence[str] = (), model_in: str | None = None,
               model_out: str | None = None, seed: int = 0, progress: Progress | None = None) -> dict:
    """Fit on `train` (or load `model_in`), sample `count` jobs of `npus` NPUs into out_dir,
    and write the fidelity report and the model (model_out, default out_dir/model.json when
    fitted here). Returns the summary `chakra synthesize --json` prints."""
    if bool(train) == bool(model_in):
        raise ChakraError("give training folders (--train) or a saved model (--model), not both or neither")
    if count < 1:
        raise ChakraError(f"--jobs {count}: at least one job")
    skipped: list[dict] = []
    cluster_of: dict[str, int] = {}
    if model_in:
        model = load_model(model_in)
    else:
        training = load_training(train, progress=progress)
        skipped = training.skipped
        result = fit(training, seed, progress)
        model, cluster_of = result.model, result.cluster_of
    base = out_dir.rstrip("/")
    fs, root = fsspec.core.url_to_fs(base)
    fs.makedirs(root, exist_ok=True)
    if not model_in:
        model_out = model_out or f"{base}/model.json"
    if model_out:
        save_model(model, model_out)
    rows, measured = [], []
    jobs = sample_jobs(model, npus, count, seed)
    for i, job in enumerate(jobs):
        if progress:
            progress("sampling and checking jobs", i, len(jobs))
        name = f"synth-{i:04d}"
        files = write_sampled_job(job, f"{base}/{name}", name)
        measure, problems = check_job(job)
        measured.append((job.cluster, measure))
        rows.append({"job": name, "cluster": job.cluster, "npus": job.npus, "nodes": job.nodes,
                     "operations_per_rank": job.operations, "distinct_rank_tables": job.distinct_tables,
                     "finish_ns": measure.finish_ns, "exposed_comm_ns": measure.exposed_ns,
                     "problems": problems, "files": files})
    if progress:
        progress("sampling and checking jobs", len(jobs), len(jobs))
    report = fidelity_report(model.references(), measured)
    # job ids and reasons name training files: they go to the caller, not into the output folder
    report["training"] = {"jobs": model.training_jobs, "npus": model.training_npus, "clusters": len(model.clusters),
                          "skipped": len(skipped),
                          "jobs_per_cluster": {str(c): int(np.sum([n for _, n in cl.jobs_by_npus]))
                                               for c, cl in enumerate(model.clusters)}}
    with open_output(f"{base}/fidelity.json", "w") as f:
        json.dump(report, f, indent=1)
    return {"out_dir": base, "model": model_out, "fidelity": f"{base}/fidelity.json", "jobs": rows,
            "skipped": skipped, "training_clusters": cluster_of, "checks": report["checks"],
            "rows": report["rows"], "note": report["note"]}
