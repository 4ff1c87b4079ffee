"""Recognise a PyTorch communication op and describe it as one Chakra communication node.

A collective shows in a PyTorch ET as a nest of wrapper nodes: `c10d::allreduce_` (the
dispatcher op, with the arguments), `record_param_comms` (NCCL builds: collective_name,
in_msg_nelems, dtype, pg_name, ...) and `nccl:all_reduce`, or, with gloo, a `gloo:*` node
recorded next to the c10d op. The outermost one is the anchor; all of them become one node.

comm_size (bytes), as the simulator reads it (docs/simulator.md, 'Collective algorithms'):
- all_gather, gather: the bytes each rank contributes (its input);
- scatter: the whole scattered buffer (group size x each rank's share), as the simulator
  times it like a reduce-scatter of that size;
- all_reduce, reduce, broadcast, reduce_scatter, all_to_all, send, recv: the bytes of the
  buffer a rank passes in (for reduce_scatter the full input, for all_to_all the whole send
  buffer, uneven splits included);
- barrier: 0.
"""

from __future__ import annotations

from dataclasses import dataclass

from chakra_core.convert.pytorch.et import tensor_nbytes, tensors_in
from chakra_core.format.columns import COMM_TYPES

ALL_REDUCE, REDUCE, ALL_GATHER, GATHER, SCATTER, BROADCAST, ALL_TO_ALL, REDUCE_SCATTER, BARRIER = 0, 1, 2, 3, 4, 5, 6, 7, 9
SEND, RECV = "send", "recv"

# Operation names after normalisation (see _canonical) -> CollectiveCommType or SEND/RECV.
KIND_BY_NAME = {
    "allreduce": ALL_REDUCE, "reduce": REDUCE, "allgather": ALL_GATHER, "gather": GATHER,
    "scatter": SCATTER, "broadcast": BROADCAST, "alltoall": ALL_TO_ALL, "alltoallv": ALL_TO_ALL,
    "reducescatter": REDUCE_SCATTER, "barrier": BARRIER, "monitoredbarrier": BARRIER,
    "send": SEND, "recv": RECV, "recvanysource": RECV,
}
# Dtype names of record_param_comms -> bytes per element.
DTYPE_BYTES = {
    "Float": 4, "Double": 8, "Half": 2, "BFloat16": 2, "Long": 8, "Int": 4, "Short": 2, "Char": 1,
    "Byte": 1, "Bool": 1, "ComplexFloat": 8, "ComplexDouble": 16, "Float8_e4m3fn": 1, "Float8_e5m2": 1,
}
NON_COLLECTIVE_NAMES = ("wait", "init", "coalesced", "startcoalescing", "endcoalescing")


def _canonical(name: str) -> str:
    """'c10d::_allgather_base_' -> 'allgather', 'nccl:all_reduce' -> 'allreduce', 'gloo:send' -> 'send'."""
    for prefix in ("c10d::", "nccl:", "gloo:"):
        if name.startswith(prefix):
            name = name[len(prefix):]
    name = name.strip("_").lower()
    for suffix in ("_into_tensor_coalesced", "_into_tensor", "_tensor_coalesced", "_coalesced", "_base", "_tensor",
                   "_single"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return name.replace("_", "")


def kind_of(name: str) -> int | str | None:
    return KIND_BY_NAME.get(_canonical(name))


def kind_label(kind: int | str) -> str:
    """'all_reduce', ..., 'send', 'recv': how reports name a communication kind."""
    return kind if kind in (SEND, RECV) else COMM_TYPES[kind].lower()


@dataclass
class CommOp:
    """What one communication anchor does, from its arguments."""

    kind: int | str  # CollectiveCommType number, SEND or RECV
    size: int  # bytes (see module docstring)
    pg_name: str | None  # the PyTorch process group name, when the trace says
    peer: int | None = None  # p2p: the peer's rank within the group
    tag: int = 0
    root: int | None = None
    blocking: bool | None = None  # the c10d op's async_op flag inverted; None: not recorded
    seq: int | None = None  # record_param_comms sequence number (matched by 'wait' nodes)
    source: str = ""  # which node named the kind: c10d op, record_param_comms, nccl:/gloo:


def _tensor_bytes(value) -> int:
    """Bytes of the tensors in one argument: a tensor, or a (nested) list of tensors."""
    return sum(map(tensor_nbytes, tensors_in([value], [])))


def _bool_args(node: dict) -> list[bool]:
    inputs = node.get("inputs") or {}
    return [v for v, t in zip(inputs.get("values") or [], inputs.get("types") or []) if t == "Bool"]


def _int_args(node: dict) -> list[int]:
    inputs = node.get("inputs") or {}
    return [v for v, t in zip(inputs.get("values") or [], inputs.get("types") or []) if t == "Int"]


def describe_c10d(node: dict) -> CommOp | None:
    """A c10d op's kind and size from its dispatcher arguments (layout per torch 2.x)."""
    kind = kind_of(node["name"])
    if kind is None:
        return None
    values = (node.get("inputs") or {}).get("values") or []
    canonical = node["name"][6:].strip("_")
    arg = lambda i: values[i] if len(values) > i else None  # noqa: E731
    ints = _int_args(node)
    flags = _bool_args(node)
    op = CommOp(kind, 0, None, blocking=(not flags[-1]) if flags else None, source=node["name"])
    if kind in (SEND, RECV):  # ([tensors], pg, peer, tag)
        op.size = _tensor_bytes(arg(0))
        op.peer = arg(2) if type(arg(2)) is int else None
        op.tag = arg(3) if type(arg(3)) is int else 0
    elif kind == ALL_GATHER:  # allgather_(out_lists, in_tensors, ...) / _allgather_base_(out, in, ...)
        op.size = _tensor_bytes(arg(1))
    elif kind == GATHER:  # gather_(out_lists, in_tensors, pg, root, ...)
        op.size = _tensor_bytes(arg(1))
        op.root = ints[0] if ints else None
    elif kind == SCATTER:  # scatter_(out_tensors, in_lists, pg, root, ...): filled in once the group size is known
        op.size = _tensor_bytes(arg(0))
        op.root = ints[0] if ints else None
    elif kind in (REDUCE_SCATTER, ALL_TO_ALL):  # (out, in, ...): the input is the whole buffer
        op.size = _tensor_bytes(arg(1))
    elif kind == BARRIER:
        op.size = 0
    else:  # allreduce_, broadcast_, reduce_: (tensors, pg, ..., root, ...)
        op.size = _tensor_bytes(arg(0))
        if kind in (BROADCAST, REDUCE):
            op.root = ints[0] if ints else None
    if canonical.startswith("recv_any_source"):
        op.peer = None
    return op


def describe_record_param_comms(node: dict) -> CommOp | None:
    """NCCL builds: collective_name, in_msg_nelems, dtype, pg_name are attributes."""
    attrs = node.get("attrs") or {}
    name = str(attrs.get("collective_name") or "")
    if _canonical(name) in NON_COLLECTIVE_NAMES or not name:
        return None
    kind = kind_of(name)
    if kind is None:
        return None
    elem = DTYPE_BYTES.get(str(attrs.get("dtype")), 0)
    in_elems = attrs.get("in_msg_nelems") if type(attrs.get("in_msg_nelems")) is int else 0
    out_elems = attrs.get("out_msg_nelems") if type(attrs.get("out_msg_nelems")) is int else 0
    size = (out_elems if kind == SCATTER else in_elems) * elem
    if kind == BARRIER:
        size = 0
    ints = _int_args(node)
    pg = attrs.get("pg_name")
    return CommOp(kind, size, str(pg) if pg not in (None, "") else None, seq=ints[0] if ints else None,
                  source="record_param_comms")


def wait_sequence(node: dict) -> int | None:
    """The sequence number a `record_param_comms` 'wait' node waits for."""
    attrs = node.get("attrs") or {}
    if _canonical(str(attrs.get("collective_name") or "")) != "wait":
        return None
    ints = _int_args(node)
    return ints[0] if ints else None


def record_param_comms_pg(node: dict) -> str | None:
    pg = (node.get("attrs") or {}).get("pg_name")
    return str(pg) if pg not in (None, "") else None
