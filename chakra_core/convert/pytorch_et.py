"""Read a PyTorch execution trace (the JSON ExecutionTraceObserver writes) into compact columns.

Two node layouts exist in the wild (PYTORCH_TRACE_FACTS.md, ../shared/data/README.md):
- flat, schema "1.0.1": rf_id, parent, tid, ... are members of the node, inputs are three
  parallel lists (inputs, input_shapes, input_types);
- attrs, schemas "1.0.2-chakra.0.0.4" up to "1.1.1-chakra.1.0.0" (torch 2.13 writes
  "1.1.1-chakra.0.0.4"): ctrl_deps is the parent, inputs/outputs are {values, shapes, types
  [, strides]} and rf_id, tid, ... are in attrs [{name, type, value}].
A schema this module does not know is read with the layout its first node shows and the
nearest known version is reported, rather than refused.

The file is streamed (jsonstream); what is kept per node is what conversion needs: ids,
parents, names, thread, record-function id, tensor reads/writes (for data dependencies),
compute estimates, and the input/output text for the output ET. Communication and metadata
nodes, which need their full arguments, are kept whole; there are few of them.
"""

from __future__ import annotations

import gc
import re
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field

import orjson
import pyarrow as pa

from chakra_core.convert.jsonstream import StreamedDocument, TraceJSONError
from chakra_core.convert.opcost import compute_cost

FLAT, ATTRS = "flat", "attrs"
KNOWN_SCHEMAS = {
    "1.0.1": FLAT,
    "1.0.2-chakra.0.0.4": ATTRS,
    "1.0.3-chakra.0.0.4": ATTRS,
    "1.1.0-chakra.0.0.4": ATTRS,
    "1.1.1-chakra.0.0.4": ATTRS,
    "1.1.1-chakra.1.0.0": ATTRS,
}
# Attributes with their own column in the output (the rest of a node's attrs are dropped,
# except on communication nodes, which are kept whole).
ID_ATTRS = ("rf_id", "fw_parent", "seq_id", "scope", "tid", "fw_tid")

ROOT_NAME = re.compile(r"^\[pytorch\|profiler\|execution_(trace|graph)\|(process|thread)\]$")
PG_INIT_NAME = "## process_group:init ##"
COMM_PREFIXES = ("c10d::", "record_param_comms", "nccl:", "gloo:", "chakra::pg=")


def is_kept_whole(name: str) -> bool:
    return name.startswith(COMM_PREFIXES) or name == PG_INIT_NAME


@dataclass
class HostTrace:
    """One rank's host trace, one entry per node in file order (not id order)."""

    path: str
    schema: str
    layout: str
    fields: dict  # top-level members other than nodes (pid, time, start_ts, finish_ts, ...)
    notes: list[str] = field(default_factory=list)
    ids: array = field(default_factory=lambda: array("q"))
    parents: array = field(default_factory=lambda: array("q"))  # -1: none
    names: list[str] = field(default_factory=list)
    attr_columns: dict[str, array] = field(default_factory=lambda: {k: array("q") for k in ID_ATTRS})
    op_schemas: list[str] = field(default_factory=list)
    num_ops: array = field(default_factory=lambda: array("q"))  # -1: no estimate
    tensor_bytes: array = field(default_factory=lambda: array("q"))  # bytes of tensors read + written
    # storage keys read / written, CSR by node
    reads: array = field(default_factory=lambda: array("q"))
    read_ends: array = field(default_factory=lambda: array("q"))
    writes: array = field(default_factory=lambda: array("q"))
    write_ends: array = field(default_factory=lambda: array("q"))
    io_chunks: list[pa.Array] = field(default_factory=list)  # struct<inputs, outputs> per batch
    whole: dict[int, dict] = field(default_factory=dict)  # index -> normalized node, for comm/metadata nodes

    def __len__(self) -> int:
        return len(self.ids)


def _nearest_schema(schema: str, layout: str) -> str:
    def key(version: str) -> tuple[int, ...]:
        return tuple(int(x) for x in re.findall(r"\d+", version)[:6])

    target = key(schema)
    candidates = [s for s, l in KNOWN_SCHEMAS.items() if l == layout]
    return min(candidates, key=lambda s: [abs(a - b) for a, b in zip(key(s) + (0,) * 6, target + (0,) * 6)])


def _layout_of(node: dict, path: str) -> str:
    if isinstance(node, dict) and "attrs" in node and "ctrl_deps" in node:
        return ATTRS
    if isinstance(node, dict) and "parent" in node and "rf_id" in node:
        return FLAT
    raise TraceJSONError(path, "not a PyTorch execution trace: its first node has neither the flat layout"
                               " (parent, rf_id) nor the attrs layout (ctrl_deps, attrs)", element=0)


def normalize_node(node: dict, layout: str) -> dict:
    """The attrs-layout view of a node of either layout: id, name, ctrl_deps, inputs, outputs, attrs (dict)."""
    if layout == ATTRS:
        return {"id": node["id"], "name": node["name"], "ctrl_deps": node.get("ctrl_deps"),
                "inputs": node.get("inputs") or {}, "outputs": node.get("outputs") or {},
                "attrs": {a["name"]: a.get("value") for a in node.get("attrs") or ()}}
    return {"id": node["id"], "name": node["name"], "ctrl_deps": node.get("parent"),
            "inputs": {"values": node.get("inputs", []), "shapes": node.get("input_shapes", []),
                       "types": node.get("input_types", [])},
            "outputs": {"values": node.get("outputs", []), "shapes": node.get("output_shapes", []),
                        "types": node.get("output_types", [])},
            "attrs": {k: node.get(k) for k in ID_ATTRS + ("op_schema",) if k in node}}


def tensors_in(values, found: list) -> list:
    """Every tensor value ([tensor_id, storage_id, offset, numel, itemsize, device]) in an
    inputs/outputs `values` list, at any nesting depth (tensor lists, tuples)."""
    for v in values:
        if type(v) is list:
            if len(v) == 6 and type(v[0]) is int and type(v[5]) is str:
                found.append(v)
            elif v:
                tensors_in(v, found)
    return found


def storage_key(tensor: list) -> int:
    """Views share a storage; dependencies follow storages, so a write through one view is
    seen by reads through another (DDP's gradient buckets are views of one flat buffer)."""
    return tensor[1] if tensor[1] else -1 - tensor[0]


def tensor_nbytes(tensor: list) -> int:
    return tensor[3] * tensor[4]


def read_host_trace(url: str, progress: Callable[[int], None] | None = None) -> HostTrace:
    doc = StreamedDocument(url, "nodes", progress=progress)
    trace: HostTrace | None = None
    seen_ids: set[int] = set()
    gc_was_enabled = gc.isenabled()
    gc.disable()  # millions of short-lived containers; the cyclic collector only slows this down
    try:
        for batch in doc.batches():
            if trace is None:
                trace = _start(doc, batch)
            _append_batch(trace, batch, seen_ids)
    finally:
        if gc_was_enabled:
            gc.enable()
    if trace is None:  # an empty nodes array
        trace = HostTrace(url, str(doc.fields.get("schema", "")), ATTRS, doc.fields)
    trace.fields = doc.fields
    return trace


def _start(doc: StreamedDocument, batch: list) -> HostTrace:
    schema = doc.fields.get("schema")
    if not isinstance(schema, str):
        raise TraceJSONError(doc.url, "no 'schema' string before the nodes: not a PyTorch execution trace")
    layout = _layout_of(batch[0], doc.url)
    trace = HostTrace(doc.url, schema, layout, doc.fields)
    known = KNOWN_SCHEMAS.get(schema)
    if known is None:
        trace.notes.append(f"schema {schema!r} is not a known PyTorch ET schema; read with the {layout} layout"
                           f" of the nearest known schema {_nearest_schema(schema, layout)!r}")
    elif known != layout:
        trace.notes.append(f"schema {schema!r} normally has the {known} layout but its nodes have the {layout}"
                           f" layout; read as {layout}")
    return trace


def _append_batch(trace: HostTrace, batch: list, seen_ids: set) -> None:
    layout = trace.layout
    ids, parents, names = trace.ids, trace.parents, trace.names
    cols = trace.attr_columns
    reads, writes = trace.reads, trace.writes
    io_in, io_out = [], []
    base = len(ids)
    for offset, raw in enumerate(batch):
        try:
            if layout == ATTRS:  # the common case, without building a normalized copy
                nid, name, parent = raw["id"], raw["name"], raw.get("ctrl_deps")
                attrs = {a["name"]: a.get("value") for a in raw.get("attrs") or ()}
                inputs, outputs = raw.get("inputs") or {}, raw.get("outputs") or {}
            else:
                node = normalize_node(raw, layout)
                nid, name, parent, attrs = node["id"], node["name"], node["ctrl_deps"], node["attrs"]
                inputs, outputs = node["inputs"], node["outputs"]
        except (KeyError, TypeError, AttributeError):
            raise TraceJSONError(trace.path, "node lacks id/name or has the wrong shape", element=base + offset) from None
        if type(nid) is not int or type(name) is not str:
            raise TraceJSONError(trace.path, f"node id {nid!r}: id must be an integer and name a string",
                                 element=base + offset)
        if nid in seen_ids:
            raise TraceJSONError(trace.path, f"node id {nid} appears twice", element=base + offset)
        seen_ids.add(nid)
        ids.append(nid)
        parents.append(parent if type(parent) is int else -1)
        names.append(name)
        for key in ID_ATTRS:
            value = attrs.get(key)
            cols[key].append(value if type(value) is int else 0)
        trace.op_schemas.append(attrs.get("op_schema") or "")
        in_tensors = tensors_in(inputs.get("values") or (), [])
        out_tensors = tensors_in(outputs.get("values") or (), [])
        for t in in_tensors:
            reads.append(storage_key(t))
        for t in out_tensors:
            writes.append(storage_key(t))
        if is_kept_whole(name):
            trace.whole[base + offset] = normalize_node(raw, layout)
            if name.startswith("c10d::"):  # collectives fill their inputs in place
                for t in in_tensors:
                    writes.append(storage_key(t))
        trace.read_ends.append(len(reads))
        trace.write_ends.append(len(writes))
        ops = compute_cost(name, inputs, outputs)
        trace.num_ops.append(ops)
        trace.tensor_bytes.append(sum(map(tensor_nbytes, in_tensors)) + sum(map(tensor_nbytes, out_tensors)))
        io_in.append(_io_text(inputs))
        io_out.append(_io_text(outputs))
    trace.io_chunks.append(_io_array(io_in, io_out))


def _io_text(io: dict) -> tuple[str, str, str] | None:
    if not io:
        return None
    return (orjson.dumps(io.get("values", [])).decode(), orjson.dumps(io.get("shapes", [])).decode(),
            orjson.dumps(io.get("types", [])).decode())


IO_STRUCT = pa.struct([("values", pa.string()), ("shapes", pa.string()), ("types", pa.string())])


def _io_array(io_in: list, io_out: list) -> pa.StructArray:
    def column(rows: list) -> pa.StructArray:
        present = [r is not None for r in rows]
        parts = [pa.array([r[k] if r is not None else None for r in rows], pa.string()) for k in range(3)]
        mask = pa.array([not p for p in present], pa.bool_())
        return pa.StructArray.from_arrays(parts, fields=list(IO_STRUCT), mask=mask)

    return pa.StructArray.from_arrays([column(io_in), column(io_out)], names=["inputs", "outputs"])
