"""Benchmark: 64 jobs of 256 NPUs together on a 16,384-NPU three-level network, congestion-aware.

    .venv/bin/python tests/benchmarks/bench_colocation.py [--placements packed,spread] [--jobs 64]

The job is issue 29's transformer at 256 NPUs (`chakra generate transformer --npus 256 --tp 8
--pp 8 --layers 32 --batch 1024`: tp 8 x pp 8 x dp 4, 145 nodes per rank), built in memory once;
the network Ring 8 x Switch 32 x Switch 64 (200, 50, 50 GB/s, 500 ns) with Ring_4chunks.json.
Per placement, sim/colocation.colocate runs the jobs together and alone (one alone run per
class of placements alike up to a translation): CPU and wall seconds, what the shared run
simulated, the slowdowns and the ns the jobs waited behind each other. The baseline in the
same run: one copy of the job alone on the same network (the cost of one job). Issue 51's
target: 64 jobs, aware, under 60 s.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: test_sim

from test_sim import BASE, network  # noqa: E402

NETWORK = network(("Ring", 8, 200, 500), ("Switch", 32, 50, 500), ("Switch", 64, 50, 500))


def timed(function):
    """(its result, CPU seconds, wall seconds)."""
    cpu, wall = time.process_time(), time.perf_counter()
    result = function()
    return result, time.process_time() - cpu, time.perf_counter() - wall


def main() -> int:
    from chakra_core.generate.workloads import generate
    from chakra_core.sim.colocation import PlacedJob, colocate
    from chakra_core.sim.placement import place

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--placements", default="packed,spread", help="comma-separated placements")
    parser.add_argument("--jobs", type=int, default=64, help="copies of the 256-NPU job (at most 64)")
    args = parser.parse_args()
    job = generate("transformer", 256, tp=8, pp=8, layers=32, batch=1024).job("transformer")
    print(f"network: {NETWORK.npus:,} NPUs (Ring 8 x Switch 32 x Switch 64); job: 256 ranks x "
          f"{job.tables[0].num_rows} nodes; {args.jobs} copies")
    alone, cpu, wall = timed(lambda: colocate([PlacedJob("transformer", job, list(range(256)))], NETWORK, BASE,
                                              mode="aware"))
    print(f"| baseline: 1 job alone | {cpu:.1f} CPU s, {wall:.1f} s | finish {alone.jobs[0].finish_ns:,} ns |")
    print("| placement | CPU s | wall s | shared run | alone runs | slowdown min-max | waited behind others (ns) |")
    print("|---|---|---|---|---|---|---|")
    for spec in args.placements.split(","):
        npus = place(spec, [256] * args.jobs, NETWORK.npus)
        placed = [PlacedJob("transformer", job, where) for where in npus]
        outcome, cpu, wall = timed(lambda: colocate(placed, NETWORK, BASE, mode="aware"))
        shared = outcome.together.sharing
        said = (f"{shared['simulated_npus']:,} NPUs simulated" if shared and "unshared" not in shared
                else shared.get("unshared", "unshared"))
        slowdowns = [j.slowdown for j in outcome.jobs]
        others = sum(b["waited_ns"] for i, j in enumerate(outcome.jobs) for b in j.behind if b["job"] != i)
        print(f"| {spec} | {cpu:.1f} | {wall:.1f} | {said} | {outcome.alone_runs} | "
              f"{min(slowdowns):.3f}-{max(slowdowns):.3f} | {others:,} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
