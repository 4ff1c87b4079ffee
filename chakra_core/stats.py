"""Per-trace and per-communication-node statistics of a node table, as rows ready for Parquet.

`trace_row(table)` summarises one rank trace (node counts by type, compute time and
operations, communication counts and bytes); `collective_rows(table)` gives one row per
communication node. Both work column-wise on the Arrow table.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from chakra_core.columns import COMM_TYPES, NODE_TYPE_VALUES
from chakra_core.normalize import normalize_table

COMP = NODE_TYPE_VALUES["COMP_NODE"]
COLL = NODE_TYPE_VALUES["COMM_COLL_NODE"]
SEND = NODE_TYPE_VALUES["COMM_SEND_NODE"]
RECV = NODE_TYPE_VALUES["COMM_RECV_NODE"]

COLLECTIVE_FIELDS = (
    ("node_id", pa.uint64()), ("name", pa.string()), ("kind", pa.string()), ("comm_size", pa.int64()),
    ("pg_name", pa.string()), ("comm_src", pa.int64()), ("comm_dst", pa.int64()), ("comm_tag", pa.int64()),
    ("duration_micros", pa.uint64()),
)


def _sum(values: pa.ChunkedArray) -> int:
    total = pc.sum(values).as_py()
    return int(total or 0)


def trace_row(table: pa.Table) -> dict:
    """One row describing a rank trace."""
    table = normalize_table(table)
    types = table.column("type")
    is_comp = pc.equal(types, COMP)
    is_coll = pc.equal(types, COLL)
    is_p2p = pc.or_(pc.equal(types, SEND), pc.equal(types, RECV))
    on_npu = pc.and_(is_comp, pc.invert(pc.fill_null(table.column("is_cpu_op"), False)))
    return {
        "nodes": table.num_rows,
        "comp_nodes": _sum(pc.cast(is_comp, pa.int64())),
        "collective_nodes": _sum(pc.cast(is_coll, pa.int64())),
        "p2p_nodes": _sum(pc.cast(is_p2p, pa.int64())),
        "dependencies": _sum(pc.list_value_length(table.column("ctrl_deps"))) +
                        _sum(pc.list_value_length(table.column("data_deps"))),
        "compute_micros": _sum(pc.filter(table.column("duration_micros"), is_comp)),
        "npu_compute_micros": _sum(pc.filter(table.column("duration_micros"), on_npu)),
        "num_ops": _sum(pc.filter(table.column("num_ops"), is_comp)),
        "collective_bytes": _sum(pc.filter(table.column("comm_size"), is_coll)),
        "p2p_bytes": _sum(pc.filter(table.column("comm_size"), pc.equal(types, SEND))),
    }


def collective_rows(table: pa.Table) -> pa.Table:
    """One row per communication node (collectives, sends, receives)."""
    table = normalize_table(table)
    types = table.column("type")
    mask = pc.or_(pc.equal(types, COLL), pc.or_(pc.equal(types, SEND), pc.equal(types, RECV)))
    comm = table.filter(mask)
    kinds = [COMM_TYPES.get(c, f"UNKNOWN_{c}").lower() if t == COLL else ("send" if t == SEND else "recv")
             for t, c in zip(comm.column("type").to_pylist(), comm.column("comm_type").to_pylist())]
    return pa.table({
        "node_id": comm.column("id"),
        "name": comm.column("name"),
        "kind": pa.array(kinds, pa.string()),
        "comm_size": comm.column("comm_size"),
        "pg_name": comm.column("pg_name"),
        "comm_src": comm.column("comm_src"),
        "comm_dst": comm.column("comm_dst"),
        "comm_tag": comm.column("comm_tag"),
        "duration_micros": comm.column("duration_micros"),
    }, schema=pa.schema(COLLECTIVE_FIELDS))
