"""Statistics of node tables, as rows ready for Parquet and as readable reports.

- `trace_row(table)`: one rank trace: node counts by type, compute time and operations (by
  operator class too), communication counts and bytes (by collective type and process group),
  message-size quantiles, the critical path (its length in time, its nodes, the share of
  compute and communication on it) and the graph's depth and width (available parallelism).
- `collective_rows(table)`: one row per communication node.
- `job_stats(rows_by_rank, collectives_by_rank)`: across the ranks of a job: the imbalance of
  communication bytes and counts (max / mean, max / min) and compute by rank. Who holds the job
  back, why and at what cost is analysis/stragglers.py's question.

The critical path is the heaviest dependency path (ctrl and data deps) by duration_micros;
communication nodes count with their recorded duration (0 when the trace did not measure it);
a trace without any duration gets the longest path by node count (and a length of 0 µs).
Imperfect real traces still get every statistic: dependencies on ids the trace does not hold
are left out and counted (`missing_parents`), and where the graph has cycles the edges that
close them are set aside for the path and counted (`cycle_edges_set_aside`).
Column-wise with pyarrow/numpy; the topological pass is C (_native/graphpath.c).
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from chakra_core._native import _graphpath
from chakra_core.analysis.kernels import FAMILY_NAMES, family
from chakra_core.format.depgraph import (
    csr,
    cycle_candidates,
    flat_list,
    lookup,
    to_numpy,
)
from chakra_core.format.durations import MAX_NS, durations_ns
from chakra_core.format.columns import COMM_TYPES, device_compute
from chakra_core.format.nodetypes import COLL, COMM_NODE_TYPES, COMP, NODE_TYPES, SEND
from chakra_core.format.nodenames import as_strings, on_names
from chakra_core.format.normalize import normalize_table
from chakra_core.table_schema import TableSchema, column


# Operator classes by name keyword, first match wins (host operators and device kernels alike).
OP_CLASSES = (
    ("gemm", ("gemm", "matmul", "addmm", "bmm", "::mm", "linear")),
    ("convolution", ("conv",)),
    ("attention", ("attention", "softmax", "sdpa", "flash")),
    ("normalization", ("norm",)),
    ("embedding", ("embedding",)),
    ("memory", ("copy", "memcpy", "memset", "::to", "::cat", "::empty", "::zero", "::fill", "contiguous")),
    ("optimizer", ("optimizer", "adam", "sgd")),
    ("elementwise", ("elementwise", "::add", "::mul", "::relu", "::gelu", "::sigmoid", "::tanh", "::div", "::sub")),
)

OP_CLASS_NAMES = tuple(name for name, _ in OP_CLASSES) + ("other",)  # every class op_class returns

# trace_row's figures, in its order: the `traces` table's columns after the job's (pipeline/nightly/jobs.py)
TRACE_ROW = TableSchema("trace_row", (
    *(column(name, pa.int64()) for name in (
        "nodes", "comp_nodes", "collective_nodes", "p2p_nodes", "dependencies", "compute_micros",
        "npu_compute_micros", "num_ops", "collective_bytes", "p2p_bytes", "message_p50", "message_p90",
        "message_p99", "message_max", "critical_path_micros", "critical_path_nodes")),
    column("critical_path_compute_share", pa.float64()), column("critical_path_comm_share", pa.float64()),
    *(column(name, pa.int64()) for name in ("depth", "width", "missing_parents", "cycle_edges_set_aside")),
    *(column(name, pa.string()) for name in ("node_types", "compute_by_class", "comm_by_kind", "comm_by_group")),
    # the same compute times to the ns (format/durations.py), where the figures are read from
    column("compute_ns", pa.int64(), nullable=True), column("npu_compute_ns", pa.int64(), nullable=True),
    column("compute_ns_by_class", pa.string(), nullable=True),
))
# collective_rows' columns (the attributes a communication node may lack are nullable)
COLLECTIVE_ROWS = TableSchema("collective_rows", (
    column("node_id", pa.uint64()), column("name", pa.string()), column("kind", pa.string(), nullable=True),
    column("comm_size", pa.int64(), nullable=True), column("pg_name", pa.string(), nullable=True),
    column("comm_src", pa.int64(), nullable=True), column("comm_dst", pa.int64(), nullable=True),
    column("comm_tag", pa.int64(), nullable=True), column("duration_micros", pa.uint64()),
))


# the node-table columns trace_row and collective_rows read (all a reader of a big trace keeps for them)
TRACE_COLUMNS = ("id", "name", "type", "ctrl_deps", "data_deps", "duration_micros", "duration_ns", "is_cpu_op",
                 "num_ops", "comm_type", "comm_size", "pg_name", "stream")
COLLECTIVE_COLUMNS = ("id", "name", "type", "comm_type", "comm_size", "pg_name", "comm_src", "comm_dst", "comm_tag",
                      "duration_micros")


# Kernel families (analysis/kernels.py) that are an operator class, taken before the keywords:
# one vocabulary, so that a kernel the families call gemm (cuBLAS's nvjet, CUTLASS, xmma) is a
# gemm here too, and one slowed family is one cause. The other families (elementwise, reduction,
# ...) name host operators more loosely than the keywords do, which decide for them.
CLASS_OF_FAMILY = {"gemm": "gemm", "convolution": "convolution", "attention": "attention",
                   "normalisation": "normalization", "optimizer": "optimizer", "memcpy_htod": "memory",
                   "memcpy_dtoh": "memory", "memcpy_dtod": "memory", "memset": "memory", "copy": "memory"}


# A device kernel's class is its family's, always: every family has one (a family that is no
# operator class, such as reduction or triton, is `other`), so a kernel's class and family agree.
KERNEL_CLASS = {name: CLASS_OF_FAMILY.get(name, name if name in OP_CLASS_NAMES else "other") for name in FAMILY_NAMES}


def kernel_class(name: str) -> str:
    """The operator class of a device kernel: its family's (KERNEL_CLASS)."""
    return KERNEL_CLASS[family(name)]


def op_class(name: str) -> str:
    """The operator class of a host operator (or of a node whose place is not known): the kernel
    families that are a class, then the keywords."""
    by_family = CLASS_OF_FAMILY.get(family(name))
    if by_family is not None:
        return by_family
    lowered = name.lower()
    return next((cls for cls, keys in OP_CLASSES if any(k in lowered for k in keys)), "other")


def _sum(values) -> int:
    return int(pc.sum(values).as_py() or 0)


def _sum_ns(values) -> int:
    """A sum of ns durations, at most MAX_NS: a corrupt trace's centuries saturate, never wrap."""
    return MAX_NS if _float_sum(values) >= MAX_NS else _sum(values)


def _float_sum(values) -> float:
    return pc.sum(pc.cast(values, pa.float64(), safe=False)).as_py() or 0.0  # (unsafe: past 2**53, approximate)


def _grouped_sums(keys: pa.Array, values: pa.Array) -> dict:
    """{key: [count, sum]} (nulls in keys grouped as ""); sums that an int64 would wrap are
    summed as floats (a corrupt trace's)."""
    if len(keys) == 0:
        return {}
    if pa.types.is_integer(values.type) and _float_sum(values) >= MAX_NS:
        values = pc.cast(values, pa.float64(), safe=False)
    t = pa.table({"k": pc.fill_null(keys.cast(pa.string()), ""), "v": pc.fill_null(values, 0)})
    g = t.group_by("k", use_threads=False).aggregate([([], "count_all"), ("v", "sum")])
    return {k: [c, int(s or 0)] for k, c, s in zip(g.column("k").to_pylist(), g.column("count_all").to_pylist(),
                                                       g.column("v_sum").to_pylist())}


def _classes_by(names: pa.ChunkedArray, of) -> pa.ChunkedArray:
    """Each row's class by `of(name)`, each distinct name classified once (the rows take its
    position: no copy of the names)."""
    def classify(distinct: pa.Array) -> pa.Array:
        return pa.array([of(n or "") for n in distinct.to_pylist()], pa.string())

    if pa.types.is_dictionary(names.type):  # read for a big trace: the names are positions already
        return on_names(names, classify)
    distinct = pc.unique(names)
    return classify(distinct).take(pc.index_in(names, value_set=distinct))


def compute_classes(table: pa.Table) -> pa.Array:
    """The operator class of each compute node (the COMP rows, in order): a device kernel's (off
    the CPU, on a stream: a recorded GPU kernel) by its family (kernel_class), any other's by
    op_class (a generated trace's nodes carry operator names, not kernel names)."""
    comp = pc.equal(table.column("type"), COMP)
    names = pc.filter(table.column("name"), comp)
    kernels = pc.filter(pc.and_(device_compute(table), pc.is_valid(table.column("stream"))), comp)
    return pc.if_else(kernels, _classes_by(names, kernel_class), _classes_by(names, op_class)).combine_chunks()


def _comm_kinds(comm: pa.Table) -> pa.Array:
    """'all_reduce', ..., 'send', 'recv' for each communication node ('unset' without a comm_type)."""
    def kind(node_type: int, comm_type: int | None) -> str:
        if node_type != COLL:
            return "send" if node_type == SEND else "recv"
        return "unset" if comm_type is None else COMM_TYPES.get(comm_type, f"UNKNOWN_{comm_type}").lower()

    return pa.array([kind(t, c) for t, c in zip(comm.column("type").to_pylist(), comm.column("comm_type").to_pylist())],
                    pa.string())


def critical_path(table: pa.Table) -> dict:
    """Heaviest dependency path by duration: its length, node ids, compute / communication share,
    and the graph's depth (longest path in nodes) and width (most nodes on one depth level)."""
    n = table.num_rows
    if n == 0:
        return {"micros": 0, "nodes": [], "compute_share": 0.0, "comm_share": 0.0, "depth": 0, "width": 0,
                "missing_parents": 0, "cycle_edges_set_aside": 0, "cycle_edge_examples": []}
    ids = to_numpy(table.column("id")).astype(np.uint64)
    src, dst, missing = _edges(table, ids)
    weight = to_numpy(table.column("duration_micros"), 0).astype(np.int64)
    timed = bool(weight.any())
    # without durations the longest path by node count is the informative one
    weights = weight if timed else np.ones(n, np.int64)
    found = _graphpath.critical_path(*(a.astype(np.int64) for a in csr(n, src, dst)), weights)
    cut = np.zeros(0, np.int64)
    if found is None:  # a damaged trace: set the edges that close cycles aside, and say so
        cut = _cycle_closing_edges(n, src, dst)
        keep = np.ones(len(src), bool)
        keep[cut] = False
        found = _graphpath.critical_path(*(a.astype(np.int64) for a in csr(n, src[keep], dst[keep])), weights)
    path_bytes, length, depth_bytes = found
    length = length if timed else 0
    path = np.frombuffer(path_bytes, np.int64)
    depth = np.frombuffer(depth_bytes, np.int64)
    types = to_numpy(table.column("type"))[path]
    on_path = weight[path]
    comm = int(on_path[np.isin(types, COMM_NODE_TYPES)].sum())
    compute = int(on_path[types == COMP].sum())
    return {"micros": int(length), "nodes": ids[path].tolist(),
            "compute_share": compute / length if length else 0.0, "comm_share": comm / length if length else 0.0,
            "depth": int(depth.max()) + 1, "width": int(np.bincount(depth).max()),
            "missing_parents": missing, "cycle_edges_set_aside": len(cut),
            "cycle_edge_examples": [f"{ids[src[e]]} -> {ids[dst[e]]}" for e in cut[:3]]}


def _edges(table: pa.Table, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """(parent rows, child rows, dependencies on ids the trace does not hold) over ctrl and data deps."""
    n = table.num_rows
    order = np.argsort(ids, kind="stable")
    sorted_ids = ids[order]
    src, dst, missing = [], [], 0
    for column in ("ctrl_deps", "data_deps"):
        parents, child = flat_list(table.column(column), n)
        at = lookup(sorted_ids, parents)
        ok = at >= 0
        missing += int((~ok).sum())
        src.append(order[at[ok]])
        dst.append(child[ok])
    return np.concatenate(src), np.concatenate(dst), missing


def _cycle_closing_edges(n: int, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Indices of the edges that close cycles: among the vertices on or between cycles, those
    that point backward in file order (self-dependencies included). Every cycle lies within
    those vertices and must come back to its earliest row, so without them none is left."""
    self_loops = src == dst
    on_cycles = cycle_candidates(n, src[~self_loops], dst[~self_loops], [None])
    return np.flatnonzero(self_loops | (on_cycles[src] & on_cycles[dst] & (src > dst)))


def trace_row(table: pa.Table) -> dict:
    """One row describing a rank trace (maps as JSON text, so the row stays flat for Parquet)."""
    table = normalize_table(table, TRACE_COLUMNS)
    types = table.column("type")
    is_comp = pc.equal(types, COMP)
    is_coll = pc.equal(types, COLL)
    is_comm = pc.is_in(types, value_set=pa.array(COMM_NODE_TYPES, pa.int32()))
    on_npu = device_compute(table)
    durations = durations_ns(table)
    comp = table.select(["duration_micros", "num_ops"]).filter(is_comp)  # (a copy: only what is summed)
    comp_ns = pc.filter(durations, is_comp)
    classes = compute_classes(table)
    comm = table.filter(is_comm)
    sizes = to_numpy(comm.column("comm_size"), 0)
    kinds = _comm_kinds(comm)
    path = critical_path(table)
    quantiles = np.quantile(sizes, [0.5, 0.9, 0.99]).astype(np.int64).tolist() if len(sizes) else [0, 0, 0]
    type_values, type_counts = np.unique(to_numpy(types), return_counts=True)
    node_types = {NODE_TYPES.get(int(t), str(t)): int(c) for t, c in zip(type_values, type_counts)}
    return {
        "nodes": table.num_rows,
        "comp_nodes": comp.num_rows,
        "collective_nodes": _sum(pc.cast(is_coll, pa.int64())),
        "p2p_nodes": comm.num_rows - _sum(pc.cast(is_coll, pa.int64())),
        "dependencies": _sum(pc.list_value_length(table.column("ctrl_deps"))) +
                        _sum(pc.list_value_length(table.column("data_deps"))),
        "compute_micros": _sum(comp.column("duration_micros")),
        "npu_compute_micros": _sum(pc.filter(table.column("duration_micros"), on_npu)),
        "num_ops": _sum(comp.column("num_ops")),
        "collective_bytes": _sum(pc.filter(table.column("comm_size"), is_coll)),
        "p2p_bytes": _sum(pc.filter(table.column("comm_size"), pc.equal(types, SEND))),
        "message_p50": quantiles[0], "message_p90": quantiles[1], "message_p99": quantiles[2],
        "message_max": int(sizes.max()) if len(sizes) else 0,
        "critical_path_micros": path["micros"], "critical_path_nodes": len(path["nodes"]),
        "critical_path_compute_share": path["compute_share"], "critical_path_comm_share": path["comm_share"],
        "depth": path["depth"], "width": path["width"],
        "missing_parents": path["missing_parents"], "cycle_edges_set_aside": path["cycle_edges_set_aside"],
        "node_types": json.dumps(node_types, sort_keys=True),
        "compute_by_class": json.dumps(_grouped_sums(classes, comp.column("duration_micros").combine_chunks()),
                                       sort_keys=True),
        "comm_by_kind": json.dumps(_grouped_sums(kinds, comm.column("comm_size").combine_chunks()), sort_keys=True),
        "comm_by_group": json.dumps(_grouped_sums(comm.column("pg_name").combine_chunks(),
                                                  comm.column("comm_size").combine_chunks()), sort_keys=True),
        "compute_ns": _sum_ns(comp_ns),
        "npu_compute_ns": _sum_ns(pc.filter(durations, on_npu)),
        "compute_ns_by_class": json.dumps(_grouped_sums(classes, comp_ns), sort_keys=True),
    }


def collective_rows(table: pa.Table) -> pa.Table:
    """One row per communication node (collectives, sends, receives)."""
    table = normalize_table(table, COLLECTIVE_COLUMNS)
    comm = table.filter(pc.is_in(table.column("type"), value_set=pa.array(COMM_NODE_TYPES, pa.int32())))
    kinds = _comm_kinds(comm)
    return pa.table({
        "node_id": comm.column("id"),
        "name": as_strings(comm.column("name")),
        "kind": kinds,
        "comm_size": comm.column("comm_size"),
        "pg_name": comm.column("pg_name"),
        "comm_src": comm.column("comm_src"),
        "comm_dst": comm.column("comm_dst"),
        "comm_tag": comm.column("comm_tag"),
        "duration_micros": comm.column("duration_micros"),
    }, schema=COLLECTIVE_ROWS.schema)


def _ratios(values: dict[int, int]) -> dict:
    v = np.array(list(values.values()), np.float64)
    mean = v.mean() if len(v) else 0.0
    return {"max_over_mean": float(v.max() / mean) if mean else 0.0,
            "max_over_min": float(v.max() / v.min()) if len(v) and v.min() else (float("inf") if len(v) and v.max() else 0.0),
            "max_rank": int(max(values, key=values.get)) if values else None}


def _median(values: dict[int, int]) -> float:
    return float(np.median(list(values.values()))) if values else 0.0


def job_stats(rows_by_rank: dict[int, dict], collectives_by_rank: dict[int, pa.Table]) -> dict:
    """Across a job's ranks: imbalance of communication bytes and counts (overall and per
    collective kind), and compute time by rank."""
    ranks = sorted(rows_by_rank)
    comm_bytes = {r: _sum(collectives_by_rank[r].column("comm_size")) for r in ranks}
    comm_counts = {r: collectives_by_rank[r].num_rows for r in ranks}
    by_kind: dict[str, dict[int, int]] = {}
    for r in ranks:
        for kind, (count, total) in _grouped_sums(collectives_by_rank[r].column("kind").combine_chunks(),
                                                  collectives_by_rank[r].column("comm_size").combine_chunks()).items():
            by_kind.setdefault(kind, {q: 0 for q in ranks})[r] = total
    compute = {r: rows_by_rank[r]["compute_micros"] for r in ranks}
    return {
        "ranks": len(ranks),
        "bytes_imbalance": _ratios(comm_bytes), "count_imbalance": _ratios(comm_counts),
        "bytes_imbalance_by_kind": {k: _ratios(v) for k, v in sorted(by_kind.items())},
        "compute_median_micros": _median(compute),
        "bytes_by_rank": comm_bytes, "compute_by_rank": compute,
    }
