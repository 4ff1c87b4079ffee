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
  nelems", "Out msg nelems" and "Process Group Name"; a tensor list Kineto recorded without its
  shapes takes them from the `record_param_comms` or `nccl:*` event inside its op; num_ops of
  matmuls and convolutions from their input shapes;
- collectives the host does not name (older PyTorch: `record_param_comms` without "Collective
  name", or an NCCL kernel launched inside no communication op): named after the NCCL kernel
  launched (kineto/nccl.py), sized from the op's own "Input Dims" and "Input type".
What it cannot give is said in the report, per operator kind: a tensor list's dtype (Kineto
writes "TensorList"), assumed Float; a size nothing records, 0 bytes; a SendRecv kernel's
collective, all_to_all; no tensor reads and writes, so host operators have no data
dependencies on each other (their order on each thread stays).
"""

from __future__ import annotations

import bisect
import math
from array import array
from collections import Counter

import numpy as np
import orjson
import pyarrow as pa

from chakra_core._native import _threadspans
from chakra_core.convert.kineto.nccl import NcclKernel, kernel_collectives, names_collective
from chakra_core.convert.pytorch import comms
from chakra_core.convert.pytorch.comms import DTYPE_BYTES
from chakra_core.convert.pytorch.et import ATTRS, ID_ATTRS, IO_STRUCT, PG_INIT_NAME, HostTrace, is_kept_whole
from chakra_core.convert.pytorch.kineto import CpuEvent, KinetoTrace, column
from chakra_core.convert.pytorch.opcost import COST_OPS, NO_ESTIMATE, OperationCountError, compute_cost
from chakra_core.errors import ChakraFormatError

SCHEMA = "kineto"  # what the report's `schema` says of a host trace made here
PROCESS_ROOT, THREAD_ROOT = "[pytorch|profiler|execution_trace|process]", "[pytorch|profiler|execution_trace|thread]"
# Kineto's "Input type" of a tensor (c10's scalar type names) -> (the ET's dtype name, bytes per element)
DTYPES = {
    "float": ("float", 4), "double": ("double", 8), "c10::Half": ("c10::Half", 2),
    "c10::BFloat16": ("c10::BFloat16", 2), "long int": ("long int", 8), "int": ("int", 4),
    "short int": ("short int", 2), "signed char": ("signed char", 1), "unsigned char": ("unsigned char", 1),
    "bool": ("bool", 1), "c10::complex<float>": ("c10::complex<float>", 8),
    "c10::complex<double>": ("c10::complex<double>", 16),
    "long": ("long int", 8),  # older PyTorch (2022-2023) writes int64 so
}
ASSUMED_DTYPE = "float"  # a tensor list's dtype where nothing in the trace says it
DTYPES.update({name: (name, size) for name, size in DTYPE_BYTES.items()})  # record_param_comms' "dtype" names
# Kineto's "Input type" -> record_param_comms' "dtype" name (a collective named after its kernel)
PARAM_COMMS_DTYPE = {
    "float": "Float", "double": "Double", "c10::Half": "Half", "c10::BFloat16": "BFloat16", "long int": "Long",
    "long": "Long", "int": "Int", "short int": "Short", "signed char": "Char", "unsigned char": "Byte", "bool": "Bool",
    "c10::complex<float>": "ComplexFloat", "c10::complex<double>": "ComplexDouble",
    **{name: name for name in DTYPE_BYTES},
}
ASSUMED = f"assumed {ASSUMED_DTYPE} ({DTYPES[ASSUMED_DTYPE][1]} bytes)"
# which argument of a c10d op holds the buffer its size is read from (comms.describe_c10d)
SIZED_ARGUMENT = {comms.ALL_GATHER: 1, comms.GATHER: 1, comms.REDUCE_SCATTER: 1, comms.ALL_TO_ALL: 1}


def keep_args(name: str) -> bool:
    """The CPU events whose arguments the conversion reads (read_kineto's keep_args)."""
    return is_kept_whole(name) or name in COST_OPS


class _Builder:
    def __init__(self, kineto: KinetoTrace):
        self.trace = HostTrace(kineto.path, SCHEMA, ATTRS, dict(kineto.fields))
        self.assumed: Counter = Counter()  # (op name, what was assumed) -> operators or tensors
        self.next_tensor = 1
        self.kernels: dict[int, NcclKernel] = {}  # id(record_param_comms) -> the NCCL kernel that names it
        self.inner: dict[int, tuple[list, str]] = {}  # id(c10d op) -> (shape, dtype) of its buffer, from inside
        self.parent_event: dict[int, CpuEvent] = {}  # id(event) -> the event it lies in (_enclosing_events)
        self.named_inside: set[int] = set()  # id(record_param_comms) holding an event that names its collective
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
            what = "not recorded" if dtype in (None, "TensorList") else repr(dtype)
            self.assumed[(op, f"dtype {what}, {ASSUMED}")] += 1
            dtype = ASSUMED_DTYPE
        numel = math.prod(dims) if isinstance(dims, list) and all(type(d) is int for d in dims) else 0
        self.next_tensor += 1
        return [self.next_tensor, self.next_tensor, 0, numel, DTYPES[dtype][1], "kineto"]


def host_trace(kineto: KinetoTrace) -> HostTrace:
    """The host trace Kineto's CPU events describe (see the module docstring); sets each event's
    rf_id to its node's, so that linking pairs them."""
    found = kernel_collectives(kineto)
    kineto.cpu.extend(found.made)  # host events for NCCL kernels launched inside no communication op
    b = _Builder(kineto)
    ts, dur = column(kineto.cpu, "ts"), column(kineto.cpu, "dur")
    order = np.lexsort((-dur, ts))  # by (ts, -dur), stable
    events = [kineto.cpu[k] for k in order.tolist()]
    _number(events)
    kineto.has_rf_ids = True
    root = b.add(PROCESS_ROOT, 0, 0, 0)
    codes: dict = {}  # thread -> its code, by first appearance
    thread = column(events, "tid", codes)
    threads = {tid: k for k, tid in enumerate(sorted(codes, key=str), 1)}
    thread_root = {tid: b.add(THREAD_ROOT, root, k, 0) for tid, k in threads.items()}
    groups = kineto.distributed_info.get("pg_config")
    if isinstance(groups, list):
        entries = [{**g, "group_size": g.get("pg_size")} for g in groups if isinstance(g, dict)]
        b.add(PG_INIT_NAME, root, 0, 0, {"inputs": {"values": [orjson.dumps(entries).decode()], "types": ["String"]},
                                         "outputs": {}, "attrs": {}})
    # each event's parent: the innermost event of its thread still open when it starts, else the thread's root
    ts, dur = ts[order], dur[order]
    enclosing = np.frombuffer(_threadspans.enclosing(np.argsort(thread, kind="stable"), thread, ts, ts + dur),
                              np.int64)
    first = len(b.trace.ids) + 1  # the node id of events[0]
    roots = np.array([thread_root[tid] for tid in codes], np.int64)
    parents = np.where(enclosing >= 0, enclosing + first, roots[thread]).tolist()
    names = [e.name for e in events]
    num_ops = _operation_counts(kineto.path, names, events)
    kept_whole = {name: is_kept_whole(name) for name in set(names)}
    b.add_operators(names, parents, np.array([threads[tid] for tid in codes], np.int64)[thread].tolist(),
                    [e.rf_id for e in events], num_ops)
    whole = [k for k, name in enumerate(names) if kept_whole[name]]
    parent_event = _enclosing_events(events, enclosing.tolist(), whole)
    dtypes = _list_dtypes(events, parent_event)
    b.kernels, b.parent_event = found.kernels, parent_event
    communication = [events[k] for k in whole]
    b.named_inside = {id(outer) for e in communication if names_collective(e) for outer in _outer(e, parent_event)}
    _check_element_counts(kineto.path, communication)
    b.inner = _inner_buffers(communication, parent_event)
    first = len(b.trace.ids) - len(events)
    for index, e in zip((first + k for k in whole), communication):
        b.trace.whole[index] = {"id": index + 1, "name": e.name, "ctrl_deps": b.trace.parents[index],
                                **_whole(b, e, dtypes.get(id(e)))}
    trace = b.trace
    trace.has_data_deps = False
    trace.io_chunks.append(pa.nulls(len(trace.ids), pa.struct([("inputs", IO_STRUCT), ("outputs", IO_STRUCT)])))
    trace.notes.append("converted from the Kineto trace alone: host operators have no data dependencies on each "
                       "other (an execution trace records the tensors they share); their order on each thread stays")
    trace.notes.extend(found.notes)
    trace.notes.extend(f"{op}: {what}, for {n:,} tensor(s) or call(s)" for (op, what), n in sorted(b.assumed.items()))
    return trace


def _operation_counts(path: str, names: list[str], events: list[CpuEvent]) -> list[int]:
    """num_ops of each event from its "Input Dims"; a count no int64 holds names its event."""
    counts = [NO_ESTIMATE] * len(names)
    for k, (name, e) in enumerate(zip(names, events)):
        if name in COST_OPS:
            try:
                counts[k] = compute_cost(name, {"shapes": (e.args or {}).get("Input Dims") or []}, {"shapes": []})
            except OperationCountError as exc:
                raise ChakraFormatError(path, f"the event at ts {e.ts} µs: {exc}") from None
    return counts


def _enclosing_events(events: list[CpuEvent], enclosing: list[int], starts: list[int]) -> dict[int, CpuEvent]:
    """id(event) -> the event it lies in, for events[k] of each k in `starts` and the events
    around them (what the communication events' readings ask), not for every nested event."""
    found: dict[int, CpuEvent] = {}
    for k in starts:
        while (p := enclosing[k]) >= 0 and id(events[k]) not in found:
            found[id(events[k])] = events[p]
            k = p
    return found


def _outer(e: CpuEvent, parent_event: dict[int, CpuEvent]):
    """The events an event lies in, innermost first."""
    outer = parent_event.get(id(e))
    while outer is not None:
        yield outer
        outer = parent_event.get(id(outer))


def _check_element_counts(path: str, communication: list[CpuEvent]) -> None:
    """Refuses a message element count no tensor has (negative, not whole, 2**62 or more), which
    would otherwise be ignored where a tensor inside the op sizes it, or overflow the bytes."""
    for e in communication:
        args = e.args or {}
        for key in ("In msg nelems", "Out msg nelems"):
            count = args.get(key)
            if key in args and (type(count) is not int or not 0 <= count < 2**62):
                raise ChakraFormatError(path, f"the {e.name} event at ts {e.ts} µs: {key} {str(count)[:40]} is not "
                                              "an element count (a whole number from 0 to 2**62)")


def _inner_buffers(communication: list[CpuEvent], parent_event: dict[int, CpuEvent]) -> dict[int, tuple[list, str]]:
    """id(c10d op) -> (shape, dtype) of the buffer a communication event inside it records: a
    record_param_comms' "In msg nelems" and "dtype", or an `nccl:*` event's first tensor (older
    traces write a c10d op's tensor lists without their shapes)."""
    found: dict[int, tuple[list, str]] = {}
    for e in communication:
        args = e.args or {}
        if e.name == "record_param_comms" and type(args.get("In msg nelems")) is int and args.get("dtype") in DTYPES:
            buffer = ([args["In msg nelems"]], args["dtype"])
        elif e.name.startswith("nccl:") and (shape := _first_tensor(args)) is not None:
            buffer = shape
        else:
            continue
        op = next((outer for outer in _outer(e, parent_event) if outer.name.startswith("c10d::")), None)
        if op is not None:
            found.setdefault(id(op), buffer)
    return found


def _first_tensor(args: dict) -> tuple[list, str] | None:
    """(shape, dtype) of an event's first input where Kineto recorded it as a tensor."""
    dims, kinds = args.get("Input Dims") or [], args.get("Input type") or []
    if dims and kinds and kinds[0] in DTYPES and isinstance(dims[0], list) and dims[0] \
            and all(type(d) is int for d in dims[0]):
        return dims[0], kinds[0]
    return None


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
        seq = args.get("Seq")
        return {"inputs": {"values": [seq] if type(seq) is int else [], "types": ["Int"] if type(seq) is int else []},
                "outputs": {}, "attrs": _param_comms(b, e, args)}
    values, types = _arguments(b, e, args, list_dtype)
    kind = comms.kind_of(e.name) if not _wrapped(b, e) else None
    slot = SIZED_ARGUMENT.get(kind, 0)
    if kind is not None and kind != comms.BARRIER and (slot >= len(values) or values[slot] in ([], "<Object>")):
        missing = slot + 1 - len(values)  # no "Input Dims" at all (recorded without shapes)
        values, types = values + [[]] * missing, types + ["GenericList[Tensor]"] * missing
        if id(e) in b.inner:  # a tensor list Kineto wrote without shapes: the buffer recorded inside the op
            shape, dtype = b.inner[id(e)]
            values[slot], types[slot] = b.tensors(shape, dtype, e.name), f"GenericList[Tensor({dtype})]"
        elif values[slot] == []:
            b.assumed[(e.name, "size not recorded (a tensor list without its shapes): 0 bytes")] += 1
    if e.name == "c10d::reduce_scatter_" and len(values) > 1 and values[1] == "<Object>" and values[0]:
        # Kineto drops the input, a list of tensor lists: one output's worth per member of the group
        b.assumed[(e.name, "input list not recorded: the output times the world size")] += 1
        values[1] = [values[0] * max(1, b.world_size)]
    return {"inputs": {"values": values, "types": types}, "outputs": {}, "attrs": {}}


def _wrapped(b: _Builder, e: CpuEvent) -> bool:
    """Whether a communication event lies inside another (which is then the op and holds its size)."""
    return any(outer.name.startswith(("c10d::", "record_param_comms")) for outer in _outer(e, b.parent_event))


def _param_comms(b: _Builder, e: CpuEvent, args: dict) -> dict:
    """A record_param_comms' attributes: what it records, or, where it names no collective and an
    NCCL kernel it launched does, that kernel's collective (_named_after)."""
    attrs = {key: args.get(arg) for key, arg in (
        ("collective_name", "Collective name"), ("dtype", "dtype"), ("in_msg_nelems", "In msg nelems"),
        ("out_msg_nelems", "Out msg nelems"), ("pg_name", "Process Group Name")) if arg in args}
    kernel = None if "Collective name" in args else b.kernels.get(id(e))
    if "Collective name" not in args and kernel is None:
        if not _wrapped(b, e) and id(e) not in b.named_inside:
            b.assumed[(e.name, "no collective name, no NCCL kernel launched and no c10d or nccl:* op inside "
                               "(a wait, as newer PyTorch names it): not a collective")] += 1
        return attrs
    label = _named_after(b, kernel, args, attrs) if kernel is not None else e.name
    kind = comms.kind_of(str(attrs["collective_name"]))
    if "in_msg_nelems" not in attrs and kind not in (None, comms.BARRIER):
        b.assumed[(label, "size not recorded (no In msg nelems, no Input Dims): 0 bytes")] += 1
    elif "in_msg_nelems" in attrs and attrs.get("dtype") not in DTYPE_BYTES:
        b.assumed[(label, f"dtype not recorded, {ASSUMED}")] += 1
        attrs["dtype"] = PARAM_COMMS_DTYPE[ASSUMED_DTYPE]
    if "Process Group Name" not in args:
        b.assumed[(label, "process group not recorded (the job's groups decide)")] += 1
    return attrs


def _named_after(b: _Builder, kernel: NcclKernel, args: dict, attrs: dict) -> str:
    """Fills a record_param_comms' attributes from the NCCL kernel it launched: the collective
    from the kernel's name, the size from the event's first input ("Input Dims", "Input type"),
    else the kernel's element type where it reduces. Returns the op kind the report names."""
    label = f"{comms.kind_label(comms.kind_of(kernel.collective))} (from NCCL kernels {kernel.func})"
    attrs["collective_name"] = kernel.collective
    if kernel.func == "SendRecv":
        b.assumed[(label, "the host names no collective: assumed all_to_all (send, recv, gather and scatter "
                          "run as SendRecv kernels too)")] += 1
    buffer = _first_tensor(args)
    if buffer is not None and "In msg nelems" not in args:
        attrs["in_msg_nelems"], attrs["dtype"] = math.prod(buffer[0]), PARAM_COMMS_DTYPE[buffer[1]]
    if "dtype" not in attrs and kernel.dtype is not None:
        attrs["dtype"] = PARAM_COMMS_DTYPE[kernel.dtype]
    return label


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
