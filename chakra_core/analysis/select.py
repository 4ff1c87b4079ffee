"""Representative selection: k jobs, with weights, whose weighted sum reproduces a fleet.

What users estimate from a subset (the **estimands**, per job, summed over the fleet):

- `jobs`: 1 per job (it keeps the weights plausible: they add up to about the job count);
- `time`: simulated time on the reference system (`reference.py`, the pipeline's
  `ring-native` system);
- `exposed_comm`: the largest exposed communication of any NPU, on the same simulation;
- `time_by_family`: time per family (`JobSummary.family`, or the collective kind carrying
  most of the job's bytes when none is given);
- `bytes_by_kind`: communication bytes per kind (all_reduce, all_to_all, send, ...).

Each group has one error: relative for `jobs`, `time` and `exposed_comm`; for the two breakdowns the
share of the total put in the wrong place, sum |estimate - actual| / total (a family or kind
holding 0.1% of the fleet cannot dominate the error, a misattributed half of it does).

Method (docs/synthesis.md#representative-selection): greedy forward selection with minimax
calibration. For a set of representatives, the weights are the non-negative w minimising the
largest group error of sum_i w_i x_i against the fleet's totals X (a linear program); the next
representative is the job that lowers that optimum most. The sets are nested, and the optimum
over k+1 jobs is at most the one over k (the old weights stay feasible with 0 for the new job),
so the error never grows with k; k = the number of jobs gives 0. Without k, k is the smallest
whose error is within `max_error`. Each job is shown in the cluster of its nearest
representative in the standardised feature space (`feature_matrix`, from its per-rank
statistics and the reference simulation), a diagnostic of who stands for whom.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from chakra_core.analysis.stats import OP_CLASS_NAMES, trace_row
from chakra_core.errors import ChakraError
from chakra_core.sim.reference import simulate_reference

DEFAULT_MAX_ERROR = 0.05  # the error `chakra select` without -k aims for
EXACT = 1e-6  # an error this small is exact: more representatives add nothing
GROUPS = ("jobs", "time", "exposed_comm", "time_by_family", "bytes_by_kind")
BREAKDOWNS = ("time_by_family", "bytes_by_kind")  # judged by the misplaced share, not per column

class SelectionError(ChakraError):
    pass


@dataclass
class JobSummary:
    """What selection knows of one job: its per-rank statistics rows and its reference simulation."""

    job_id: str
    npus: int
    rank_rows: list[dict]
    finish_ns: int
    compute_ns: int  # the busiest NPU's compute time
    exposed_comm_ns: int  # the largest exposed communication of any NPU
    family: str | None = None  # the job's family when known (e.g. its job.json); else derived, see job_family


def summarize_job(job_id: str, tables: Sequence[pa.Table], comm_groups: Mapping[int, Sequence[int]] | None = None
                  ) -> JobSummary:
    """Statistics of every rank and one simulation on the reference system of the job's size."""
    result = simulate_reference(tables, comm_groups)
    return JobSummary(job_id, len(tables), [trace_row(t) for t in tables], result.finish_ns,
                      max(n.compute_ns for n in result.npus), max(n.exposed_comm_ns for n in result.npus))


def _summed_map(rows: list[dict], column: str) -> dict[str, float]:
    """A JSON map column of trace_row ({key: [count, total]}) summed over the ranks."""
    totals: dict[str, float] = {}
    for row in rows:
        for key, (_, total) in json.loads(row[column]).items():
            totals[key] = totals.get(key, 0.0) + total
    return totals


def merged_rank_rows(rows: list[dict]) -> dict:
    """The one row that selection reads of a job in place of its rank rows (the same features,
    estimands and family): the maps and bytes summed, the message quantiles averaged. What a
    night keeps of a job between its conversion and the selection: a row, not one per rank."""
    merged = {column: json.dumps({key: [0, total] for key, total in _summed_map(rows, column).items()})
              for column in ("comm_by_kind", "compute_by_class")}
    merged.update({column: sum(r[column] for r in rows) for column in ("collective_bytes", "p2p_bytes")})
    merged.update({q: float(np.mean([r[q] for r in rows])) for q in ("message_p50", "message_p90", "message_p99")})
    return merged


def _shares(totals: dict[str, float], keys: Sequence[str]) -> list[float]:
    whole = sum(totals.values())
    return [totals.get(k, 0.0) / whole if whole else 0.0 for k in keys]


# Features (for showing who stands for whom): log2 NPUs; the share of compute time per operator
# class; the share of communication bytes per kind and log10 bytes per rank; the simulated
# compute and exposed-communication shares of the job's time; log2 message-size p50/p90/p99;
# log10 simulated time.
def feature_matrix(jobs: Sequence[JobSummary]) -> tuple[list[str], np.ndarray]:
    """(feature names, one row per job): the raw, unstandardised features."""
    kinds = sorted({k for job in jobs for k in _summed_map(job.rank_rows, "comm_by_kind")})
    names = (["log2_npus"] + [f"compute_share_{c}" for c in OP_CLASS_NAMES] + [f"bytes_share_{k}" for k in kinds]
             + ["log10_comm_bytes_per_rank", "sim_compute_share", "sim_exposed_comm_share",
                "log2_message_p50", "log2_message_p90", "log2_message_p99", "log10_sim_ns"])
    rows = []
    for job in jobs:
        by_kind = _summed_map(job.rank_rows, "comm_by_kind")
        comm_bytes = sum(r["collective_bytes"] + r["p2p_bytes"] for r in job.rank_rows) / job.npus
        finish = max(job.finish_ns, 1)
        quantiles = [float(np.mean([r[q] for r in job.rank_rows])) for q in ("message_p50", "message_p90",
                                                                             "message_p99")]
        rows.append([math.log2(job.npus)] + _shares(_summed_map(job.rank_rows, "compute_by_class"), OP_CLASS_NAMES)
                    + _shares(by_kind, kinds)
                    + [math.log10(1 + comm_bytes), job.compute_ns / finish, job.exposed_comm_ns / finish]
                    + [math.log2(1 + q) for q in quantiles] + [math.log10(finish)])
    return names, np.asarray(rows, dtype=np.float64).reshape(len(jobs), len(names))


def standardised(raw: np.ndarray) -> np.ndarray:
    """Zero mean, unit spread per feature; a feature constant across the fleet counts for nothing."""
    spread = raw.std(axis=0)
    return np.divide(raw - raw.mean(axis=0), spread, out=np.zeros_like(raw), where=spread > 0)


def job_family(job: JobSummary) -> str:
    """The job's family: the one given, else the collective kind carrying most of its bytes
    (data parallel -> all_reduce, tensor parallel -> all_gather, pipelines -> send, ...)."""
    if job.family:
        return job.family
    by_kind = _summed_map(job.rank_rows, "comm_by_kind")
    return max(sorted(by_kind), key=lambda k: by_kind[k]) if any(by_kind.values()) else "compute"


@dataclass
class Estimands:
    """The quantities estimated from a subset: one column per metric, one row per job."""

    columns: list[tuple[str, str]]  # (group, key): ("time", ""), ("time_by_family", "dlrm"), ...
    values: np.ndarray  # jobs x columns

    @property
    def totals(self) -> np.ndarray:
        return self.values.sum(axis=0)

    def of(self, rows: Sequence[int]) -> Estimands:
        return Estimands(self.columns, self.values[list(rows)])


def estimands(jobs: Sequence[JobSummary], families: Sequence[str] | None = None,
              kinds: Sequence[str] | None = None) -> Estimands:
    """The estimands of the jobs; `families`/`kinds` fix the columns (another fleet's, to
    estimate one fleet from another's representatives)."""
    family = [job_family(j) for j in jobs]
    by_kind = [_summed_map(j.rank_rows, "comm_by_kind") for j in jobs]
    families = sorted(set(family)) if families is None else list(families)
    kinds = sorted({k for b in by_kind for k in b}) if kinds is None else list(kinds)
    columns = ([("jobs", ""), ("time", ""), ("exposed_comm", "")] + [("time_by_family", f) for f in families]
               + [("bytes_by_kind", k) for k in kinds])
    values = np.zeros((len(jobs), len(columns)))
    for i, job in enumerate(jobs):
        values[i, :3] = 1.0, job.finish_ns, job.exposed_comm_ns
        if family[i] in families:
            values[i, 3 + families.index(family[i])] = job.finish_ns
        values[i, 3 + len(families):] = [by_kind[i].get(k, 0.0) for k in kinds]
    return Estimands(columns, values)


def group_errors(columns: Sequence[tuple[str, str]], estimate: np.ndarray, actual: np.ndarray) -> dict[str, float]:
    """Per group: the relative error, or for a breakdown the misplaced share of its total.
    Groups with nothing in the fleet (no communication at all) are left out."""
    errors = {}
    for group in GROUPS:
        cols = [i for i, (g, _) in enumerate(columns) if g == group]
        whole = actual[cols].sum()
        if whole > 0:
            errors[group] = float(np.abs(estimate[cols] - actual[cols]).sum() / whole)
    return errors


def calibrate(subset: Estimands, totals: np.ndarray) -> np.ndarray:
    """Non-negative weights of the subset's jobs minimising the largest group error against
    `totals` (see group_errors): a linear program over (weights, t, one slack per column)."""
    k = len(subset.values)
    groups = [g for g, _ in subset.columns]
    scale = np.array([totals[[j for j, h in enumerate(groups) if h == g]].sum() for g in groups])
    used = np.flatnonzero(scale > 0)  # a group absent from the fleet constrains nothing
    a = subset.values[:, used].T / scale[used, None]  # columns x jobs, in shares of the group's total
    x = totals[used] / scale[used]
    n = len(used)
    slack = np.eye(n)
    upper = np.block([[a, np.zeros((n, 1)), -slack], [-a, np.zeros((n, 1)), -slack]])
    member = np.array([[groups[used[c]] == g for c in range(n)] for g in dict.fromkeys(groups[c] for c in used)],
                      dtype=float)  # group x column
    upper = np.vstack([upper, np.hstack([np.zeros((len(member), k)), -np.ones((len(member), 1)), member])])
    bound = np.concatenate([x, -x, np.zeros(len(member))])
    cost = np.zeros(k + 1 + n)
    cost[k] = 1.0
    from scipy.optimize import linprog  # here: scipy.optimize takes 0.3-0.4 s to import

    result = linprog(cost, A_ub=upper, b_ub=bound, bounds=(0, None), method="highs")
    if not result.success:  # cannot happen for a bounded, feasible program (w = 0 is feasible)
        raise SelectionError(f"calibration failed: {result.message}")
    return result.x[:k]


def max_error(errors: Mapping[str, float]) -> float:
    return max(errors.values(), default=0.0)


@dataclass
class Step:
    """The selection after k representatives: rows into the fleet, weights, group errors."""

    chosen: list[int]
    weights: np.ndarray
    errors: dict[str, float]

    @property
    def error(self) -> float:
        return max_error(self.errors)


def _step(fleet: Estimands, chosen: list[int]) -> Step:
    weights = calibrate(fleet.of(chosen), fleet.totals)
    estimate = weights @ fleet.values[chosen]
    return Step(chosen, weights, group_errors(fleet.columns, estimate, fleet.totals))


def greedy_path(fleet: Estimands, k: int | None = None, target: float = DEFAULT_MAX_ERROR) -> list[Step]:
    """Steps for 1, 2, ... representatives, each adding the job that lowers the error most (ties:
    the earlier job); up to k, or without k until the error is within target. Stops early once
    the estimate is exact (then more representatives add nothing)."""
    steps: list[Step] = []
    limit = len(fleet.values) if k is None else k
    while len(steps) < limit:
        chosen = steps[-1].chosen if steps else []
        candidates = [_step(fleet, chosen + [j]) for j in range(len(fleet.values)) if j not in chosen]
        steps.append(min(candidates, key=lambda s: s.error))  # min keeps the first of equal errors
        if steps[-1].error <= EXACT or (k is None and steps[-1].error <= target):
            break
    return steps


@dataclass
class Selection:
    k: int
    features: list[str]
    jobs: list[dict]  # job_id, family, cluster, distance (standardised units), representative (bool), finish_ns
    clusters: list[dict]  # cluster, representative, jobs, weight, time_share, actual_ns, estimated_ns, estimate_error
    coverage: float  # 1 - the largest group error: the share of the fleet reproduced by the worst metric
    estimates: list[dict]  # group, key, actual, estimate, error: every estimand of the fleet
    errors: dict[str, float]  # per group (GROUPS)
    curve: list[dict]  # per k up to this one: k, error, errors
    notes: list[str] = field(default_factory=list)

    @property
    def error(self) -> float:
        return max_error(self.errors)

    def to_dict(self) -> dict:
        return {"k": self.k, "error": self.error, "errors": self.errors, "coverage": self.coverage,
                "estimates": self.estimates, "curve": self.curve, "features": self.features,
                "clusters": self.clusters, "jobs": self.jobs, "notes": self.notes}


def estimate_rows(fleet: Estimands, estimate: np.ndarray) -> list[dict]:
    """Per estimand: the fleet's value, the subset's estimate and the relative error (None
    where the fleet has none of it)."""
    return [{"group": g, "key": key, "actual": float(a), "estimate": float(e),
             "error": float(abs(e - a) / a) if a else None}
            for (g, key), a, e in zip(fleet.columns, fleet.totals, estimate)]


def _clusters(jobs: Sequence[JobSummary], step: Step) -> tuple[list[dict], list[dict]]:
    """Each job in the cluster of its nearest representative (standardised features): rows per
    job and per cluster. A diagnostic of who stands for whom; the estimates do not use it."""
    standard = standardised(feature_matrix(jobs)[1])
    gaps = np.linalg.norm(standard[:, None, :] - standard[None, step.chosen, :], axis=2)
    labels, distance = gaps.argmin(axis=1), gaps.min(axis=1)
    finish = np.array([j.finish_ns for j in jobs], dtype=np.float64)
    clusters = []
    for c, (rep, weight) in enumerate(zip(step.chosen, step.weights)):
        actual, estimate = finish[labels == c].sum(), weight * finish[rep]
        clusters.append({"cluster": c, "representative": jobs[rep].job_id, "jobs": int((labels == c).sum()),
                         "weight": float(weight), "time_share": float(actual / finish.sum()),
                         "actual_ns": int(actual), "estimated_ns": int(round(estimate)),
                         "estimate_error": float(abs(estimate - actual) / actual) if actual else None})
    rows = [{"job_id": job.job_id, "family": job_family(job), "cluster": int(labels[i]),
             "distance": float(distance[i]), "representative": i in step.chosen, "finish_ns": job.finish_ns}
            for i, job in enumerate(jobs)]
    return rows, clusters


def select_representatives(jobs: Sequence[JobSummary], k: int | None = None,
                           max_error: float = DEFAULT_MAX_ERROR) -> Selection:
    """k representatives of the jobs with their weights, or without k the fewest whose
    largest group error is within max_error (see the module docstring)."""
    if k is not None and k < 1:
        raise SelectionError(f"k must be at least 1, got {k}")
    if k is not None and len(jobs) < k:
        raise SelectionError(f"asked for {k} representatives of {len(jobs)} job(s); k may not exceed the jobs")
    if not jobs:
        raise SelectionError("no jobs to select from")
    fleet = estimands(jobs)
    path = greedy_path(fleet, k, max_error)
    final = path[-1]
    notes = []
    if k is not None and len(path) < k:
        notes.append(f"the estimate is exact with {len(path)} representative(s): k lowered from {k}")
    if k is None:
        notes.append(f"k = {len(path)}: the fewest representatives whose largest error is within {max_error:.1%}")
    rows, clusters = _clusters(jobs, final)
    return Selection(len(path), feature_matrix(jobs)[0], rows, clusters, max(0.0, 1.0 - final.error),
                     estimate_rows(fleet, final.weights @ fleet.values[final.chosen]), final.errors,
                     [{"k": i + 1, "error": s.error, "errors": s.errors} for i, s in enumerate(path)], notes)


def estimate_fleet(jobs: Sequence[JobSummary], representatives: Sequence[JobSummary]) -> tuple[list[dict], dict]:
    """How well representatives chosen elsewhere (another day) stand for `jobs`: their weights
    calibrated on this fleet's totals; (estimate rows, group errors)."""
    fleet = estimands(jobs)
    families = [key for g, key in fleet.columns if g == "time_by_family"]
    kinds = [key for g, key in fleet.columns if g == "bytes_by_kind"]
    subset = estimands(representatives, families, kinds)
    estimate = calibrate(subset, fleet.totals) @ subset.values
    return estimate_rows(fleet, estimate), group_errors(fleet.columns, estimate, fleet.totals)
