"""GPU step-time prediction on the shipped H200 recordings (docs/gpu.md, 'Errors per run').

    .venv/bin/python tests/benchmarks/bench_gpu_prediction.py [--quick]

Converts the sixteen one-GPU runs of datasets/gpu-h200/ (gpt, mlp_tiny), gpu-h200-heldout/ and
gpu-h200-more/ (recorded with the profiler-cost probe, profiler_cost.json) and prints per run:
the measured unprofiled time (median step times the two recorded steps, with the steps'
spread: the first and third quartiles against the median, and their drift: the median of the
later half of the steps against the median of all), two checks of the recording itself (`step
1/2`: the recorded host time of the first recorded step against the second's, where one-time work or a
slower stretch of the host shows, and `one-time`: the operators each of the two holds beyond the other
(analysis/step_work.py; DDP's bucket rebuild in the first); `no-work ops`: the median recorded time of operators that do
no work of their own, views and allocations, against what the probe's recorded terms give
them: the observer's cost in that recording against the probe's machine), the simulation as
recorded against the recorded span (reference system, no model), and the error against the
measured time of:

- `shipped`: the shipped system file (chakra_core/sim/defaults/gpu_host_overhead.json);
- `2 runs`: `chakra calibrate`'s fit on gpt and mlp_tiny alone, with the probe of
  gpu-h200-more (the same H200 and torch) and the device timing measured in those two runs;
- `all` and `leave out`: the per-operator model (the probe's terms, scale and launch_ns
  fitted) on every run, and on the runs of the other model families only (leave one model
  out: each family's runs predicted by a fit that saw none of them); `old, leave out` the same
  for the two-parameter model without the probe. The leave-out fits choose scale and launch_ns
  on a grid (GRID) rather than by calibrate's Nelder-Mead search, so that every fold reuses
  one simulation of each run per grid point.

Also the whole-process time of `chakra convert` of the gpt run. Folders given as arguments
replace the runs (each is then its own family).
"""

from __future__ import annotations

import itertools
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from chakra_core.analysis import step_work  # noqa: E402
from chakra_core.convert.pytorch.job import convert_job  # noqa: E402
from chakra_core.format.etfile import read_table  # noqa: E402
from chakra_core.format.job import Job  # noqa: E402
from chakra_core.replay.calibrate import calibrated_system, unprofiled_ns, unprofiled_steps_of  # noqa: E402
from chakra_core.replay.hostfit import device_timing_of, fit_host_overhead, probe_of  # noqa: E402
from chakra_core.sim.reference import reference_network  # noqa: E402
from chakra_core.replay.plan import recorded_ns  # noqa: E402
from chakra_core.sim.config import (  # noqa: E402
    DEFAULT_HOST_OVERHEAD_SYSTEM,
    HostOverhead,
    load_system,
)
from chakra_core.sim.engine import simulate  # noqa: E402
from chakra_core.sim.workload.nodes import input_counts  # noqa: E402

DATA = REPO / "datasets"
RUNS = ([DATA / "gpu-h200" / name for name in ("gpt", "mlp_tiny")] + sorted((DATA / "gpu-h200-heldout").iterdir())
        + sorted(p for p in (DATA / "gpu-h200-more").iterdir() if p.is_dir()))
# the model family of each run: leave-one-model-out holds out a family's runs together
FAMILIES = {"gpt": "eager GPT", "gpt4-d128": "eager GPT", "gpt6-d512": "eager GPT", "gpt6-d512-item": "eager GPT",
            "gpt12-d768": "eager GPT", "gpt12-d768-compiled": "compiled GPT", "gpt6-d512-cudagraphs": "CUDA graphs",
            "mlp_tiny": "MLP", "mlp_ddp-cuda-w1": "MLP", "mlp_ddp-large-cuda-w1": "MLP",
            "transformer_ddp-large-cuda-w1": "encoder", "resnet18-b4": "ResNet-18", "resnet18-b64": "ResNet-18",
            "resnet50-b8": "ResNet-50", "resnet50-b64": "ResNet-50", "resnet50-b128": "ResNet-50"}
REFERENCE_SYSTEM = DATA / "astra-sim-reference" / "configs" / "Ring_4chunks.json"
GRID = {"scale": (0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.5),
        "launch_ns": (0.0, 5_000.0, 7_500.0, 10_000.0, 12_500.0, 15_000.0, 17_500.0, 20_000.0)}
# operators that do no work of their own (metadata and allocation only): their recorded time is
# the profiler's records of them, which the probe's recorded terms predict
NO_WORK_OPS = frozenset(("aten::view", "aten::as_strided", "aten::t", "aten::transpose", "aten::detach", "detach",
                         "aten::reshape", "aten::_unsafe_view", "aten::expand", "aten::permute", "aten::slice",
                         "aten::select", "aten::unsqueeze", "aten::squeeze", "aten::alias", "aten::empty",
                         "aten::empty_strided", "aten::lift_fresh", "aten::_reshape_alias"))
RETIMED = sorted(p for p in (DATA / "gpu-h200-retimed").iterdir() if p.is_dir())


def main(runs: list[Path], quick: bool) -> None:
    work = Path(tempfile.mkdtemp(prefix="bench-gpu-"))
    jobs = []
    for run in runs:
        convert_job(str(run), str(work / run.name), "job")
        prefix = str(work / run.name / "job")
        jobs.append((prefix, Job.read(prefix)))
    names = [Path(prefix).parent.name for prefix, _ in jobs]
    families = [FAMILIES.get(name, name) for name in names]
    timing = device_timing_of([prefix for prefix, _ in jobs])
    probe = probe_of([prefix for prefix, _ in jobs])
    system = calibrated_system(device_timing=timing and timing.model_dump())
    print(f"device timing over the runs: launch latency {timing.launch_latency_ns:.0f} ns, "
          f"gap {timing.kernel_gap_ns:.0f} ns")
    shipped = load_system(DEFAULT_HOST_OVERHEAD_SYSTEM)
    two = [j for j, name in zip(jobs, names) if name in ("gpt", "mlp_tiny")]
    fit_two = fit_host_overhead(two, reference_network, system, probe)
    model_two = HostOverhead(**{k: fit_two[k] for k in HostOverhead.model_fields})
    print(f"calibrated on gpt and mlp_tiny with the probe: {model_two}")
    measured = [unprofiled_ns(prefix, job.tables[0]) for prefix, job in jobs]
    new = _grid_errors(jobs, measured, system, probe)
    old = _grid_errors(jobs, measured, system, None) if not quick else None
    best_all = _best(new, range(len(jobs)))
    print(f"per-operator model fitted on all (grid): {dict(zip(GRID, best_all))}")
    print(f"{'run':30} {'family':12} {'measured':>9} {'spread':>12} {'drift':>6} {'step 1/2':>9} {'one-time':>10} {'no-work ops':>12} "
          f"{'as recorded':>12} {'shipped':>8} {'2 runs':>7} {'all':>6} {'leave out':>10} {'old, leave out':>15}")
    rows = []
    for k, ((prefix, job), name, family, m) in enumerate(zip(jobs, names, families, measured)):
        network = reference_network(job.npus)
        span = max(recorded_ns(read_table(f"{prefix}.{r}.et")) for r in range(job.npus))
        as_recorded = simulate(job, network, load_system(str(REFERENCE_SYSTEM))).finish_ns / span - 1
        errors = [simulate(job, network, s).finish_ns / m - 1 for s in
                  (shipped, system.model_copy(update={"host_overhead": model_two}))]
        others = [i for i, f in enumerate(families) if f != family]
        errors += [new[best_all][k], new[_best(new, others)][k] if others else math.nan,
                   old[_best(old, others)][k] if old and others else math.nan]
        steps = np.array(unprofiled_steps_of(prefix))
        spread = f"{np.percentile(steps, 25) / np.median(steps) - 1:+.0%}/{np.percentile(steps, 75) / np.median(steps) - 1:+.0%}"
        drift = np.median(steps[len(steps) // 2:]) / np.median(steps) - 1  # the later half against all
        rows.append(errors)
        et = read_table(f"{prefix}.0.et")
        first, second = step_work.step_table(et).to_pylist()[:2]
        print(f"{name:30} {family:12} {m / 1e6:7.2f}ms {spread:>12} {drift:+6.0%} "
              f"{first['host_us'] / second['host_us'] - 1:+9.0%} {first['one_time_operators']:5}/{second['one_time_operators']:<4}"
              f"{_no_work_ratio(et, probe):11.2f}x {as_recorded:+11.1%} "
              + " ".join(f"{e:+{w}.0%}" for e, w in zip(errors, (8, 7, 6, 10, 15))))
    table = np.abs(np.array(rows))
    print("median |error| " + " ".join(f"{label} {np.nanmedian(table[:, i]):.1%}" for i, label in
                                       enumerate(("shipped", "2 runs", "all", "leave out", "old, leave out"))))
    print("within 15% (5%) " + " ".join(f"{label} {np.sum(table[:, i] < 0.15)} ({np.sum(table[:, i] < 0.05)})"
                                        for i, label in enumerate(("shipped", "2 runs", "all", "leave out",
                                                                   "old, leave out"))) + f" of {len(rows)}")
    if not quick:
        _retimed(work, system.model_copy(update={"host_overhead": model_two}))
    start = time.perf_counter()
    subprocess.run([str(REPO / ".venv" / "bin" / "chakra"), "convert", str(runs[0]), "-o", str(work / "timed")],
                   check=True, capture_output=True)
    print(f"chakra convert {runs[0].name}, whole process: {time.perf_counter() - start:.2f} s")


def _retimed(work: Path, system) -> None:
    """The runs recorded again on another H200 (gpu-h200-retimed/), predicted with the `2 runs`
    model: the step against the median and quartiles of their 60 unprofiled steps."""
    for run in RETIMED:
        convert_job(str(run), str(work / "retimed" / run.name), "job")
        prefix = str(work / "retimed" / run.name / "job")
        job = Job.read(prefix)
        steps = np.array(unprofiled_steps_of(prefix))
        ratio = simulate(job, reference_network(job.npus), system).finish_ns / unprofiled_ns(prefix, job.tables[0])
        print(f"retimed {run.name:20} measured median step {np.median(steps) / 1e6:6.2f} ms, quartiles "
              f"{np.percentile(steps, 25) / 1e6:.2f} to {np.percentile(steps, 75) / 1e6:.2f} ms; 2 runs {ratio - 1:+.0%}")


def _no_work_ratio(table, probe: dict | None) -> float:
    """Median of recorded / predicted recorded time over the operators of no work of their own."""
    if not probe:
        return math.nan
    rows = table.select(["name", "duration_micros", "children"]).to_pylist()
    ratios = [r["duration_micros"] * 1000 / (probe["recorded_op_ns"] + probe["recorded_input_ns"] * inputs
                                              + probe["recorded_child_ns"] * (r["children"] or 0))
              for r, inputs in zip(rows, input_counts(table)) if r["name"] in NO_WORK_OPS]
    return float(np.median(ratios)) if ratios else math.nan


def _grid_errors(jobs, measured, system, probe) -> dict[tuple, list[float]]:
    """grid point (scale, launch_ns) -> each job's relative error with that model."""
    fixed = {k: v for k, v in (probe or {}).items() if k != "launch_ns"}
    out = {}
    for scale, launch_ns in itertools.product(*GRID.values()):
        model = HostOverhead(scale=scale, launch_ns=launch_ns, **fixed)
        with_model = system.model_copy(update={"host_overhead": model})
        out[(scale, launch_ns)] = [simulate(job, reference_network(job.npus), with_model).finish_ns / m - 1
                                   for (_, job), m in zip(jobs, measured)]
    return out


def _best(errors: dict[tuple, list[float]], chosen) -> tuple:
    """The grid point of least squared log error over the chosen jobs (calibrate's loss)."""
    chosen = list(chosen)
    return min(errors, key=lambda point: sum(math.log1p(errors[point][i]) ** 2 for i in chosen))


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--quick"]
    main([Path(p) for p in args] or RUNS, "--quick" in sys.argv[1:])
