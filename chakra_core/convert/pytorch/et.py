"""Read a PyTorch execution trace (the JSON ExecutionTraceObserver writes) into compact columns.

Two node layouts exist in the wild (docs/ingestion.md, 'Reading'):
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
nodes, which need their full arguments, are kept whole (as compact JSON, WholeNodes); there are
few of them per step.
"""

from __future__ import annotations

import math
import re
from array import array
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np
import orjson
import pyarrow as pa

from chakra_core._native import _jsonscan, _ptdigest
from chakra_core.convert.common.jsonstream import StreamedDocument, TraceJSONError, parse_json
from chakra_core.convert.pytorch.opcost import COST_OPS, NO_ESTIMATE, OperationCountError, compute_cost

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


class WholeNodes(Mapping):
    """The nodes kept whole (communication and metadata): host index -> normalized node.

    A DDP job records a few dozen per step, and as Python dicts each took about 5 KB (140 MB
    for 30 k nodes); each is kept as its compact JSON (about 600 bytes) and parsed when asked
    for, a few times per conversion. A node given as bytes is that JSON, which orjson reads back
    exactly; one given as a dict (a value only the json module reads, such as NaN, or nesting
    deeper than orjson writes) stays one."""

    def __init__(self) -> None:
        self._nodes: dict[int, bytes | dict] = {}

    def __setitem__(self, index: int, node: bytes | dict) -> None:
        self._nodes[index] = node

    def __getitem__(self, index: int) -> dict:
        node = self._nodes[index]
        return orjson.loads(node) if type(node) is bytes else node

    def __iter__(self) -> Iterator[int]:
        return iter(self._nodes)

    def __len__(self) -> int:
        return len(self._nodes)


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
    whole: WholeNodes = field(default_factory=WholeNodes)  # index -> normalized node, for comm/metadata nodes
    has_data_deps: bool = True  # the tensors ops read and write are recorded (not so in one made from Kineto alone)

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
    inputs/outputs `values` list, at any nesting depth (tensor lists, tuples), in order.
    Walked with a stack, not recursion: the nesting is bounded only by the json_depth limit."""
    stack = [iter(values)] if type(values) is list else []
    while stack:
        for v in stack[-1]:
            if type(v) is list:
                if len(v) == 6 and type(v[0]) is int and type(v[5]) is str:
                    found.append(v)
                elif v:
                    stack.append(iter(v))
                    break
        else:
            stack.pop()
    return found


def tensor_nbytes(tensor: list) -> int | float:
    """numel x itemsize; NaN when either is not an integer, so that a sum over a corrupt tensor
    is NaN, which the communication-size check refuses, rather than a TypeError or a string."""
    numel, itemsize = tensor[3], tensor[4]
    return numel * itemsize if type(numel) is int and type(itemsize) is int else math.nan


def read_host_trace(url: str, progress: Callable[[int], None] | None = None) -> HostTrace:
    reader = _HostReader(url)
    doc = StreamedDocument(url, "nodes", progress=progress, decode=reader.digest_batch, walk=reader.walk)
    reader.doc = doc
    doc.digest_all()
    trace = reader.trace or HostTrace(url, str(doc.fields.get("schema", "")), ATTRS, doc.fields)  # no nodes
    trace.fields = doc.fields
    _check_unique_ids(trace)
    return trace


class _HostReader:
    """Digests each batch of nodes in C (chakra_core/_native/ptdigest.c) into HostTrace columns;
    only communication / metadata nodes and operators with a cost estimate are parsed whole."""

    def __init__(self, url: str):
        self.url = url
        self.doc: StreamedDocument | None = None
        self.trace: HostTrace | None = None
        self.costs: dict[tuple, int] = {}  # (op, input shapes text, output shapes text) -> num_ops

    def walk(self, buf: bytearray, pos: int, end: int, max_items: int, max_depth: int,
             first_element: int) -> tuple[int, int, bool] | None:
        """Digest the nodes from pos on as the C walk finds them (StreamedDocument's `walk`);
        the first batch goes through digest_batch, which learns the layout from the first node."""
        if self.trace is None:
            return None
        items, _, next_pos, closed, d = _ptdigest.digest_elements(buf, pos, end, self.trace.layout == FLAT,
                                                                  max_items, max_depth)
        if items:
            self._take(buf, d, first_element)
        return items, next_pos, closed

    def digest_batch(self, buf: bytearray, start: int, end: int, first_element: int) -> None:
        if self.trace is None:
            end_of_first = _jsonscan.value_end(buf, start + 1, self.doc.element_depth)
            first = parse_json(memoryview(buf)[start + 1:end_of_first], self.url, self.doc.stream_offset(start + 1),
                               first_element)
            self.trace = _start(self.doc, first)
        trace = self.trace
        try:
            d = _ptdigest.digest(buf, start, end, trace.layout == FLAT)
        except ValueError as exc:  # "node K at byte B: [node id I: ]what"
            found = re.match(r"node (\d+) at byte (\d+): (?:node id (-?\d+): )?(.*)", str(exc))
            if not found:
                raise TraceJSONError(trace.path, str(exc), element=first_element) from None
            node_id = int(found.group(3)) if found.group(3) is not None else None
            raise TraceJSONError(trace.path, found.group(4), self.doc.stream_offset(int(found.group(2))),
                                 first_element + int(found.group(1)), node_id) from None
        self._take(buf, d, first_element)

    def _take(self, buf: bytearray, d: dict, first_element: int) -> None:
        """Append one digest's nodes (_ptdigest's dict; its offsets index buf) to the trace."""
        trace = self.trace
        base = len(trace.ids)
        names = d["names"]
        trace.ids.frombytes(d["ids"])
        trace.parents.frombytes(d["parents"])
        for key in ID_ATTRS:
            trace.attr_columns[key].frombytes(d[key])
        trace.names.extend(names)
        trace.op_schemas.extend(d["op_schemas"])
        trace.tensor_bytes.frombytes(d["tensor_bytes"])
        for column, batch_ends, values, target in ((trace.read_ends, d["read_ends"], d["reads"], trace.reads),
                                                   (trace.write_ends, d["write_ends"], d["writes"], trace.writes)):
            column.frombytes((np.frombuffer(batch_ends, np.int64) + len(target)).tobytes())  # batch -> trace offsets
            target.frombytes(values)
        num_ops = np.full(len(names), NO_ESTIMATE, np.int64)
        starts, ends = np.frombuffer(d["node_starts"], np.int64), np.frombuffer(d["node_ends"], np.int64)
        view = memoryview(buf)
        distinct = set(names)
        whole_names = {name for name in distinct if is_kept_whole(name)}
        if whole_names:  # communication and metadata nodes: few, kept whole
            for k, name in enumerate(names):
                if name in whole_names:
                    trace.whole[base + k] = self._whole_node(view[starts[k]:ends[k]], int(starts[k]), first_element + k)
        costed = distinct & COST_OPS
        if costed:
            in_offsets, in_shapes = d["io"][1]
            out_offsets, out_shapes = d["io"][4]
            in_at, out_at = np.frombuffer(in_offsets, np.int32), np.frombuffer(out_offsets, np.int32)
            for k, name in enumerate(names):
                if name in costed:  # iterations repeat shapes: each (op, shapes) is costed once
                    key = (name, in_shapes[in_at[k]:in_at[k + 1]], out_shapes[out_at[k]:out_at[k + 1]])
                    ops = self.costs.get(key)
                    if ops is None:
                        try:
                            ops = self.costs[key] = compute_cost(name, {"shapes": _json_or_empty(key[1])},
                                                                 {"shapes": _json_or_empty(key[2])})
                        except OperationCountError as exc:
                            raise TraceJSONError(trace.path, str(exc), element=first_element + k) from None
                    num_ops[k] = ops
        trace.num_ops.frombytes(num_ops.tobytes())
        trace.io_chunks.append(_io_array(len(names), d["io"], d["inputs_present"], d["outputs_present"]))

    def _whole_node(self, text: memoryview, start: int, element: int) -> bytes | dict:
        """A node kept whole, normalized: as compact JSON where orjson reads it (WholeNodes)."""
        try:
            node = normalize_node(orjson.loads(text), self.trace.layout)
        except orjson.JSONDecodeError:  # parse_json takes NaN and the like, or words the error
            node = parse_json(text, self.trace.path, self.doc.stream_offset(start), element)
            return normalize_node(node, self.trace.layout)
        try:
            # copied to its length: the bytes orjson.dumps returns keep the buffer it grew (kilobytes)
            return bytes(memoryview(orjson.dumps(node)))
        except orjson.JSONEncodeError:  # nested deeper than orjson writes (it reads deeper)
            return node


def _json_or_empty(text: bytes) -> list:
    return orjson.loads(text) if text else []


def _check_unique_ids(trace: HostTrace) -> None:
    ids = np.frombuffer(trace.ids, np.int64) if len(trace.ids) else np.zeros(0, np.int64)
    values, counts = np.unique(ids, return_counts=True)
    if len(values) != len(ids):
        duplicate = int(values[np.argmax(counts > 1)])
        second = int(np.flatnonzero(ids == duplicate)[1])
        raise TraceJSONError(trace.path, f"node id {duplicate} appears twice", element=second)


def _start(doc: StreamedDocument, first_node) -> HostTrace:
    schema = doc.fields.get("schema")
    if not isinstance(schema, str):
        raise TraceJSONError(doc.url, "no 'schema' string before the nodes: not a PyTorch execution trace")
    layout = _layout_of(first_node, doc.url)
    trace = HostTrace(doc.url, schema, layout, doc.fields)
    known = KNOWN_SCHEMAS.get(schema)
    if known is None:
        trace.notes.append(f"schema {schema!r} is not a known PyTorch ET schema; read with the {layout} layout"
                           f" of the nearest known schema {_nearest_schema(schema, layout)!r}")
    elif known != layout:
        trace.notes.append(f"schema {schema!r} normally has the {known} layout but its nodes have the {layout}"
                           f" layout; read as {layout}")
    return trace


IO_STRUCT = pa.struct([("values", pa.string()), ("shapes", pa.string()), ("types", pa.string())])


def _io_array(n: int, io: tuple, inputs_present: bytes, outputs_present: bytes) -> pa.StructArray:
    def strings(offsets: bytes, data: bytes) -> pa.Array:
        return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(data))

    def struct(parts: tuple, present: bytes) -> pa.StructArray:
        mask = pa.array(np.frombuffer(present, np.uint8) == 0)
        return pa.StructArray.from_arrays([strings(*p) for p in parts], fields=list(IO_STRUCT), mask=mask)

    return pa.StructArray.from_arrays([struct(io[:3], inputs_present), struct(io[3:], outputs_present)],
                                      names=["inputs", "outputs"])
