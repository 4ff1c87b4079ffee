"""Benchmark: how often a shared simulation falls back to the unshared run, over random system files.

    .venv/bin/python tests/benchmarks/bench_sim_sharing.py [--sizes 1024,4096] [--systems 8] [--check-upto 1024]

Each size is issue 29's transformer (`chakra generate transformer --npus N --tp 8 --pp 8
--layers 32 --batch 1024`, built in memory once) on Ring 8 x Switch 8 x Switch N/64, with
--systems random system files and links (tests/random_systems.py: scheduling policy,
collective optimisation, active chunks, dataset splits, implementations per dimension, endpoint
delay, bandwidths and latencies; seed = the file's number), each simulated in both modes.
Prints per run the CPU seconds and what was shared (or why not), then the share of runs that
fell back to the unshared run. Up to --check-upto NPUs every run is also simulated unshared
(share=False) and must give the same result per NPU. Issue 39's target: no run falls back for
a same-tick meeting alone.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: random_systems

from random_systems import random_network, random_system  # noqa: E402


def cpu(function):
    """(its result, CPU seconds it took)."""
    start = time.process_time()
    result = function()
    return result, time.process_time() - start


def one_size(npus: int, systems: int, check: bool) -> tuple[int, int]:
    """Prints each run's line; returns (runs that fell back, runs)."""
    from chakra_core.generate.workloads import generate
    from chakra_core.sim.engine import simulate

    job = generate("transformer", npus, tp=8, pp=8, layers=32, batch=1024).job("transformer")
    fell = runs = 0
    for seed in range(systems):
        rng = random.Random(seed)
        network = random_network(rng, [("Ring", 8), ("Switch", 8), ("Switch", npus // 64)])
        system = random_system(rng, 3)
        for mode in ("unaware", "aware"):
            def run(share: bool = True):
                return simulate(job.tables, network, system, comm_groups=job.comm_groups, mode=mode, share=share)
            try:
                result, seconds = cpu(run)
            except Exception as exc:  # noqa: BLE001 - a system the model cannot run is reported, not fatal
                print(f"| {npus:,} | {seed} | {mode} | - | not simulated: {str(exc)[:80]} |", flush=True)
                continue
            runs += 1
            fell += "unshared" in result.sharing
            said = result.sharing.get("unshared") or f"{result.sharing.get('simulated_npus', npus)} NPUs simulated"
            if check:
                unshared, unshared_seconds = cpu(lambda: run(share=False))
                same = [n.to_dict() for n in unshared.npus] == [n.to_dict() for n in result.npus]
                said += f"; unshared {unshared_seconds:.1f} CPU s, {'identical' if same else 'DIFFERENT'}"
            print(f"| {npus:,} | {seed} | {mode} | {seconds:.1f} | {said} |", flush=True)
    return fell, runs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1024,4096")
    parser.add_argument("--systems", type=int, default=8, help="random system files per size")
    parser.add_argument("--check-upto", type=int, default=1024, help="compare with the unshared run up to N NPUs")
    args = parser.parse_args(argv)
    print("| NPUs | system | mode | CPU s | shared |")
    print("|---|---|---|---|---|")
    fell = runs = 0
    for npus in map(int, args.sizes.split(",")):
        f, r = one_size(npus, args.systems, npus <= args.check_upto)
        fell, runs = fell + f, runs + r
    print(f"fell back: {fell} of {runs} runs ({fell / max(runs, 1):.0%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
