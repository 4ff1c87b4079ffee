"""GPU step-time prediction on the shipped H200 recordings (docs/gpu.md).

    .venv/bin/python tests/benchmarks/bench_gpu_prediction.py

Converts each one-GPU run of datasets/gpu-h200/ (gpt and mlp_tiny, which the shipped model was
fitted on) and datasets/gpu-h200-heldout/ (three runs of tools/collect.py --device cuda it never
saw), then prints per run: the recorded span and the simulation as recorded (reference system,
no model), and the error against the measured unprofiled time of four predictions: the baseline
a user had before (--compute-scale from the same measurement: right total, every kernel shrunk
too), the shipped model (chakra_core/sim/defaults/gpu_host_overhead.json), the host-overhead
model fitted on all runs, and the model fitted on the other runs alone (leave one out). Also the
whole-process time of `chakra convert` of the gpt run. On a machine with a GPU it records two
more runs first (tools/collect.py --device cuda) and predicts them too; folders given as
arguments replace all of these.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from chakra_core.convert.job import convert_job  # noqa: E402
from chakra_core.format.etfile import read_table  # noqa: E402
from chakra_core.format.job import Job  # noqa: E402
from chakra_core.replay.calibrate import calibrated_system, compute_scale, unprofiled_ns  # noqa: E402
from chakra_core.replay.hostfit import fit_host_overhead  # noqa: E402
from chakra_core.sim.reference import reference_network  # noqa: E402
from chakra_core.replay.plan import recorded_ns  # noqa: E402
from chakra_core.sim.config import (  # noqa: E402
    DEFAULT_HOST_OVERHEAD_SYSTEM,
    HostOverhead,
    load_system,
)
from chakra_core.sim.engine import simulate  # noqa: E402

RUNS = [REPO / "datasets" / "gpu-h200" / name for name in ("gpt", "mlp_tiny")] + sorted(
    (REPO / "datasets" / "gpu-h200-heldout").iterdir())
REFERENCE_SYSTEM = REPO / "datasets" / "astra-sim-reference" / "configs" / "Ring_4chunks.json"


def main(runs: list[Path]) -> None:
    work = Path(tempfile.mkdtemp(prefix="bench-gpu-"))
    jobs = []
    for run in runs:
        convert_job(str(run), str(work / run.name), "job")
        prefix = str(work / run.name / "job")
        jobs.append((prefix, Job.read(prefix)))
    system = calibrated_system()
    reference = load_system(str(REFERENCE_SYSTEM))
    shipped = load_system(DEFAULT_HOST_OVERHEAD_SYSTEM)
    everything = fit_host_overhead(jobs, reference_network, system)
    print(f"fitted on all: scale {everything['scale']:.4f}, launch {everything['launch_ns'] / 1e3:.2f} us")
    print(f"{'run':30} {'recorded':>10} {'as recorded':>12} {'compute-scale':>14} {'shipped model':>14} "
          f"{'model, all':>11} {'model, others':>14}")
    for k, (prefix, job) in enumerate(jobs):
        measured = unprofiled_ns(prefix, job.tables[0])
        network = reference_network(job.npus)
        as_recorded = simulate(job, network, reference).finish_ns
        scaled = simulate(job, network, reference, compute_scale=compute_scale(prefix)).finish_ns
        model = HostOverhead(scale=everything["scale"], launch_ns=everything["launch_ns"])
        with_all = simulate(job, network, reference.model_copy(update={"host_overhead": model})).finish_ns
        with_shipped = simulate(job, network, shipped).finish_ns
        others = [j for i, j in enumerate(jobs) if i != k]
        held_out = "-"
        if others:
            fit = fit_host_overhead(others, reference_network, system)
            alone = HostOverhead(scale=fit["scale"], launch_ns=fit["launch_ns"])
            held_out = f"{simulate(job, network, reference.model_copy(update={'host_overhead': alone})).finish_ns / measured - 1:+.1%}"
        span = max(recorded_ns(read_table(f"{prefix}.{r}.et")) for r in range(job.npus))
        print(f"{Path(prefix).parent.name:30} {span / 1e6:9.2f}ms {as_recorded / span - 1:+11.1%} "
              f"{scaled / measured - 1:+13.1%} {with_shipped / measured - 1:+13.1%} {with_all / measured - 1:+10.1%} "
              f"{held_out:>14}")
    start = time.perf_counter()
    subprocess.run([str(REPO / ".venv" / "bin" / "chakra"), "convert", str(runs[0]), "-o", str(work / "timed")],
                   check=True, capture_output=True)
    print(f"chakra convert {runs[0].name}, whole process: {time.perf_counter() - start:.2f} s")
    print("(as recorded: against the recorded span; the rest: against the measured unprofiled time)")


def recorded_here() -> list[Path]:
    """On a machine with a GPU: fresh runs of tools/collect.py --device cuda (one GPU, 20 timed
    unprofiled steps), predicted beside the shipped ones; elsewhere none."""
    import torch

    if not torch.cuda.is_available():
        print("no GPU here: the shipped recordings only")
        return []
    out = Path(tempfile.mkdtemp(prefix="bench-gpu-recorded-"))
    subprocess.run([sys.executable, "-m", "tools.collect", "--out", str(out), "--device", "cuda", "--scenario",
                    "mlp_ddp", "transformer_ddp", "--world-sizes", "1", "--size", "large", "--timed-steps", "20"],
                   check=True, cwd=REPO)
    return sorted(p for p in out.iterdir() if p.is_dir())


if __name__ == "__main__":
    main([Path(p) for p in sys.argv[1:]] or RUNS + recorded_here())
