"""Benchmark: the nightly flow's day on Ray (pipeline.nightly.run.run_day: convert + stats, the sweep's
simulations, representatives, synthesis), with 1 worker CPU and with 2.

    .venv/bin/python tests/benchmarks/bench_pipeline.py [--min-rank-traces 200] [--systems 6]

Builds a day's drop with tools/make_drop.py (recorded gloo jobs, generated jobs, corrupt
files; at least --min-rank-traces rank traces), then runs pipeline.nightly.run.run_day on it twice,
each time in a fresh local Ray instance: num_cpus=1, then num_cpus=2. Prints rank traces per
minute, nodes per second and simulations per minute for each, the seconds of each stage
(stages overlap on Ray: a stage's time is what it waited for), and the speed-up (target
>= 1.7x on this 2-core machine; the machine must be otherwise idle for it to mean anything:
the 1-minute load average before each run is printed). Exit status 0 whatever the figures.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

SPEEDUP_TARGET = 1.7
DATE = "2026-11-20"


def run(num_cpus: int, source: str, warehouse: str, systems) -> tuple[float, object, dict[str, float]]:
    import ray

    from pipeline.cluster import start_ray
    from pipeline.nightly.run import run_day

    stages: dict[str, float] = {}

    def timed(name, step, counts):
        begin = time.perf_counter()
        value = step()
        stages[name] = time.perf_counter() - begin
        return value

    ray.shutdown()
    start_ray(num_cpus=num_cpus)
    ray.get([ray.remote(lambda: None).remote() for _ in range(num_cpus)])  # workers up before the clock starts
    start = time.perf_counter()
    day = run_day(DATE, source, warehouse, systems, stage=timed)
    elapsed = time.perf_counter() - start
    ray.shutdown()
    return elapsed, day, stages


def main() -> None:
    from pipeline.simulation import load_sweep
    from tools.make_drop import generated_jobs_for, make_drop

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--min-rank-traces", type=int, default=200)
    parser.add_argument("--systems", type=int, default=None, help="use the first N systems of the default sweep")
    args = parser.parse_args()
    systems = load_sweep()[: args.systems] if args.systems else load_sweep()
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp, "source").as_uri()
        drop = make_drop(source, DATE, generated_jobs=generated_jobs_for(args.min_rank_traces))
        print(f"drop: {drop}")
        results = {}
        for cpus in (1, 2):
            load = os.getloadavg()[0]
            elapsed, day, stages = run(cpus, source, Path(tmp, f"wh{cpus}").as_uri(), systems)
            sims = day.tables["sim_results"].num_rows
            results[cpus] = elapsed
            print(f"{cpus} Ray CPU(s): {elapsed:.1f} s for {day.ranks} rank traces ({day.nodes:,} nodes) and {sims}"
                  f" simulations: {day.ranks / elapsed * 60:,.0f} traces/min, {day.nodes / elapsed:,.0f} nodes/s,"
                  f" {sims / elapsed * 60:,.0f} simulations/min; {day.tables['rejects'].num_rows} rejects"
                  f" (load average before: {load:.2f})")
            print("    " + ", ".join(f"{name} {seconds:.1f} s" for name, seconds in stages.items()))
        speedup = results[1] / results[2]
        print(f"speed-up with 2 CPUs: {speedup:.2f}x [{'PASS' if speedup >= SPEEDUP_TARGET else 'FAIL'} >= "
              f"{SPEEDUP_TARGET}x]")


if __name__ == "__main__":
    main()
