"""The day's synthetic jobs: a model fitted on the day's converted jobs, samples, fidelity.

Two kinds of Ray task (`chakra_core.synth.synthesize` does the work):
- `fit_day`: trains on `traces/date=<d>/` (every converted job of the day) and saves the
  model as `synthetic/date=<d>/model.json`;
- `synthesize_npus`: per NPU count, samples jobs from that model into
  `synthetic/date=<d>/npus=<N>/synth-<i>/`, validates and simulates each on the reference
  system, and compares them with the day's real jobs (`fidelity` rows).

NPU counts: every count (of 2 or more) seen in the day's training, plus twice the largest (a count never
traced: the model's what-if scaling). Training jobs the model cannot use are listed, with the
reason, in `synthetic/date=<d>/training.json`.

Sample size: `count` jobs per NPU count to start with; when a (cluster, NPU count) row has
fewer simulated synthetic jobs than its comparison needs (`fidelity.jobs_needed`), the count
is raised so that every cluster gets its need in expectation (clusters are drawn in training
proportions), at most MAX_JOBS_PER_NPU_COUNT; a row still short says "too few samples (n,
need m)" in its verdict.
"""

from __future__ import annotations

import math
import json

import fsspec
import pyarrow as pa

from chakra_core.errors import ChakraError
from chakra_core.format.job import split_rank_url
from chakra_core.outputs import open_output
from chakra_core.synth.fidelity import report_rows
from chakra_core.synth.model import save_model
from chakra_core.synth.synthesize import fit, load_training, synthesize
from chakra_core.table_schema import TableSchema, column
from pipeline.layout import join, synthetic_dir, traces_day

JOBS_PER_NPU_COUNT = 4
MAX_JOBS_PER_NPU_COUNT = 32  # bounds the nightly's time: each synthetic job is sampled and simulated

# synthesize_npus' rows: a job that could not be sampled has only its NPU count, status and problems
_RUN = column("run_id", pa.string())
SYNTHETIC_TRACES = TableSchema("synthetic_traces", (
    column("job_id", pa.string()), column("npus", pa.int32()), column("cluster", pa.int32(), nullable=True),
    *(column(name, pa.int64(), nullable=True) for name in ("nodes", "operations_per_rank", "finish_ns",
                                                            "exposed_comm_ns")),
    column("status", pa.string()), column("problems", pa.string(), nullable=True),
    column("path", pa.string(), nullable=True), _RUN))
# _fidelity_row's: a figure the comparison could not make (too few samples, no messages) is null
FIDELITY = TableSchema("fidelity", (
    column("npus", pa.int32()), column("cluster", pa.int32()), column("real_jobs", pa.int32()),
    column("synthetic_jobs", pa.int32()),
    *(column(name, pa.float64(), nullable=True) for name in ("composition_tv", "message_size_ks_worst")),
    column("message_size_ks", pa.string()),
    *(column(name, pa.float64(), nullable=True) for name in (
        "real_median_ns", "synthetic_median_ns", "iteration_time_relative_error", "exposed_comm_relative_error")),
    column("meets_targets", pa.bool_()), column("samples_needed", pa.int32(), nullable=True),
    column("verdict", pa.string()), _RUN))


def fit_day(date: str, warehouse: str, seed: int = 0) -> dict:
    """Fit the model on the day's converted jobs; returns where it is and what it saw. On Ray
    (the nightly runs it as a task), the jobs are read, profiled and simulated as tasks of their
    own, a job each, and the fit waits for them without holding a CPU."""
    training = load_training([traces_day(warehouse, date)], map_jobs=_ray_map_if_running())
    out = synthetic_dir(warehouse, date)
    summary = {"model": None, "npus": [], "training_jobs": len(training.jobs), "error": None,
               "skipped": [{"job": s["job"], "reason": s["reason"]} for s in training.skipped]}
    try:
        model = fit(training, seed).model
        summary.update(model=join(out, "model.json"), npus=sorted(model.training_npus))
        save_model(model, summary["model"])
    except ChakraError as exc:  # e.g. no usable job: the day still completes, without synthetic jobs
        summary["error"] = str(exc)
    fs, path = fsspec.core.url_to_fs(out)
    fs.makedirs(path, exist_ok=True)
    with open_output(join(out, "training.json"), "w") as f:
        json.dump(summary, f, indent=1)
    return summary


def _ray_map_if_running():
    """A map over Ray tasks, in order, when this process is part of a Ray session; else None."""
    try:
        import ray
    except ImportError:
        return None
    if not ray.is_initialized():
        return None
    from pipeline.cluster import WORKER_RETRIES

    def ray_map(function, items):
        task, shared = ray.remote(max_retries=WORKER_RETRIES)(_apply), ray.put(function)
        return ray.get([task.remote(shared, item) for item in items])

    return ray_map


def _apply(function, item):
    return function(item)


def target_npus(seen: list[int]) -> list[int]:
    """The day's NPU counts and twice the largest; single-rank jobs have no communication to sample."""
    return sorted({n for n in seen if n >= 2} | {2 * max(seen)}) if seen else []


def synthesize_npus(date: str, warehouse: str, model: str, npus: int, run_id: str, count: int = JOBS_PER_NPU_COUNT,
                    seed: int = 0) -> tuple[list[dict], list[dict]]:
    """(synthetic_traces rows, fidelity rows) for `count` jobs of `npus` NPUs."""
    out = join(synthetic_dir(warehouse, date), f"npus={npus}")
    try:
        result = synthesize(out, npus, count, model_in=model, seed=seed + npus)
        powered = count_for_power(result["rows"], count)
        if powered > count:  # the same seed: the first jobs again, then more
            result = synthesize(out, npus, powered, model_in=model, seed=seed + npus)
    except (ChakraError, ValueError) as exc:  # what the model cannot sample is a row, not a crash
        return [{"job_id": f"npus={npus}", "npus": npus, "status": "failed", "problems": str(exc),
                 "run_id": run_id}], []
    jobs = [{"job_id": f"npus={npus}/{row['job']}", "npus": row["npus"], "cluster": row["cluster"],
             "nodes": row["nodes"], "operations_per_rank": row["operations_per_rank"],
             "finish_ns": row["finish_ns"], "exposed_comm_ns": row["exposed_comm_ns"],
             "status": "ok" if not row["problems"] else "invalid", "problems": "; ".join(row["problems"]) or None,
             "path": split_rank_url(row["files"][0])[0], "run_id": run_id} for row in result["jobs"]]
    verdicts: dict[tuple[int, int], list[bool | None]] = {}
    for metric in report_rows({"rows": result["rows"]}):  # each metric judged against its target
        verdicts.setdefault((metric["cluster"], metric["npus"]), []).append(metric["pass"])
    fidelity = [_fidelity_row(npus, row, all(v is not False for v in verdicts[(row["cluster"], row["npus"])]),
                              run_id) for row in result["rows"]]
    return jobs, fidelity


def count_for_power(rows: list[dict], count: int) -> int:
    """Jobs per NPU count so that every compared cluster expects the synthetic jobs its
    comparison needs (a cluster's share of the jobs drawn is kept), within MAX_JOBS_PER_NPU_COUNT."""
    wanted = [math.ceil(row["power"]["needed"] * count / max(row["synthetic_jobs"], 1)) for row in rows
              if row["power"]["samples"] < row["power"]["needed"]]
    return max(count, min(max(wanted, default=count), MAX_JOBS_PER_NPU_COUNT))


def _fidelity_row(npus: int, row: dict, meets: bool, run_id: str) -> dict:
    ks = row["message_size_ks"]
    judged = [v["statistic"] for v in ks.values() if v["judged"]]
    return {"npus": npus, "cluster": row["cluster"], "real_jobs": row["real_jobs"],
            "synthetic_jobs": row["synthetic_jobs"], "composition_tv": row["composition_tv"],
            "message_size_ks_worst": max(judged, default=None), "message_size_ks": json.dumps(ks, sort_keys=True),
            "real_median_ns": row["iteration_time"]["real_median_ns"],
            "synthetic_median_ns": row["iteration_time"]["synthetic_median_ns"],
            "iteration_time_relative_error": row["iteration_time"]["relative_error"],
            "exposed_comm_relative_error": row["exposed_comm"]["relative_error"], "meets_targets": meets,
            "samples_needed": row["power"]["needed"], "verdict": row["verdict"], "run_id": run_id}
