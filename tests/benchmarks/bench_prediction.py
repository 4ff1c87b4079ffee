"""Benchmark: how close replay and simulation come to measured iteration time.

Records fresh gloo runs on this machine (mlp and transformer with DDP, 2 and 4 ranks;
tools/collect.py, two profiled steps, then five steps timed with the profiler off),
converts them, replays them (`chakra replay`), calibrates the network model on the 2-rank
runs' measured collectives plus an all-reduce sweep (`chakra calibrate`), and simulates every
job with the calibrated model at its own size and the 2-rank jobs also projected to 4 NPUs.
Prints per job and step: measured (profiler off), recorded (the trace's own span), replayed
and simulated, with each error against measured. Same-run baseline: the simulation with the
reference system (Ring 50 GB/s, 500 ns) instead of the calibrated one. The last column also
scales compute by the profiler's cost as measured on the 2-rank runs (unprofiled step time over
the recorded one), which the 4-rank runs then test.

    .venv/bin/python tests/benchmarks/bench_prediction.py [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from chakra_core.convert.job import convert_job  # noqa: E402
from chakra_core.format.etfile import read_table  # noqa: E402
from chakra_core.replay.calibrate import (  # noqa: E402
    fit,
    measure,
    samples_from_tables,
    write_calibration,
)
from chakra_core.replay.launch import recorded_ns, replay_job  # noqa: E402
from chakra_core.sim.workload import simulate_files  # noqa: E402
from tools import collect  # noqa: E402

SCENARIOS = ("mlp_ddp", "transformer_ddp")
WORLDS = (2, 4)
TIMED_STEPS = 5
REFERENCE_SYSTEM = REPO / "datasets" / "astra-sim-reference" / "configs" / "Ring_4chunks.json"


def measured_step_ns(run_dir: Path, world: int) -> float:
    """Median over the timed steps of the slowest rank's step time."""
    steps = [json.loads((run_dir / f"rank{r}.timing.json").read_text())["steps_ns"] for r in range(world)]
    return statistics.median(max(per_rank) for per_rank in zip(*steps))


def ring(folder: Path, npus: int, bandwidth: float = 50.0, latency: float = 500.0) -> str:
    path = folder / f"ring{npus}.yml"
    path.write_text(f"topology: [ Ring ]\nnpus_count: [ {npus} ]\nbandwidth: [ {bandwidth} ]\n"
                    f"latency: [ {latency} ]\n")
    return str(path)


def simulated_ns(prefix: str, network: str, system: str, traced: int | None = None, compute_scale: float = 1.0) -> int:
    result, _ = simulate_files(prefix, network, system, traced_npus=traced, compute_scale=compute_scale)
    return result.finish_ns


def recorded_step_ns(prefix: str, world: int) -> float:
    return max(recorded_ns(read_table(f"{prefix}.{r}.et")) for r in range(world)) / collect.ACTIVE


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", type=Path, help="keep the recordings and configs here")
    args = parser.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="chakra-prediction-"))
    jobs = {}
    for scenario in SCENARIOS:
        for world in WORLDS:
            run_dir = collect.run(scenario, world, work / "runs", timed_steps=TIMED_STEPS)
            prefix = str(work / "et" / f"{scenario}-w{world}" / "job")
            convert_job(str(run_dir), str(Path(prefix).parent), "job")
            jobs[(scenario, world)] = (prefix, measured_step_ns(run_dir, world))
            print(f"recorded and converted {scenario} at {world} ranks", flush=True)
    samples = measure(2, iterations=3)
    for (scenario, world), (prefix, _) in jobs.items():
        if world == 2:
            tables = [read_table(f"{prefix}.{r}.et") for r in range(world)]
            samples += samples_from_tables(tables, None, world)
    calibration = fit(samples)
    configs = {n: write_calibration(str(work / f"calibrated-{n}"), n, calibration) for n in WORLDS}
    print(f"calibrated: latency {calibration['latency_ns']:,.0f} ns, bandwidth {calibration['bandwidth_gbps']:.3f} "
          f"GB/s, median error {calibration['median_abs_error']:.1%} over {len(calibration['samples'])} samples\n")
    steps = collect.ACTIVE
    # the profiler's own cost: how much longer the recorded steps took than the unprofiled ones
    scale = statistics.median(measured / recorded_step_ns(prefix, world)
                              for (_, world), (prefix, measured) in jobs.items() if world == 2)
    print(f"compute scale (2-rank runs: measured / recorded step): {scale:.3f}\n")
    print(f"{'job':24} {'measured':>9} {'recorded':>9} {'replayed':>9} {'reference':>10} {'calibrated':>10} "
          f"{'+scale':>8}  (ms per step; then each error vs measured)")
    for (scenario, world), (prefix, measured) in jobs.items():
        network, system = configs[world]["network"], configs[world]["system"]
        row = [recorded_step_ns(prefix, world),
               replay_job(prefix, iterations=3, warmup=1, timeout_s=120)["median_ns"] / steps,
               simulated_ns(prefix, ring(work, world), str(REFERENCE_SYSTEM)) / steps,
               simulated_ns(prefix, network, system) / steps,
               simulated_ns(prefix, network, system, compute_scale=scale) / steps]
        print(f"{scenario + f'-w{world}':24} {measured / 1e6:9.2f} " + " ".join(f"{v / 1e6:9.2f}" for v in row)
              + "   " + ", ".join(f"{v / measured - 1:+.0%}" for v in row))
    for scenario in SCENARIOS:
        prefix, _ = jobs[(scenario, 2)]
        measured4 = jobs[(scenario, 4)][1]
        projected = simulated_ns(prefix, configs[4]["network"], configs[4]["system"], traced=2,
                                 compute_scale=scale) / steps
        print(f"{scenario}: the 2-rank trace projected to 4 NPUs (weak scaling, calibrated, scaled): "
              f"{projected / 1e6:.2f} ms against {measured4 / 1e6:.2f} ms measured ({projected / measured4 - 1:+.0%})")
    print(f"\nfiles under {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
