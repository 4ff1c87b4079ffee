"""Benchmark: an ad hoc grid sweep on Ray, with 1 worker CPU and with 2.

    .venv/bin/python tests/benchmarks/bench_sweep.py [--points 1000] [--nodes 100 --cpus-per-node 32]

Generates eight data-parallel jobs of 64 to 1,024 NPUs (chakra_core.generate: four of 64, two of
128, one of 256, one of 1,024) and two grids over Ring, Switch and FullyConnected networks of
each job's own size (`where: total_npus == traced_npus`) with 7 bandwidths: 7 latencies for the
jobs of 64 to 256 NPUs, 2 for the 1,024-NPU one (whose simulations take ten times as long):
7 x 147 + 42 = 1,071 simulations, thinned evenly to --points. Runs pipeline.sweep.run on them
twice, each time in a fresh local Ray instance and warehouse: num_cpus=1, then 2. Prints, for
each, simulations per minute, the share of the CPUs' time spent simulating (below 100%: Ray
left CPUs idle; a 2-CPU rate no better than 1's at about 100% means the cores were shared with
other work) and the mean time of one simulation per NPU count; then the speed-up, and what a
cluster of --nodes x --cpus-per-node CPUs would take for a 100,000-point sweep of the same mix
at the 2-CPU rate per CPU. Exit status 0 whatever the figures (a report).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

JOBS = (("mlp", 64, {}), ("dlrm", 64, {}), ("mlp", 64, {"layers": 3}), ("dlrm", 64, {"tables": 8}),
        ("mlp", 128, {}), ("dlrm", 128, {}), ("mlp", 256, {}), ("mlp", 1024, {}))
GRID = """grid:
  - topology: [Ring, Switch, FullyConnected]
    npus_count: [64, 128, 256]
    bandwidth: [25, 50, 100, 200, 400, 800, 1600]
    latency: [250, 500, 750, 1000, 1500, 2000, 3000]
  - topology: [Ring, Switch, FullyConnected]
    npus_count: [1024]
    bandwidth: [25, 50, 100, 200, 400, 800, 1600]
    latency: [500, 1000]
where: ["total_npus == traced_npus"]
"""
PROJECTED_POINTS = 100_000


def make_jobs(root: Path) -> Path:
    from chakra_core.generate.workloads import generate

    for i, (workload, npus, options) in enumerate(JOBS):
        name = f"{workload}{npus}-{i}"
        generate(workload, npus, **options).write(str(root / name), name)
    return root


def thinned(planned, points: int):
    """Every job keeps an evenly spaced share of its points, `points` in all."""
    from pipeline.sweep.run import Plan

    share = points / planned.simulations
    kept = {job: ps[:: max(1, round(1 / share))][: max(1, round(len(ps) * share))]
            for job, ps in planned.points.items()}
    return Plan(planned.jobs, kept, planned.problems)


def run(num_cpus: int, sweep, planned, warehouse: str):
    import ray

    from pipeline.cluster import start_ray
    from pipeline.sweep.run import run_sweep

    ray.shutdown()
    start_ray(num_cpus=num_cpus)
    ray.get([ray.remote(lambda: None).remote() for _ in range(num_cpus)])  # workers up before the clock starts
    start = time.perf_counter()
    result = run_sweep(sweep, planned, warehouse, "bench")
    elapsed = time.perf_counter() - start
    ray.shutdown()
    return elapsed, result


def seconds(folder: str) -> tuple[float, dict[int, float]]:
    """The simulations' summed seconds, and the mean of one by simulated NPU count."""
    import duckdb

    rows = duckdb.sql(f"SELECT npus, sum(seconds), avg(seconds) FROM read_parquet('{folder}/*.parquet') "
                      "GROUP BY npus").fetchall()
    return sum(r[1] for r in rows), {n: mean for n, _, mean in sorted(rows)}


def main() -> None:
    from pipeline.sweep.file import load_sweep_file
    from pipeline.sweep.jobs import Sources
    from pipeline.sweep.run import plan

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--points", type=int, default=1000, help="simulations per run (default 1000)")
    parser.add_argument("--nodes", type=int, default=100, help="cluster nodes for the projection")
    parser.add_argument("--cpus-per-node", type=int, default=32, help="CPUs per node for the projection")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        jobs = make_jobs(Path(tmp, "jobs"))
        Path(tmp, "grid.yaml").write_text(GRID)
        sweep = load_sweep_file(str(Path(tmp, "grid.yaml")))
        planned = thinned(plan(sweep, Sources(folders=(str(jobs),)), 10_000), args.points)
        print(f"{planned.simulations} simulations: {len(planned.jobs)} jobs of 64 to 1,024 NPUs x their points")
        rate = {}
        for cpus in (1, 2):
            elapsed, result = run(cpus, sweep, planned, Path(tmp, f"wh{cpus}").as_uri())
            rate[cpus] = result.rows / elapsed * 60
            busy, means = seconds(result.folder)
            # busy: the share of the CPUs' time spent simulating; below 1, Ray's tasks left CPUs idle
            print(f"{cpus} Ray CPU(s): {result.rows} simulations ({result.status}) in {elapsed:.1f} s: "
                  f"{rate[cpus]:,.0f} simulations/min; CPUs busy simulating {busy / (elapsed * cpus):.0%}; mean s "
                  "per simulation by NPUs: " + ", ".join(f"{n}: {s:.3f}" for n, s in means.items()))
        print(f"speed-up with 2 CPUs: {rate[2] / rate[1]:.2f}x")
        cpus = args.nodes * args.cpus_per_node
        per_cpu = rate[2] / 2  # per CPU, at the efficiency measured with 2
        minutes = PROJECTED_POINTS / (per_cpu * cpus)
        print(f"projection: {PROJECTED_POINTS:,} points of this mix on {args.nodes} nodes x {args.cpus_per_node} "
              f"CPUs = {cpus:,} CPUs at {per_cpu:,.0f} simulations/min each: {minutes:.1f} min")


if __name__ == "__main__":
    main()
