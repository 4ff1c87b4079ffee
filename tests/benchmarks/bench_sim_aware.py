"""Benchmark: congestion-aware simulation of jobs whose ranks drift apart, against unaware.

    .venv/bin/python tests/benchmarks/bench_sim_aware.py [--sizes 8x4000,64x400] [--live]

Each rank runs a chain alternating compute of 10-15 us (its own sequence, so the ranks drift
apart and issue every collective at different ticks) and a 1 MiB all-reduce, built with the
project's generator (JobBuilder), on a Ring of the rank count, 50 GB/s, 500 ns per hop,
with the reference folder's system file (Ring_4chunks.json). Every size runs unaware first
(the same-run baseline), then aware, and prints nodes per wall second of each and their
ratio (the fastest of --repeat runs each: the machine may be shared). --live also times the
aware run with every collective replayed live (reuse_alone=False, the replay the shortcuts
must equal) and checks that both give the same result.

Before holding tables (docs/simulator.md, 'The aware mode'), every aware collective here was
replayed live: on a shared 2-core machine 8 x 4,000 took 4.7-11.8 s aware (4.8 CPU s,
2,700-6,900 nodes/s) and 64 x 400 took 77 s (35 CPU s). With them: 0.13-0.23 s (0.14 CPU s,
140,000-240,000 nodes/s, 1.2-1.4x the unaware run) and 0.4-0.8 s. Target: >= 100,000 aware
nodes/s on 8 x 4,000.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

CONFIGS = Path(__file__).resolve().parents[2] / "datasets" / "astra-sim-reference" / "configs"
MiB = 1 << 20
SPEED_TARGET = 100_000


def drifting_job(npus: int, nodes: int) -> list:
    """Per rank: compute of 10-15 us (drawn from the rank's own seeded sequence), then a 1 MiB
    all-reduce, repeated."""
    from chakra_core.generate.builder import JobBuilder

    job = JobBuilder(npus)
    for rank in range(npus):
        graph, previous, draw = job.rank(rank), None, random.Random(rank)
        for step in range(nodes // 2):
            compute = graph.compute(f"compute {step}", [previous], duration_us=draw.randint(10, 15))
            previous = graph.collective(f"all-reduce {step}", "ALL_REDUCE", MiB, [compute])
    return job.tables()


def timed(tables, npus: int, repeat: int = 1, **options) -> tuple[object, float]:
    """The result and the fastest wall time of `repeat` runs (the machine may be shared)."""
    from chakra_core.sim.config import NetworkConfig, NetworkDim, load_system
    from chakra_core.sim.engine import simulate

    network = NetworkConfig(dims=(NetworkDim(topology="Ring", npus=npus, bandwidth_gbps=50, latency_ns=500),))
    system = load_system(CONFIGS / "Ring_4chunks.json")
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        result = simulate(tables, network, system, **options)
        best = min(best, time.perf_counter() - start)
    return result, best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="8x4000,64x400", help="NPUSxNODES,... (default 8x4000,64x400)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per measurement, the fastest counts (default 3)")
    parser.add_argument("--live", action="store_true", help="also time every collective replayed live (once)")
    args = parser.parse_args(argv)
    ok = True
    for size in args.sizes.split(","):
        npus, nodes = map(int, size.split("x"))
        tables = drifting_job(npus, nodes)
        total = npus * nodes
        unaware, unaware_s = timed(tables, npus, args.repeat)
        aware, aware_s = timed(tables, npus, args.repeat, mode="aware")
        line = (f"{npus} ranks x {nodes:,} nodes: unaware {unaware_s:.2f} s ({total / unaware_s:,.0f} nodes/s), "
                f"aware {aware_s:.2f} s ({total / aware_s:,.0f} nodes/s), aware/unaware time {aware_s / unaware_s:.2f}; "
                f"finish unaware {unaware.finish_ns:,} ns, aware {aware.finish_ns:,} ns")
        if npus == 8:
            fast = total / aware_s >= SPEED_TARGET
            ok = ok and fast
            line += f"\n  target >= {SPEED_TARGET:,} aware nodes/s: {'PASS' if fast else 'FAIL'}"
        if args.live:
            live, live_s = timed(tables, npus, mode="aware", reuse_alone=False)
            same = [n.to_dict() for n in live.npus] == [n.to_dict() for n in aware.npus]
            ok = ok and same
            line += (f"\n  live replay of every collective: {live_s:.2f} s ({total / live_s:,.0f} nodes/s), "
                     f"{live_s / aware_s:.0f}x the aware run's time; results {'EQUAL' if same else 'DIFFER'}")
        print(line, flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
