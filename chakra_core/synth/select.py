"""Representative selection: k jobs, with weights, that stand for a fleet.

Each job becomes a feature vector (FEATURES below) built from its per-rank statistics
(`chakra_core.stats.trace_row`, the rows of the pipeline's `traces` table) and from one
simulation on the reference system (`reference.py`, the pipeline's `ring-native` system):

- NPU count (log2);
- op mix: the share of compute time per operator class;
- bytes by collective: the share of communication bytes per kind, and log10 of the bytes
  per rank;
- compute/communication: the simulated compute and exposed-communication shares of the
  job's time;
- message-size quantiles (log2 of p50, p90, p99);
- simulated time (log10 ns).

Features are standardised (a constant feature contributes nothing) and clustered with
k-means; each cluster's representative is its member nearest the centroid, its weight the
cluster's share of the jobs. Coverage says how well the k jobs stand for the fleet's total
simulated time: per cluster, the representative's time x the cluster's job count estimates
the cluster's total; coverage = 1 - sum |estimate - actual| / fleet total (1.0 when every
cluster's estimate is exact; k = number of jobs always gives 1.0).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
from sklearn.cluster import KMeans

from chakra_core.errors import ChakraError
from chakra_core.stats import OP_CLASS_NAMES, trace_row
from chakra_core.synth.reference import simulate_reference



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


def _shares(totals: dict[str, float], keys: Sequence[str]) -> list[float]:
    whole = sum(totals.values())
    return [totals.get(k, 0.0) / whole if whole else 0.0 for k in keys]


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


@dataclass
class Selection:
    k: int
    features: list[str]
    jobs: list[dict]  # job_id, cluster, distance (standardised units), representative (bool), finish_ns
    clusters: list[dict]  # cluster, representative, jobs, weight, time_share, actual_ns, estimated_ns, estimate_error
    coverage: float
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"k": self.k, "coverage": self.coverage, "features": self.features, "clusters": self.clusters,
                "jobs": self.jobs, "notes": self.notes}


def select_representatives(jobs: Sequence[JobSummary], k: int, seed: int = 0) -> Selection:
    """k representatives of the jobs (k-means on standardised features; see the module docstring)."""
    if k < 1:
        raise SelectionError(f"k must be at least 1, got {k}")
    if len(jobs) < k:
        raise SelectionError(f"asked for {k} representatives of {len(jobs)} job(s); k may not exceed the jobs")
    names, raw = feature_matrix(jobs)
    spread = raw.std(axis=0)
    standard = np.divide(raw - raw.mean(axis=0), spread, out=np.zeros_like(raw), where=spread > 0)
    distinct = len(np.unique(standard.round(12), axis=0))
    notes = []
    if distinct < k:  # k-means cannot make more non-empty clusters than distinct points
        notes.append(f"only {distinct} distinct feature vectors among {len(jobs)} jobs: k lowered from {k}")
        k = distinct
    labels = KMeans(n_clusters=k, n_init=10, random_state=seed).fit_predict(standard)
    distances = np.zeros(len(jobs))
    representative: dict[int, int] = {}
    for c in range(k):
        members = np.flatnonzero(labels == c)
        centroid = standard[members].mean(axis=0)
        d = np.linalg.norm(standard[members] - centroid, axis=1)
        distances[members] = d
        representative[c] = int(members[np.argmin(d)])  # ties: the first job in input order
    finish = np.array([job.finish_ns for job in jobs], dtype=np.float64)
    fleet_ns = finish.sum()
    clusters, error_ns = [], 0.0
    for c in sorted(representative, key=lambda c: -finish[labels == c].sum()):
        members = labels == c
        actual, estimate = finish[members].sum(), finish[representative[c]] * members.sum()
        error_ns += abs(estimate - actual)
        clusters.append({"cluster": c, "representative": jobs[representative[c]].job_id, "jobs": int(members.sum()),
                         "weight": float(members.mean()), "time_share": float(actual / fleet_ns) if fleet_ns else 0.0,
                         "actual_ns": int(actual), "estimated_ns": int(estimate),
                         "estimate_error": float(abs(estimate - actual) / actual) if actual else 0.0})
    rows = [{"job_id": job.job_id, "cluster": int(labels[i]), "distance": float(distances[i]),
             "representative": representative[labels[i]] == i, "finish_ns": job.finish_ns}
            for i, job in enumerate(jobs)]
    coverage = max(0.0, 1.0 - error_ns / fleet_ns) if fleet_ns else 1.0
    return Selection(k, names, rows, clusters, coverage, notes)
