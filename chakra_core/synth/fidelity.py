"""How close synthetic jobs are to the real ones: measures per job and the fidelity report.

Per job (`measure_job`): operations per kind and every message size (over all ranks, as the
`collectives` table counts them), and one simulation on the reference system
(`chakra_core.sim.reference`: a Ring of the job's NPUs, 50 GB/s, 500 ns, and its system): the iteration time (the traced steps' finish time,
ns) and the exposed communication (the largest NPU's finish minus its GPU compute time).

The report (`fidelity_report`) compares synthetic jobs with the real jobs of the same
cluster and NPU count (the model keeps a summary of them: `Reference`):

- `composition_tv`: total variation distance between the operation-kind shares;
- `message_size_ks`: two-sample Kolmogorov-Smirnov statistic (scipy) per kind;
- `iteration_time` / `exposed_comm`: the medians and the relative error of the synthetic
  median to the real one.

Rows per (cluster, NPU count) where both exist, and `overall`: all of those real jobs
pooled against all synthetic jobs (fair when the synthetic jobs are drawn in the training
proportions of clusters and NPU counts, as `sample.sample_like_training` and the CLI do).
Targets (TARGETS) are checked on `overall` and on each row's iteration time.

Power (`jobs_needed`): a row's iteration-time comparison means something only when the
synthetic median is known to better than the 10% target. The median of n jobs whose log
times spread by sigma has a standard error of about sqrt(pi/2) sigma / sqrt(n), so a row
needs n >= pi/2 (1.96 sigma / ln 1.1)^2 simulated synthetic jobs (at least
MIN_SYNTHETIC_JOBS), sigma the larger of the real and the synthetic jobs' spreads. Each row
gets `power` ({samples, needed, sigma_log}) and a `verdict` (`row_verdict`): "meets targets",
"misses: <metric> <value> > <target>; ..." or "too few samples (n, need m)".
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from chakra_core.errors import ChakraError
from chakra_core.sim.reference import describe, simulate_reference
from chakra_core.synth.master import KIND_NAMES
from chakra_core.synth.profile import JobProfile

TARGETS = {"message_size_ks": 0.1, "composition_tv": 0.05, "iteration_time_relative_error": 0.10}
MIN_KS_SAMPLES = 50  # kinds with fewer messages on either side are reported, not judged
MIN_SYNTHETIC_JOBS = 3  # a median of fewer jobs is one or two jobs' own value
CONFIDENCE_Z = 1.96  # two-sided 95%
MAX_SIZE_VALUES = 4096  # a reference keeps at most this many distinct sizes per kind (quantiles beyond)


@dataclass
class JobMeasure:
    npus: int
    kind_counts: dict[int, int]
    sizes: dict[int, np.ndarray]  # kind -> message sizes of every rank
    finish_ns: int | None = None
    exposed_ns: int | None = None
    error: str | None = None  # why the job could not be simulated


def measure_job(profile: JobProfile, tables: Sequence[pa.Table], comm_groups: Mapping[int, Sequence[int]] | None,
                simulate: bool = True) -> JobMeasure:
    kinds = np.concatenate([r.kind for r in profile.ranks]) if profile.ranks else np.zeros(0, np.int64)
    sizes = np.concatenate([r.size for r in profile.ranks]) if profile.ranks else np.zeros(0, np.int64)
    measure = JobMeasure(profile.npus, {int(k): int((kinds == k).sum()) for k in np.unique(kinds)},
                         {int(k): sizes[kinds == k] for k in np.unique(kinds)})
    if simulate:
        try:
            result = simulate_reference(tables, comm_groups)
        except (ChakraError, ValueError) as exc:  # e.g. a sub-group the reference Ring cannot time
            measure.error = str(exc)
        else:
            measure.finish_ns = result.finish_ns
            measure.exposed_ns = max(n.exposed_comm_ns for n in result.npus)
    return measure


@dataclass
class Reference:
    """What the report needs of the real jobs of one (cluster, NPU count)."""

    npus: int
    jobs: int
    kind_counts: dict[int, int]
    sizes: dict[int, tuple[np.ndarray, np.ndarray]]  # kind -> (distinct sizes, how many messages each)
    finish_ns: list[int] = field(default_factory=list)  # of the jobs that simulate
    exposed_ns: list[int] = field(default_factory=list)

    def size_sample(self, kind: int) -> np.ndarray:
        values, counts = self.sizes.get(kind, (np.zeros(0), np.zeros(0, np.int64)))
        return np.repeat(values, counts)


def summarize(npus: int, measures: Sequence[JobMeasure]) -> Reference:
    """The reference of some real jobs of one NPU count."""
    counts: dict[int, int] = {}
    pooled: dict[int, list[np.ndarray]] = {}
    for m in measures:
        for k, c in m.kind_counts.items():
            counts[k] = counts.get(k, 0) + c
        for k, s in m.sizes.items():
            pooled.setdefault(k, []).append(s)
    sizes = {}
    for k, parts in pooled.items():
        values, n = np.unique(np.concatenate(parts), return_counts=True)
        if len(values) > MAX_SIZE_VALUES:  # keep the distribution, not every distinct value
            sample = np.repeat(values, n)
            values, n = np.unique(np.quantile(sample, np.linspace(0, 1, MAX_SIZE_VALUES), method="inverted_cdf"),
                                  return_counts=True)
            n = np.round(n * len(sample) / n.sum()).astype(np.int64)
        sizes[k] = (values.astype(np.int64), n.astype(np.int64))
    return Reference(npus, len(measures), counts, sizes, [m.finish_ns for m in measures if m.finish_ns is not None],
                     [m.exposed_ns for m in measures if m.exposed_ns is not None])


def _tv(a: Mapping[int, int], b: Mapping[int, int]) -> float:
    kinds = sorted(set(a) | set(b))
    pa_, pb_ = np.array([a.get(k, 0) for k in kinds], float), np.array([b.get(k, 0) for k in kinds], float)
    if not pa_.sum() or not pb_.sum():
        return 1.0 if pa_.sum() != pb_.sum() else 0.0
    return float(0.5 * np.abs(pa_ / pa_.sum() - pb_ / pb_.sum()).sum())


def _ks(real: np.ndarray, synthetic: np.ndarray) -> dict:
    row = {"real": int(len(real)), "synthetic": int(len(synthetic)), "statistic": None, "pvalue": None}
    if len(real) and len(synthetic):
        from scipy.stats import ks_2samp  # here: scipy.stats takes 0.4 s to import

        test = ks_2samp(real, synthetic)
        row.update(statistic=float(test.statistic), pvalue=float(test.pvalue))
    row["judged"] = min(len(real), len(synthetic)) >= MIN_KS_SAMPLES
    return row


def _median(values: Sequence[int]) -> float | None:
    return float(np.median(values)) if len(values) else None


def _relative(real: float | None, synthetic: float | None) -> float | None:
    return abs(synthetic - real) / real if real and synthetic is not None else None


def _compare(references: Sequence[Reference], synthetic: Sequence[JobMeasure]) -> dict:
    real_counts: dict[int, int] = {}
    for ref in references:
        for k, c in ref.kind_counts.items():
            real_counts[k] = real_counts.get(k, 0) + c
    synth_counts: dict[int, int] = {}
    for m in synthetic:
        for k, c in m.kind_counts.items():
            synth_counts[k] = synth_counts.get(k, 0) + c
    ks = {}
    for k in sorted(set(real_counts) | set(synth_counts)):
        real = np.concatenate([ref.size_sample(k) for ref in references])
        synth = np.concatenate([m.sizes[k] for m in synthetic if k in m.sizes] or [np.zeros(0)])
        ks[KIND_NAMES[k]] = _ks(real, synth)
    real_finish = [f for ref in references for f in ref.finish_ns]
    real_exposed = [e for ref in references for e in ref.exposed_ns]
    synth_finish = [m.finish_ns for m in synthetic if m.finish_ns is not None]
    synth_exposed = [m.exposed_ns for m in synthetic if m.exposed_ns is not None]
    time = {"real_median_ns": _median(real_finish), "synthetic_median_ns": _median(synth_finish)}
    time["relative_error"] = _relative(time["real_median_ns"], time["synthetic_median_ns"])
    exposed = {"real_median_ns": _median(real_exposed), "synthetic_median_ns": _median(synth_exposed)}
    exposed["relative_error"] = _relative(exposed["real_median_ns"], exposed["synthetic_median_ns"])
    return {"real_jobs": sum(ref.jobs for ref in references), "synthetic_jobs": len(synthetic),
            "composition_tv": _tv(real_counts, synth_counts), "message_size_ks": ks,
            "iteration_time": time, "exposed_comm": exposed,
            "unsimulated_synthetic_jobs": sum(m.finish_ns is None for m in synthetic)}


def jobs_needed(*log_time_samples: Sequence[float],
                target: float = TARGETS["iteration_time_relative_error"]) -> tuple[int, float]:
    """(synthetic jobs needed, sigma): see the module docstring; sigma is the largest spread of
    log times among the samples with two jobs or more (0 when none has)."""
    sigma = max((float(np.std(s, ddof=1)) for s in log_time_samples if len(s) >= 2), default=0.0)
    return max(MIN_SYNTHETIC_JOBS, math.ceil(math.pi / 2 * (CONFIDENCE_Z * sigma / math.log1p(target)) ** 2)), sigma


def _power(ref: Reference, synthetic: Sequence[JobMeasure]) -> dict:
    times = [m.finish_ns for m in synthetic if m.finish_ns]
    needed, sigma = jobs_needed(np.log([t for t in ref.finish_ns if t]), np.log(times))
    return {"samples": len(times), "needed": needed, "sigma_log": sigma}


def row_verdict(row: dict) -> str:
    """One line for a (cluster, NPU count) row: which targets it misses and by how much, or
    that it has too few simulated synthetic jobs to tell."""
    misses = []
    if row["composition_tv"] > TARGETS["composition_tv"]:
        misses.append(f"composition TV {row['composition_tv']:.3f} > {TARGETS['composition_tv']}")
    misses += [f"KS {kind} {ks['statistic']:.3f} > {TARGETS['message_size_ks']}"
               for kind, ks in row["message_size_ks"].items()
               if ks["judged"] and ks["statistic"] > TARGETS["message_size_ks"]]
    error = row["iteration_time"]["relative_error"]
    if error is not None and error > TARGETS["iteration_time_relative_error"]:
        misses.append(f"iteration time {error:.1%} off > {TARGETS['iteration_time_relative_error']:.0%}")
    power = row["power"]
    if power["samples"] < power["needed"]:
        return (f"too few samples ({power['samples']}, need {power['needed']})"
                + (f"; so far misses: {'; '.join(misses)}" if misses else ""))
    return "misses: " + "; ".join(misses) if misses else "meets targets"


def fidelity_report(references: Mapping[tuple[int, int], Reference],
                    synthetic: Sequence[tuple[int, JobMeasure]]) -> dict:
    """The report for synthetic jobs given as (cluster, measure) against the real references
    keyed (cluster, NPU count); see the module docstring."""
    by_group: dict[tuple[int, int], list[JobMeasure]] = {}
    for cluster, m in synthetic:
        by_group.setdefault((cluster, m.npus), []).append(m)
    rows, unmatched = [], []
    for (cluster, npus), measures in sorted(by_group.items()):
        ref = references.get((cluster, npus))
        if ref is None:
            unmatched.append({"cluster": cluster, "npus": npus, "synthetic_jobs": len(measures)})
            continue
        row = {"cluster": cluster, "npus": npus, **_compare([ref], measures), "power": _power(ref, measures)}
        rows.append({**row, "verdict": row_verdict(row)})
    matched_refs = [references[(r["cluster"], r["npus"])] for r in rows]
    matched = [m for (c, n), ms in by_group.items() if (c, n) in references for m in ms]
    overall = _compare(matched_refs, matched) if rows else None
    checks = {}
    if overall is not None:
        judged = {k: v["statistic"] for k, v in overall["message_size_ks"].items() if v["judged"]}
        checks["message_size_ks"] = {"worst": max(judged.values(), default=None),
                                     "pass": all(v <= TARGETS["message_size_ks"] for v in judged.values())}
        checks["composition_tv"] = {"value": overall["composition_tv"],
                                    "pass": overall["composition_tv"] <= TARGETS["composition_tv"]}
        errors = [r["iteration_time"]["relative_error"] for r in rows
                  if r["iteration_time"]["relative_error"] is not None]
        checks["iteration_time_relative_error"] = {
            "worst": max(errors, default=None),
            "pass": all(e <= TARGETS["iteration_time_relative_error"] for e in errors)}
    return {"reference_system": describe(), "targets": TARGETS, "min_ks_samples": MIN_KS_SAMPLES,
            "rows": rows, "overall": overall, "checks": checks,
            "without_real_jobs": unmatched,
            "note": None if rows else "no real jobs of the sampled clusters at these NPU counts: nothing to compare"}


def report_rows(report: dict) -> list[dict]:
    """The report as flat rows, one per (cluster, NPU count, metric, kind), for a table; the
    `overall` comparison has cluster and npus None. `target` is None where none applies
    (exposed communication; kinds with too few messages to judge)."""
    out = []
    groups = [(r["cluster"], r["npus"], r) for r in report["rows"]]
    if report.get("overall"):
        groups.append((None, None, report["overall"]))
    for cluster, npus, r in groups:
        base = {"cluster": cluster, "npus": npus, "real_jobs": r["real_jobs"], "synthetic_jobs": r["synthetic_jobs"]}
        out.append({**base, "metric": "composition_tv", "kind": None, "value": r["composition_tv"],
                    "target": TARGETS["composition_tv"]})
        for kind, ks in r["message_size_ks"].items():
            out.append({**base, "metric": "message_size_ks", "kind": kind, "value": ks["statistic"],
                        "target": TARGETS["message_size_ks"] if ks["judged"] else None})
        out.append({**base, "metric": "iteration_time_relative_error", "kind": None,
                    "value": r["iteration_time"]["relative_error"],
                    "target": TARGETS["iteration_time_relative_error"] if cluster is not None else None})
        out.append({**base, "metric": "exposed_comm_relative_error", "kind": None,
                    "value": r["exposed_comm"]["relative_error"], "target": None})
    for row in out:
        row["pass"] = None if row["target"] is None or row["value"] is None else bool(row["value"] <= row["target"])
    return out
