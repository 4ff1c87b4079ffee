"""Fit the host-overhead model (the profiler's cost in host time) to steps timed without the
profiler (`chakra calibrate`; docs/gpu.md, 'The profiler's cost').

A job recorded with the execution-trace observer and Kineto on runs its host operators several
times slower than without; its kernels, timed by the device, keep their durations. The model
(sim/gpumodel.HostOverhead) gives each CPU node its unprofiled time from what the trace shows
of it: its recorded duration, the device work it launched and, where the profiler-cost probe
of the recording machine is known (profcost.py, probe_of), its recorded inputs. Two numbers,
`scale` and `launch_ns`, are fitted so that each job, simulated on its network with the
measured device timing (device_timing_of), takes the time its unprofiled steps took
(`unprofiled_step_ns` in its conversion report, the median step times the steps recorded);
the probe's terms are kept as measured. The fit minimises the squared log errors over the jobs
(Nelder-Mead from scipy: every evaluation is a simulation, so there is no gradient to use), so
a job at half its time weighs as much as one at twice.
"""

from __future__ import annotations

import math

import numpy as np

from chakra_core.analysis import step_work
from chakra_core.documents import ConfigError, read_document
from chakra_core.format.columns import device_compute
from chakra_core.format.job import Job, rank_url
from chakra_core.replay.calibrate import CalibrationError, unprofiled_ns, unprofiled_steps_of
from chakra_core.replay.profcost import checked_probe, probe_terms
from chakra_core.sim.config import DeviceTiming, HostOverhead, SystemConfig
from chakra_core.sim.engine import simulate

START = (0.2, 10_000.0)  # scale, launch_ns: where the search starts (near the shipped fit)
MAX_EVALUATIONS = 200
MIN_SAMPLES = 10  # launches (or gaps) a rank must have measured for its median to count


def has_device_work(job: Job) -> bool:
    """Whether any rank holds device compute (a converted GPU trace: COMP nodes off the CPU)."""
    import pyarrow.compute as pc

    return any(pc.any(device_compute(t)).as_py() for t in job.tables if t.num_rows)


def host_model_jobs(jobs: list[tuple[str, Job]]) -> list[tuple[str, Job]]:
    """The (prefix, job)s the host-overhead model is fitted on: GPU jobs with unprofiled steps."""
    return [(prefix, job) for prefix, job in jobs if has_device_work(job) and unprofiled_steps_of(prefix)]


def fit_host_overhead(jobs: list[tuple[str, Job]], network_of, system: SystemConfig,
                      probe: dict[str, float] | None = None) -> dict:
    """The HostOverhead that best makes each (prefix, job) take its unprofiled time, simulated on
    network_of(npus) with `system` (its device_timing included); with each job's residual and
    its time as recorded. `probe`: the per-operator terms of the profiler's cost measured on the
    recording machine (profcost.probe_terms), kept as they are; the fit then chooses `scale`
    and `launch_ns` from the probe's launch cost on."""
    measured = [unprofiled_ns(prefix, job.tables[0]) for prefix, job in jobs]
    networks = [network_of(job.npus) for _, job in jobs]
    fixed = {k: v for k, v in (probe or {}).items() if k != "launch_ns"}
    start = (START[0], probe["launch_ns"]) if probe else START

    def simulated(overhead: HostOverhead | None) -> list[int]:
        with_model = system.model_copy(update={"host_overhead": overhead})
        return [simulate(job, network, with_model).finish_ns for (_, job), network in zip(jobs, networks)]

    def loss(x: np.ndarray) -> float:
        overhead = _model(x, fixed)
        if overhead is None:
            return math.inf
        return float(sum(math.log(s / m) ** 2 for s, m in zip(simulated(overhead), measured)))

    try:
        from scipy.optimize import minimize
    except ImportError as exc:
        raise CalibrationError("fitting the host-overhead model needs scipy: pip install 'chakra-fleet[synth]'") from exc
    best = minimize(loss, np.array(start), method="Nelder-Mead",
                    options={"maxfev": MAX_EVALUATIONS, "xatol": 1e-3, "fatol": 1e-6, "initial_simplex":
                             np.array([start, (start[0] * 1.5, start[1]), (start[0], start[1] * 1.5)])})
    overhead = _model(best.x, fixed)
    predicted, recorded = simulated(overhead), simulated(None)
    rows = [{"prefix": prefix, "npus": job.npus, "measured_ns": int(m), "simulated_ns": int(p),
             "relative_error": p / m - 1, "as_recorded_ns": int(r), "steps_note": steps_note(prefix, job)}
            for (prefix, job), m, p, r in zip(jobs, measured, predicted, recorded)]
    return {**overhead.model_dump(), "jobs": rows,
            "median_abs_error": float(np.median([abs(r["relative_error"]) for r in rows])),
            "evaluations": int(best.nfev), "probe": bool(probe)}


def steps_note(prefix: str, job: Job) -> str | None:
    """Where the job's recorded steps are not one step repeated, what differs (the first rank
    that says so; analysis/step_work.py): the fit takes each job's steps as its steady step."""
    for rank, table in enumerate(job.tables):
        note = step_work.note(rank_url(prefix, rank), step_work.step_table(table))
        if note:
            return note
    return None


def _model(x, fixed: dict[str, float]) -> HostOverhead | None:
    scale, launch_ns = float(x[0]), float(x[1])
    if not (0 < scale <= 1 and 0 <= launch_ns <= 1e7):
        return None
    return HostOverhead(scale=scale, launch_ns=launch_ns, **fixed)


def probe_of(prefixes: list[str]) -> dict[str, float] | None:
    """The median per-operator terms of the probes (profiler_cost.json) the jobs' conversion
    reports carry; None when none does."""
    terms = []
    for prefix in prefixes:
        document = _report(prefix).get("profiler_cost")
        if document is not None:
            terms.append(probe_terms(checked_probe(document, f"{prefix}.report.json: profiler_cost")))
    if not terms:
        return None
    return {key: float(np.median([t[key] for t in terms])) for key in terms[0]}


def device_timing_of(prefixes: list[str]) -> DeviceTiming | None:
    """The median launch latency and back-to-back gap the jobs' ranks measured
    (convert/devicetiming.py, in their conversion reports); None when none measured any."""
    latency, gap = [], []
    for prefix in prefixes:
        ranks = _report(prefix).get("ranks_report")
        for i, rank in enumerate(ranks if isinstance(ranks, list) else []):
            timing = rank.get("device_timing") if isinstance(rank, dict) else None
            if isinstance(timing, dict):
                where = f"{prefix}.report.json: ranks_report[{i}].device_timing"
                if _count(timing, "launches_measured") >= MIN_SAMPLES:
                    latency.append(_nanoseconds(timing, "launch_latency_ns", where))
                if _count(timing, "gaps_measured") >= MIN_SAMPLES:
                    gap.append(_nanoseconds(timing, "kernel_gap_ns", where))
    if not latency and not gap:
        return None
    return DeviceTiming(launch_latency_ns=float(np.median(latency)) if latency else 0.0,
                        kernel_gap_ns=float(np.median(gap)) if gap else 0.0)


def _nanoseconds(timing: dict, key: str, where: str) -> float:
    """A measured time of a conversion report: a finite number of ns from 0 to a second, or one
    line naming the report and the key."""
    value = timing.get(key)
    if type(value) not in (int, float) or not 0 <= value <= 1e9:
        raise CalibrationError(f"{where}.{key}: {str(value)[:40]!r} is not a time in ns from 0 to 1e9; convert the job "
                               "again")
    return float(value)


def _count(timing: dict, key: str) -> int:
    value = timing.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _report(prefix: str) -> dict:
    try:
        _, document = read_document(f"{prefix}.report.json")
    except ConfigError:
        return {}
    return document if isinstance(document, dict) else {}
