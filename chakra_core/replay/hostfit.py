"""Fit the host-overhead model (the profiler's cost in host time) to steps timed without the
profiler (`chakra calibrate`; docs/gpu.md, 'The profiler's cost').

A job recorded with the execution-trace observer and Kineto on runs its host operators several
times slower than without; its kernels, timed by the device, keep their durations. The model
(sim/config.HostOverhead) gives each CPU node min(recorded, scale x recorded + launch_ns x the
device work it launched): two numbers, fitted so that each job, simulated on its network,
takes the time its unprofiled steps took (`unprofiled_step_ns` in its conversion report, the
median step times the steps recorded). The fit minimises the squared log errors over the jobs
(Nelder-Mead from scipy: every evaluation is a simulation, so there is no gradient to use), so
a job at half its time weighs as much as one at twice.
"""

from __future__ import annotations

import math

import numpy as np

from chakra_core.format.job import Job
from chakra_core.format.columns import device_compute
from chakra_core.replay.calibrate import CalibrationError, unprofiled_ns, unprofiled_steps_of
from chakra_core.sim.config import HostOverhead, SystemConfig
from chakra_core.sim.engine import simulate

START = (0.2, 10_000.0)  # scale, launch_ns: where the search starts (near the shipped fit)
MAX_EVALUATIONS = 200


def has_device_work(job: Job) -> bool:
    """Whether any rank holds device compute (a converted GPU trace: COMP nodes off the CPU)."""
    import pyarrow.compute as pc

    return any(pc.any(device_compute(t)).as_py() for t in job.tables if t.num_rows)


def host_model_jobs(jobs: list[tuple[str, Job]]) -> list[tuple[str, Job]]:
    """The (prefix, job)s the host-overhead model is fitted on: GPU jobs with unprofiled steps."""
    return [(prefix, job) for prefix, job in jobs if has_device_work(job) and unprofiled_steps_of(prefix)]


def fit_host_overhead(jobs: list[tuple[str, Job]], network_of, system: SystemConfig) -> dict:
    """The HostOverhead that best makes each (prefix, job) take its unprofiled time, simulated on
    network_of(npus) with `system`; with each job's residual and its time as recorded."""
    measured = [unprofiled_ns(prefix, job.tables[0]) for prefix, job in jobs]
    networks = [network_of(job.npus) for _, job in jobs]

    def simulated(overhead: HostOverhead | None) -> list[int]:
        with_model = system.model_copy(update={"host_overhead": overhead})
        return [simulate(job, network, with_model).finish_ns for (_, job), network in zip(jobs, networks)]

    def loss(x: np.ndarray) -> float:
        overhead = _model(x)
        if overhead is None:
            return math.inf
        return float(sum(math.log(s / m) ** 2 for s, m in zip(simulated(overhead), measured)))

    try:
        from scipy.optimize import minimize
    except ImportError as exc:
        raise CalibrationError("fitting the host-overhead model needs scipy: pip install 'chakra-fleet[synth]'") from exc
    best = minimize(loss, np.array(START), method="Nelder-Mead",
                    options={"maxfev": MAX_EVALUATIONS, "xatol": 1e-3, "fatol": 1e-6, "initial_simplex":
                             np.array([START, (START[0] * 1.5, START[1]), (START[0], START[1] * 1.5)])})
    overhead = _model(best.x)
    predicted, recorded = simulated(overhead), simulated(None)
    rows = [{"prefix": prefix, "npus": job.npus, "measured_ns": int(m), "simulated_ns": int(p),
             "relative_error": p / m - 1, "as_recorded_ns": int(r)}
            for (prefix, job), m, p, r in zip(jobs, measured, predicted, recorded)]
    return {"scale": overhead.scale, "launch_ns": overhead.launch_ns, "jobs": rows,
            "median_abs_error": float(np.median([abs(r["relative_error"]) for r in rows])),
            "evaluations": int(best.nfev)}


def _model(x) -> HostOverhead | None:
    scale, launch_ns = float(x[0]), float(x[1])
    if not (0 < scale <= 1 and 0 <= launch_ns <= 1e7):
        return None
    return HostOverhead(scale=scale, launch_ns=launch_ns)
