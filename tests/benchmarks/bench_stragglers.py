"""Benchmark: the critical path across the ranks and the stragglers of a job of 1,024 ranks of
100,000 nodes each (`chakra stragglers`' engine, chakra_core/analysis/stragglers.py).

    .venv/bin/python tests/benchmarks/bench_stragglers.py [--ranks 1024] [--nodes 100000]

Each rank's node table is built (vectorised) like a converted data-parallel step on the host:
STEPS `ProfilerStep#N` per rank, operators nested two deep (a parent and its children, named
like aten ops of five classes), an all-reduce issued every COLLECTIVE_EVERY operators, each
completing TRANSFER_US after its issue, the host waiting for the last at the end of the step, and per rank a little jitter; rank 7's
operators run 30% longer (a straggler to find). The ranks are reduced to their
timelines one at a time, the table dropped before the next is built (a 102 M-node job is never
in memory at once), then the job is replayed, its paths walked and its stragglers priced.

Timed: the engine (rank_timeline over every rank, then analyze); not the building of the
tables. Same-run baseline: one pass over the same tables that only reads each node's recorded
times and sums them (device_work.recorded_times), the least any analysis of the recording
pays. Targets: engine under 60 s and peak RSS under 2 GB. Exit status 0 (a report).
"""

from __future__ import annotations

import argparse
import resource
import time

import numpy as np
import pyarrow as pa

TARGET_S, TARGET_RSS_MB = 60.0, 2048
STEPS, COLLECTIVE_EVERY, CHILDREN, TRANSFER_US = 10, 500, 3, 300
SLOW_RANK, SLOW_FACTOR = 7, 1.3
NAMES = np.array(["aten::linear", "aten::mm", "aten::add", "aten::relu", "aten::copy_", "aten::layer_norm"])


def build(rank: int, nodes: int) -> pa.Table:
    """One rank's table (module docstring); times in µs from 1 s."""
    rng = np.random.default_rng(rank)
    per_step = nodes // STEPS
    parents_per_step = (per_step - 1 - per_step // COLLECTIVE_EVERY) // (CHILDREN + 1)
    names, types, starts, durations, pg = [], [], [], [], []
    clock = 1_000_000
    for step in range(STEPS):
        slow = SLOW_FACTOR if rank == SLOW_RANK else 1.0
        child = (rng.integers(5, 30, (parents_per_step, CHILDREN)) * slow).astype(np.int64)
        gap = rng.integers(1, 4, parents_per_step)
        parent = child.sum(axis=1) + CHILDREN + 1
        parent_start = clock + np.r_[0, np.cumsum(parent + gap)[:-1]]
        child_start = parent_start[:, None] + 1 + np.c_[np.zeros(parents_per_step, np.int64),
                                                         np.cumsum(child + 1, axis=1)[:, :-1]]
        end = int(parent_start[-1] + parent[-1])
        comms = np.arange(0, parents_per_step, COLLECTIVE_EVERY // (CHILDREN + 1))
        issue = parent_start[comms] + parent[comms]
        finish = max(end, int(issue[-1]) + TRANSFER_US) + 20  # the host waits for the last all-reduce, then steps
        # in execution order, as a converted trace holds them: each parent, then its children
        op_starts = np.c_[parent_start, child_start].ravel()
        op_durations = np.c_[parent, child].ravel()
        op_names = np.c_[NAMES[np.arange(parents_per_step) % 2],
                         NAMES[2 + np.arange(child.size).reshape(child.shape) % 4]].ravel()
        names += ["ProfilerStep#%d" % step, *op_names.tolist(), *["c10d::allreduce_"] * len(comms), "Optimizer.step"]
        types += [4] * (1 + len(op_names)) + [7] * len(comms) + [4]
        starts += [clock, *op_starts.tolist(), *issue.tolist(), finish]
        durations += [finish + 50 - clock, *op_durations.tolist(), *[TRANSFER_US] * len(comms), 50]
        pg += [None] * (1 + len(op_names)) + ["0"] * len(comms) + [None]
        clock = finish + 50
    n = len(names)
    return pa.table({"id": pa.array(np.arange(n), pa.uint64()), "name": pa.array(names).dictionary_encode(),
                     "type": pa.array(types, pa.int32()), "start_time_micros": pa.array(starts, pa.uint64()),
                     "duration_micros": pa.array(durations, pa.uint64()),
                     "is_cpu_op": pa.array(np.array(types) == 4), "pg_name": pa.array(pg, pa.string())})


def main() -> None:
    from chakra_core.analysis.device_work import recorded_times
    from chakra_core.analysis.rank_timeline import rank_timeline
    from chakra_core.analysis.stragglers import analyze

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ranks", type=int, default=1024)
    parser.add_argument("--nodes", type=int, default=100_000)
    args = parser.parse_args()
    base_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    timelines, engine_s, baseline_s, nodes = [], 0.0, 0.0, 0
    for rank in range(args.ranks):
        table = build(rank, args.nodes)
        nodes += table.num_rows
        start = time.perf_counter()
        start_ns, end_ns = recorded_times(table)
        int((end_ns - start_ns).sum())
        baseline_s += time.perf_counter() - start
        start = time.perf_counter()
        timelines.append(rank_timeline(table, rank))
        engine_s += time.perf_counter() - start
        del table
    start = time.perf_counter()
    report = analyze(timelines)
    joined = time.perf_counter() - start
    engine_s += joined
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    first = report["stragglers"][0] if report["stragglers"] else {}
    ok = engine_s < TARGET_S and peak < TARGET_RSS_MB
    print(f"{args.ranks:,} ranks x {nodes // args.ranks:,} nodes = {nodes:,} nodes: engine {engine_s:.1f} s "
          f"(timelines {engine_s - joined:.1f} s, replay + paths + stragglers {joined:.1f} s), "
          f"{nodes / engine_s:,.0f} nodes/s; baseline (read every node's times) {baseline_s:.2f} s; "
          f"peak RSS {peak:,.0f} MB (at start {base_rss / 1024:,.0f} MB) "
          f"[{'PASS' if ok else 'FAIL'} < {TARGET_S:.0f} s and < {TARGET_RSS_MB:,} MB]")
    print(f"step {report['step_ns'] / 1e6:.2f} ms over {len(report['steps'])} steps; first straggler: "
          f"rank {first.get('rank')}, {first.get('cause')} ({first.get('family')}), "
          f"{first.get('cost_ns', 0) / 1e6:.2f} ms a step")


if __name__ == "__main__":
    main()
