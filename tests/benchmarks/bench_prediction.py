"""Benchmark: how close replay and simulation come to measured iteration time.

Each trial records fresh gloo runs on this machine (tools/collect.py: mlp and transformer with
DDP at 2 and 4 ranks, `--size large` by default: operators of a millisecond or more; two
profiled steps, then `--timed-steps` steps timed with the profiler off), converts them,
calibrates the network on the 2-rank runs (their measured collectives plus an all-reduce
sweep, `chakra calibrate --measure`), then per job replays it (`chakra replay`) and simulates
it, both as recorded and with compute scaled by the profiler's cost in that run (its
unprofiled step time over the recorded one, as `chakra calibrate` finds it in the report: at a job's own
size that scale is fitted on the job itself, so what is left is communication and overlap),
and projects each 2-rank trace to 4 NPUs with the 2-rank run's scale (a prediction: nothing
of the 4-rank run is used); the 4-rank traces are also simulated with the 2-rank run's scale
(the profiler's cost carried from one run to another). Every figure is per training step, its error against the
unprofiled measurement.

Same-run baselines: the trace's own (profiled) span, and the simulation with the reference
system (Ring 50 GB/s, 500 ns, Ring_4chunks.json). The 4-rank runs never feed the calibration:
they test it. On a machine with fewer cores than ranks the ranks share cores, so the
projection is also shown with compute slowed by ranks per core (`contention`).

    .venv/bin/python tests/benchmarks/bench_prediction.py [--trials 3] [--size large] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from chakra_core.convert.pytorch.job import convert_job  # noqa: E402
from chakra_core.format.etfile import read_table  # noqa: E402
from chakra_core.replay.calibrate import (  # noqa: E402
    compute_scale,
    fit,
    measure,
    samples_from_tables,
    write_calibration,
)
from chakra_core.replay.launch import replay_job  # noqa: E402
from chakra_core.replay.plan import recorded_ns  # noqa: E402
from chakra_core.sim.files import simulate_files  # noqa: E402
from tools import collect, programlog  # noqa: E402

SCENARIOS = ("mlp_ddp", "transformer_ddp")
WORLDS = (2, 4)
CALIBRATED, PROJECTED = 2, 4
REFERENCE_SYSTEM = REPO / "datasets" / "astra-sim-reference" / "configs" / "Ring_4chunks.json"
COLUMNS = ("recorded", "replayed", "replayed, scaled", "sim reference", "sim calibrated", "sim calibrated, scaled")
CORES = len(os.sched_getaffinity(0))


def measured_step_ns(run_dir: Path, world: int) -> float:
    """Median over the timed steps of the slowest rank's step time."""
    steps = [json.loads((run_dir / f"rank{r}.timing.json").read_text())["steps_ns"] for r in range(world)]
    return statistics.median(max(per_rank) for per_rank in zip(*steps))


def ring(folder: Path, npus: int, bandwidth: float = 50.0, latency: float = 500.0) -> str:
    path = folder / f"ring{npus}.yml"
    path.write_text(f"topology: [ Ring ]\nnpus_count: [ {npus} ]\nbandwidth: [ {bandwidth} ]\n"
                    f"latency: [ {latency} ]\n")
    return str(path)


def simulated_step_ns(prefix: str, network: str, system: str, traced: int | None = None,
                      compute_scale: float = 1.0) -> float:
    result, _ = simulate_files(prefix, network, system, traced_npus=traced, compute_scale=compute_scale)
    return result.finish_ns / programlog.ACTIVE


def recorded_step_ns(prefix: str, world: int) -> float:
    return max(recorded_ns(read_table(f"{prefix}.{r}.et")) for r in range(world)) / programlog.ACTIVE


def replayed_step_ns(prefix: str, compute_scale: float = 1.0) -> float:
    return replay_job(prefix, iterations=5, warmup=1, timeout_s=120, compute_scale=compute_scale)["median_ns"] / \
        programlog.ACTIVE


def contention(ranks: int) -> float:
    """How much slower compute runs when the ranks share this machine's cores."""
    return max(1.0, ranks / CORES)


def record(work: Path, size: str, timed_steps: int) -> dict:
    jobs = {}
    for scenario in SCENARIOS:
        for world in WORLDS:
            run_dir = collect.run(scenario, world, work / "runs", timed_steps=timed_steps, size=size)
            prefix = str(work / "et" / run_dir.name / "job")
            convert_job(str(run_dir), str(Path(prefix).parent), "job")
            jobs[(scenario, world)] = (prefix, measured_step_ns(run_dir, world))
            print(f"  recorded and converted {run_dir.name}", flush=True)
    return jobs


def calibrate(work: Path, jobs: dict) -> tuple[dict, dict]:
    """The network fitted on the 2-rank runs and a sweep; each run's compute scale."""
    samples = measure(CALIBRATED, iterations=3)
    for (_, world), (prefix, _) in jobs.items():
        if world == CALIBRATED:
            samples += samples_from_tables([read_table(f"{prefix}.{r}.et") for r in range(world)], None, world)
    calibration = fit(samples)
    configs = {n: write_calibration(str(work / f"calibrated-{n}"), n, calibration) for n in WORLDS}
    scales = {job: compute_scale(prefix) for job, (prefix, _) in jobs.items()}  # from the timed steps beside each
    print(f"  calibrated: latency {calibration['latency_ns']:,.0f} ns, bandwidth {calibration['bandwidth_gbps']:.3f}"
          f" GB/s (median error {calibration['median_abs_error']:.1%}, {len(calibration['samples'])} samples); "
          f"compute scale (the profiler's cost) " + ", ".join(f"{s}-w{w} {v:.3f}" for (s, w), v in scales.items()),
          flush=True)
    return configs, scales


def trial(work: Path, size: str, timed_steps: int) -> dict:
    """{(job, column): error against measured} of one trial; prints its table."""
    jobs = record(work, size, timed_steps)
    configs, scales = calibrate(work, jobs)
    errors = {}
    print(f"  {'job':28} {'measured':>9} " + " ".join(f"{c:>10.10}" for c in COLUMNS) + "  (ms per step)")
    for (scenario, world), (prefix, measured) in jobs.items():
        network, system, scale = configs[world]["network"], configs[world]["system"], scales[(scenario, world)]
        row = dict(zip(COLUMNS, (recorded_step_ns(prefix, world), replayed_step_ns(prefix),
                                 replayed_step_ns(prefix, scale),
                                 simulated_step_ns(prefix, ring(work, world), str(REFERENCE_SYSTEM)),
                                 simulated_step_ns(prefix, network, system),
                                 simulated_step_ns(prefix, network, system, compute_scale=scale))))
        name = f"{scenario}-w{world}"
        errors.update({(name, column): value / measured - 1 for column, value in row.items()})
        print(f"  {name:28} {measured / 1e6:9.2f} " + " ".join(f"{v / 1e6:10.2f}" for v in row.values()))
        print(f"  {'':28} {'':9} " + " ".join(f"{errors[(name, c)]:+10.1%}" for c in COLUMNS))
    for scenario in SCENARIOS:
        prefix, _ = jobs[(scenario, CALIBRATED)]
        prefix4, measured = jobs[(scenario, PROJECTED)]
        network, system = configs[PROJECTED]["network"], configs[PROJECTED]["system"]
        slower, scale = contention(PROJECTED) / contention(CALIBRATED), scales[(scenario, CALIBRATED)]
        value = simulated_step_ns(prefix4, network, system, compute_scale=scale)
        errors[(f"{scenario}-w{PROJECTED}", f"sim calibrated, w{CALIBRATED} scale")] = value / measured - 1
        print(f"  {scenario}: the {PROJECTED}-rank trace with the {CALIBRATED}-rank run's compute scale {scale:.3f}: "
              f"{value / 1e6:.2f} ms against {measured / 1e6:.2f} ms measured ({value / measured - 1:+.1%})")
        for label, factor in (("projected", 1.0), ("projected, contention", slower)):
            value = simulated_step_ns(prefix, network, system, traced=CALIBRATED, compute_scale=scale * factor)
            errors[(f"{scenario}-w{CALIBRATED}->{PROJECTED}", label)] = value / measured - 1
            print(f"  {scenario}: the {CALIBRATED}-rank trace {label} to {PROJECTED} NPUs (calibrated, scaled"
                  f"{f', compute x{factor:g}' if factor != 1 else ''}): {value / 1e6:.2f} ms against "
                  f"{measured / 1e6:.2f} ms measured ({value / measured - 1:+.1%})")
    return errors


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=3, help="independent record-and-predict rounds (default 3)")
    parser.add_argument("--size", choices=collect.SIZES, default="large", help="model size (default large)")
    parser.add_argument("--timed-steps", type=int, default=20, help="unprofiled steps measured per run (default 20)")
    parser.add_argument("--keep", type=Path, help="keep the recordings and configs here")
    args = parser.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="chakra-prediction-"))
    print(f"{args.trials} trial(s), size {args.size}, {args.timed_steps} timed steps, {CORES} cores", flush=True)
    trials = []
    for number in range(args.trials):
        print(f"trial {number + 1}:", flush=True)
        trials.append(trial(root / f"trial{number + 1}", args.size, args.timed_steps))
    print("\nmedian error over the trials (each against the unprofiled measurement of its own trial):")
    for job in dict.fromkeys(job for job, _ in trials[0]):
        cells = [f"{column} {statistics.median(t[(job, column)] for t in trials):+.1%}"
                 for column in dict.fromkeys(c for j, c in trials[0] if j == job)]
        print(f"  {job:30} " + ", ".join(cells))
    print(f"\nfiles under {root}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
