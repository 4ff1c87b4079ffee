"""Benchmark: statistics of one 1,000,000-node trace, critical path included.

    .venv/bin/python tests/benchmarks/bench_stats.py [--nodes 1000000]

Builds (vectorised) a trace shaped like a converted training step: 4 threads of compute
chains with tensor data deps between them, and a collective after every 50th node, each with
a duration; writes it and reads it back as the node table; then times
chakra_core.analysis.stats.trace_row (node counts, compute by operator class, communication by kind
and group, message-size quantiles, critical path, depth, width) and reports nodes/s and the
peak RSS added while it ran. Target: >= 1,000,000 nodes/s. Exit status 0 (a report).
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time

import numpy as np
import pyarrow as pa

TARGET = 1_000_000


def build(n: int) -> pa.Table:
    rng = np.random.default_rng(0)
    ids = np.arange(1, n + 1, dtype=np.uint64)
    threads = 4
    ctrl_parent = ids - threads  # program order within each of 4 interleaved chains
    has_ctrl = ctrl_parent >= 1
    data_parent = ids - rng.integers(1, 200, n).astype(np.uint64)  # a tensor from a recent node
    has_data = (data_parent >= 1) & (rng.random(n) < 0.7)
    is_comm = (np.arange(n) % 50) == 49
    names = np.array(["aten::mm", "aten::add", "aten::relu", "aten::copy_", "aten::layer_norm"])[np.arange(n) % 5]

    def lists(parents, mask):
        offsets = np.r_[0, np.cumsum(mask)].astype(np.int32)
        return pa.ListArray.from_arrays(pa.array(offsets), pa.array(parents[mask], pa.uint64()))

    return pa.table({
        "id": pa.array(ids), "name": pa.array(np.where(is_comm, "all_reduce", names)),
        "type": pa.array(np.where(is_comm, 7, 4).astype(np.int32)),
        "ctrl_deps": lists(ctrl_parent, has_ctrl), "data_deps": lists(data_parent, has_data),
        "duration_micros": pa.array(rng.integers(1, 500, n).astype(np.uint64)),
        "comm_type": pa.array(np.where(is_comm, 0, 0), mask=~is_comm),
        "comm_size": pa.array(rng.integers(1 << 10, 1 << 24, n), mask=~is_comm),
        "is_cpu_op": pa.array(np.zeros(n, bool)),
    })


def main() -> None:
    from chakra_core.analysis.stats import trace_row
    from chakra_core.format.etfile import read_table, write_table

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=1_000_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = f"{tmp}/big.0.et"
        write_table(build(args.nodes), path)
        table = read_table(path)
    trace_row(table.slice(0, 1000))  # first-call costs (kernel registration) out of the timing
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        row = trace_row(table)
        best = min(best, time.perf_counter() - start)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    rate = args.nodes / best
    print(f"{args.nodes:,} nodes: trace_row in {best:.3f} s = {rate:,.0f} nodes/s "
          f"[{'PASS' if rate >= TARGET else 'FAIL'} >= {TARGET:,}]; critical path {row['critical_path_micros']:,} us "
          f"over {row['critical_path_nodes']:,} nodes, depth {row['depth']:,}, width {row['width']}")
    print(f"peak RSS added while computing: {(peak - base) / 1024:,.0f} MB "
          f"(the table itself: {table.nbytes / 1e6:,.0f} MB)")


if __name__ == "__main__":
    main()
