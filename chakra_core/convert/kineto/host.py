"""A rank's host trace made from its Kineto trace alone, for the PyTorch conversion to analyse and
emit as it does an execution trace (docs/gpu.md, 'Kineto traces alone').

What an execution trace would give is rebuilt from the profiler's CPU events:
- nodes: a process root, one root per thread, `## process_group:init ##` from the trace's
  `distributedInfo.pg_config`, then every operator and annotation in start order;
- nesting: an event's parent is the innermost event still open on its thread when it starts;
- record-function ids: the events' own "Record function id" where each is present and unique
  (gloo's worker-thread spans are attached to their c10d op by that order), else numbers in
  start order; the Kineto events carry the same ids, so linking pairs each node with its event;
- communication arguments: c10d ops' tensors from "Input Dims" and "Input type",
  scalars from "Concrete Inputs"; record_param_comms' "Collective name", "dtype", "In msg
  nelems", "Out msg nelems" and "Process Group Name"; num_ops of matmuls and convolutions
  from their input shapes.
What it cannot give is said in the report, per operator kind: a tensor list's dtype (Kineto
writes "TensorList"), assumed Float; no tensor reads and writes, so host operators have no data
dependencies on each other (their order on each thread stays).
"""

from __future__ import annotations

import bisect
from array import array
from collections import Counter, defaultdict

import numpy as np
import orjson
import pyarrow as pa

from chakra_core.convert.pytorch.comms import DTYPE_BYTES
from chakra_core.convert.pytorch.et import ATTRS, ID_ATTRS, IO_STRUCT, PG_INIT_NAME, HostTrace, is_kept_whole
from chakra_core.convert.pytorch.kineto import CpuEvent, KinetoTrace
from chakra_core.convert.pytorch.opcost import COST_OPS, NO_ESTIMATE, compute_cost

SCHEMA = "kineto"  # what the report's `schema` says of a host trace made here
PROCESS_ROOT, THREAD_ROOT = "[pytorch|profiler|execution_trace|process]", "[pytorch|profiler|execution_trace|thread]"
# Kineto's "Input type" of a tensor (c10's scalar type names) -> (the ET's dtype name, bytes per element)
DTYPES = {
    "float": ("float", 4), "double": ("double", 8), "c10::Half": ("c10::Half", 2),
    "c10::BFloat16": ("c10::BFloat16", 2), "long int": ("long int", 8), "int": ("int", 4),
    "short int": ("short int", 2), "signed char": ("signed char", 1), "unsigned char": ("unsigned char", 1),
    "bool": ("bool", 1), "c10::complex<float>": ("c10::complex<float>", 8),
    "c10::complex<double>": ("c10::complex<double>", 16),
}
ASSUMED_DTYPE = "float"  # a tensor list's dtype where nothing in the trace says it
DTYPES.update({name: (name, size) for name, size in DTYPE_BYTES.items()})  # record_param_comms' "dtype" names


def keep_args(name: str) -> bool:
    """The CPU events whose arguments the conversion reads (read_kineto's keep_args)."""
    return is_kept_whole(name) or name in COST_OPS


class _Builder:
    def __init__(self, kineto: KinetoTrace):
        self.trace = HostTrace(kineto.path, SCHEMA, ATTRS, dict(kineto.fields))
        self.assumed: Counter = Counter()  # (op name, what) -> operators
        self.next_tensor = 1
        size = kineto.distributed_info.get("world_size")
        self.world_size = size if type(size) is int else 1

    def add(self, name: str, parent: int, tid: int, rf_id: int, whole: dict | None = None,
            num_ops: int = NO_ESTIMATE) -> int:
        trace = self.trace
        node_id = len(trace.ids) + 1
        trace.ids.append(node_id)
        trace.parents.append(node_id if parent == 0 else parent)
        trace.names.append(name)
        for key in ID_ATTRS:
            trace.attr_columns[key].append(tid if key == "tid" else rf_id if key == "rf_id" else 0)
        trace.op_schemas.append("")
        trace.num_ops.append(num_ops)
        trace.tensor_bytes.append(0)
        trace.read_ends.append(0)
        trace.write_ends.append(0)
        if whole is not None:
            trace.whole[node_id - 1] = {"id": node_id, "name": name, "ctrl_deps": parent, **whole}
        return node_id

    def add_operators(self, names: list[str], parents: list[int], tids: list[int], rf_ids: list[int],
                      num_ops: list[int]) -> None:
        """Nodes for the operators, as add() would one by one (the bulk of a trace: in columns)."""
        trace, n = self.trace, len(names)
        zeros = array("q", bytes(8 * n))
        trace.ids.extend(range(len(trace.ids) + 1, len(trace.ids) + 1 + n))
        trace.parents.extend(parents)
        trace.names.extend(names)
        for key in ID_ATTRS:
            trace.attr_columns[key].extend(tids if key == "tid" else rf_ids if key == "rf_id" else zeros)
        trace.op_schemas.extend([""] * n)
        trace.num_ops.extend(num_ops)
        for column in (trace.tensor_bytes, trace.read_ends, trace.write_ends):
            column.extend(zeros)

    def tensors(self, dims, dtype: str | None, op: str) -> list:
        """The tensors of a shape or of a (nested) list of shapes, each [tensor id, storage id,
        offset, numel, itemsize, device] as an ET writes one."""
        if not isinstance(dims, list) or all(type(d) is int for d in dims):
            return [self.tensor(dims, dtype, op)]
        return [t for shape in dims for t in self.tensors(shape, dtype, op)]

    def tensor(self, dims, dtype: str | None, op: str) -> list:
        if dtype not in DTYPES:
            self.assumed[(op, f"dtype {'not recorded' if dtype in (None, 'TensorList') else repr(dtype)}")] += 1
            dtype = ASSUMED_DTYPE
        numel = int(np.prod(dims)) if isinstance(dims, list) and all(type(d) is int for d in dims) else 0
        self.next_tensor += 1
        return [self.next_tensor, self.next_tensor, 0, numel, DTYPES[dtype][1], "kineto"]


def host_trace(kineto: KinetoTrace) -> HostTrace:
    """The host trace Kineto's CPU events describe (see the module docstring); sets each event's
    rf_id to its node's, so that linking pairs them."""
    b = _Builder(kineto)
    ts, dur = (np.fromiter((getattr(e, key) for e in kineto.cpu), np.float64, len(kineto.cpu)) for key in ("ts", "dur"))
    events = [kineto.cpu[k] for k in np.lexsort((-dur, ts)).tolist()]  # by (ts, -dur), stable
    _number(events)
    kineto.has_rf_ids = True
    root = b.add(PROCESS_ROOT, 0, 0, 0)
    threads = {tid: k for k, tid in enumerate(sorted({e.tid for e in events}, key=str), 1)}
    thread_root = {tid: b.add(THREAD_ROOT, root, k, 0) for tid, k in threads.items()}
    groups = kineto.distributed_info.get("pg_config")
    if isinstance(groups, list):
        entries = [{**g, "group_size": g.get("pg_size")} for g in groups if isinstance(g, dict)]
        b.add(PG_INIT_NAME, root, 0, 0, {"inputs": {"values": [orjson.dumps(entries).decode()], "types": ["String"]},
                                         "outputs": {}, "attrs": {}})
    open_on: dict[int | str, list[tuple[float, CpuEvent, int]]] = defaultdict(list)  # thread -> still open
    parent_event: dict[int, CpuEvent] = {}
    parents, num_ops = [], []
    for node_id, e in enumerate(events, len(b.trace.ids) + 1):
        stack = open_on[e.tid]
        while stack and stack[-1][0] <= e.ts:
            stack.pop()
        if stack:
            parents.append(stack[-1][2])
            parent_event[id(e)] = stack[-1][1]
        else:
            parents.append(thread_root[e.tid])
        num_ops.append(compute_cost(e.name, {"shapes": (e.args or {}).get("Input Dims") or []}, {"shapes": []})
                       if e.name in COST_OPS else NO_ESTIMATE)
        stack.append((e.ts + e.dur, e, node_id))
    b.add_operators([e.name for e in events], parents, [threads[e.tid] for e in events], [e.rf_id for e in events],
                    num_ops)
    dtypes = _list_dtypes(events, parent_event)
    for index, e in enumerate(events, len(b.trace.ids) - len(events)):
        if is_kept_whole(e.name):
            b.trace.whole[index] = {"id": index + 1, "name": e.name, "ctrl_deps": b.trace.parents[index],
                                    **_whole(b, e, dtypes.get(id(e)))}
    trace = b.trace
    trace.has_data_deps = False
    trace.io_chunks.append(pa.nulls(len(trace.ids), pa.struct([("inputs", IO_STRUCT), ("outputs", IO_STRUCT)])))
    trace.notes.append("converted from the Kineto trace alone: host operators have no data dependencies on each "
                       "other (an execution trace records the tensors they share); their order on each thread stays")
    trace.notes.extend(f"{op}: {what}, assumed {ASSUMED_DTYPE} ({DTYPES[ASSUMED_DTYPE][1]} bytes) for {n:,} tensor(s) or call(s)"
                       for (op, what), n in sorted(b.assumed.items()))
    return trace


def _number(events: list[CpuEvent]) -> None:
    """Each event's record-function id: Kineto's own where every event has one and none repeats
    (the order calls were made in, which gloo's spans are matched by), else start order."""
    ids = [e.rf_id for e in events]
    if None in ids or 0 in ids or len(set(ids)) != len(ids):
        for k, e in enumerate(events, 1):
            e.rf_id = k


def _list_dtypes(events: list[CpuEvent], parent_event: dict[int, CpuEvent]) -> dict[int, str]:
    """id(c10d op) -> the dtype of its tensor lists, which Kineto writes as "TensorList": the
    "dtype" of a record_param_comms inside it, else the tensor type of the first gloo:* span
    that follows it in record-function order (the one the analysis attaches to it)."""
    found: dict[int, str] = {}
    for e in events:
        dtype = (e.args or {}).get("dtype")
        parent = parent_event.get(id(e))
        if e.name == "record_param_comms" and parent is not None and parent.name.startswith("c10d::") \
                and dtype in DTYPES:
            found.setdefault(id(parent), dtype)
    c10d = sorted((e for e in events if e.name.startswith("c10d::")), key=lambda e: e.rf_id)
    starts = [e.rf_id for e in c10d]
    for g in sorted((e for e in events if e.name.startswith("gloo:")), key=lambda e: e.rf_id):
        k = bisect.bisect_left(starts, g.rf_id) - 1
        kinds = [t for t in (g.args or {}).get("Input type") or [] if t in DTYPES]
        if k >= 0 and kinds:
            found.setdefault(id(c10d[k]), kinds[0])
    return found


def _whole(b: _Builder, e: CpuEvent, list_dtype: str | None) -> dict:
    """A communication node's inputs and attributes, as an execution trace holds them, from its
    Kineto arguments."""
    args = e.args or {}
    if e.name == "record_param_comms":
        attrs = {key: args.get(arg) for key, arg in (
            ("collective_name", "Collective name"), ("dtype", "dtype"), ("in_msg_nelems", "In msg nelems"),
            ("out_msg_nelems", "Out msg nelems"), ("pg_name", "Process Group Name")) if arg in args}
        if "Collective name" in args and "dtype" not in args:
            b.assumed[(e.name, "dtype not recorded")] += 1
        if "Collective name" in args and "Process Group Name" not in args:
            b.assumed[(e.name, "process group not recorded (the job's groups decide)")] += 1
        if "Collective name" not in args:
            b.assumed[(e.name, "no collective name: not a collective of its own")] += 1
        seq = args.get("Seq")
        return {"inputs": {"values": [seq] if type(seq) is int else [], "types": ["Int"] if type(seq) is int else []},
                "outputs": {}, "attrs": attrs}
    values, types = _arguments(b, e, args, list_dtype)
    if e.name == "c10d::reduce_scatter_" and len(values) > 1 and values[1] == "<Object>" and values[0]:
        # Kineto drops the input, a list of tensor lists: one output's worth per member of the group
        b.assumed[(e.name, "input list not recorded: the output times the world size")] += 1
        values[1] = [values[0] * max(1, b.world_size)]
    return {"inputs": {"values": values, "types": types}, "outputs": {}, "attrs": {}}


def _arguments(b: _Builder, e: CpuEvent, args: dict, list_dtype: str | None) -> tuple[list, list]:
    """(values, types) of an operator's inputs: tensors and tensor lists from "Input Dims" and
    "Input type", scalars from "Concrete Inputs"."""
    dims, kinds, concrete = (args.get(k) or [] for k in ("Input Dims", "Input type", "Concrete Inputs"))
    values, types = [], []
    for k, kind in enumerate(kinds):
        shape = dims[k] if k < len(dims) else []
        text = concrete[k] if k < len(concrete) and isinstance(concrete[k], str) else ""
        if kind == "TensorList" or (kind.startswith("GenericList") if isinstance(kind, str) else False):
            values.append(b.tensors(shape, list_dtype, e.name) if shape else [])
            types.append(f"GenericList[Tensor({list_dtype or ASSUMED_DTYPE})]")
        elif kind in DTYPES:
            values.append(b.tensors(shape, kind, e.name))
            types.append(f"Tensor({kind})")
        elif kind == "Scalar" and text in ("True", "False"):
            values.append(text == "True")
            types.append("Bool")
        elif kind == "Scalar" and text.lstrip("-").isdigit():
            values.append(int(text))
            types.append("Int")
        else:
            values.append("<Object>")
            types.append("Object")
    return values, types
