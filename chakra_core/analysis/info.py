"""A one-file summary of a Chakra ET: node counts by type, communication by type and bytes, metadata.

Computed batch by batch while streaming, so memory stays bounded on large traces.
"""

from __future__ import annotations

import base64
from collections import Counter
from collections.abc import Iterable

import pyarrow as pa
import pyarrow.compute as pc

from chakra_core.format.columns import COMM_TYPES
from chakra_core.format.nodetypes import COLL, NODE_TYPES, RECV, SEND
from chakra_core.format.etfile import ETReader, table_metadata
from chakra_core.format.schema import et_def_pb2 as pb



def attribute_value(attr: pb.AttributeProto):
    """The Python value of an attribute (lists as lists, bytes as base64 text, None if unset)."""
    kind = attr.WhichOneof("value")
    if kind is None:
        return None
    value = getattr(attr, kind)
    if kind.endswith("_list"):
        value = list(value.values)
        return [base64.b64encode(v).decode() for v in value] if kind == "bytes_list" else value
    return base64.b64encode(value).decode() if kind == "bytes_val" else value


def node_type_name(number: int) -> str:
    return NODE_TYPES.get(number, f"UNKNOWN_{number}")


def comm_type_name(number: int | None) -> str:
    if number is None:
        return "UNSET"
    return COMM_TYPES.get(number, f"UNKNOWN_{number}")


def _count_by(batch: pa.RecordBatch, key: str, mask: pa.Array, size_column: str) -> dict:
    """{key value: (count, sum of size_column)} over the rows where mask is true."""
    rows = batch.filter(mask).select([key, size_column])
    if rows.num_rows == 0:
        return {}
    grouped = pa.Table.from_batches([rows]).group_by(key, use_threads=False).aggregate(
        [([], "count_all"), (size_column, "sum")]
    )
    return {
        k: (count, total or 0)
        for k, count, total in zip(
            grouped.column(key).to_pylist(),
            grouped.column("count_all").to_pylist(),
            grouped.column(f"{size_column}_sum").to_pylist(),
        )
    }


def _accumulate(totals: dict, counts: dict) -> None:
    for key, (count, size) in counts.items():
        acc = totals.setdefault(key, [0, 0])
        acc[0] += count
        acc[1] += size


def summarize(url: str) -> dict:
    """The summary of one .et file as a JSON-ready dict, streaming its nodes."""
    with ETReader(url) as reader:
        return summarize_batches(url, reader.metadata, reader.iter_batches())


def summarize_table(table: pa.Table, path: str) -> dict:
    """The same summary for a node table already in memory."""
    return summarize_batches(path, table_metadata(table), table.to_batches())


def summarize_batches(path: str, metadata: pb.GlobalMetadata, batches: Iterable[pa.RecordBatch]) -> dict:
    node_types: Counter = Counter()
    collectives: dict[int | None, list[int]] = {}
    point_to_point: dict[int, list[int]] = {}
    nodes = edges = total_duration = 0
    for batch in batches:
        nodes += batch.num_rows
        types = batch.column("type")
        node_types.update(dict(zip(*[c.to_pylist() for c in pc.value_counts(types).flatten()])))
        edges += len(pc.list_flatten(batch.column("ctrl_deps"))) + len(pc.list_flatten(batch.column("data_deps")))
        total_duration += pc.sum(batch.column("duration_micros")).as_py() or 0
        _accumulate(collectives, _count_by(batch, "comm_type", pc.equal(types, COLL), "comm_size"))
        p2p_mask = pc.is_in(types, pa.array([SEND, RECV], pa.int32()))
        _accumulate(point_to_point, _count_by(batch, "type", p2p_mask, "comm_size"))
    return {
        "path": path,
        "metadata": {
            "version": metadata.version,
            "attributes": {a.name: attribute_value(a) for a in metadata.attr},
        },
        "nodes": nodes,
        "dependencies": edges,
        "node_types": {node_type_name(t): c for t, c in sorted(node_types.items())},
        "collectives": {
            comm_type_name(t): {"count": c, "bytes": b}
            for t, (c, b) in sorted(collectives.items(), key=lambda kv: (kv[0] is None, kv[0] or 0))
        },
        "point_to_point": {node_type_name(t): {"count": c, "bytes": b} for t, (c, b) in sorted(point_to_point.items())},
        "total_duration_micros": total_duration,
    }
