"""The columnar node table: its Arrow schema and the well-known attributes.

One row per Chakra ET node. Node fields are typed columns; attributes that every consumer
asks for (comm_type, comm_size, ...) get a typed column of their own; every other attribute
is kept, with its protobuf value kind, in `other_attrs`. `attr_layout` remembers the order
and value kind of each node's attributes so that ET -> table -> ET is byte-identical; a
table built by hand may leave it null and gets the canonical order and the portable kinds
that both ASTRA-sim feeders read (docs/format.md, 'Well-known attributes').
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

import pyarrow as pa
import pyarrow.compute as pc

from chakra_core.format.nodetypes import NODE_TYPE_VALUES, NODE_TYPES  # noqa: F401  (re-exported)
from chakra_core.format.schema import et_def_pb2 as pb

# AttributeProto oneof members, in field-number order (field 3 .. 32).
VALUE_KINDS: tuple[str, ...] = tuple(
    f.name for f in sorted(pb.AttributeProto.DESCRIPTOR.oneofs_by_name["value"].fields, key=lambda f: f.number)
)
KIND_FIELD: dict[str, int] = {name: i + 3 for i, name in enumerate(VALUE_KINDS)}

COMM_TYPES: dict[int, str] = {v.number: v.name for v in pb.CollectiveCommType.DESCRIPTOR.values}


class ValueClass(IntEnum):
    """How a well-known attribute is typed in its column (mirrored in _native/etcodec.c)."""

    BOOL = 0  # bool column; only bool_val values
    INT = 1  # int64 column; any integer kind whose value fits int64
    UINT = 2  # uint64 column; any integer kind whose value is >= 0
    STRING = 3  # string column; only string_val values
    BOOL_LIST = 4  # list<bool> column; only bool_list values


ARROW_TYPE_OF_CLASS = {
    ValueClass.BOOL: pa.bool_(),
    ValueClass.INT: pa.int64(),
    ValueClass.UINT: pa.uint64(),
    ValueClass.STRING: pa.string(),
    ValueClass.BOOL_LIST: pa.list_(pa.bool_()),
}


@dataclass(frozen=True)
class WellKnownAttribute:
    name: str
    value_class: ValueClass
    default_kind: str  # the value kind written when the table does not record one
    description: str


WELL_KNOWN_ATTRIBUTES: tuple[WellKnownAttribute, ...] = (
    WellKnownAttribute("is_cpu_op", ValueClass.BOOL, "bool_val", "the node runs on the host CPU, not the NPU"),
    WellKnownAttribute("num_ops", ValueClass.INT, "int64_val", "operation count of a compute node (roofline model)"),
    WellKnownAttribute("tensor_size", ValueClass.UINT, "uint64_val", "bytes touched by a compute or memory node"),
    WellKnownAttribute("tensor_loc", ValueClass.INT, "int64_val", "memory location of a memory node (legacy)"),
    WellKnownAttribute("comm_type", ValueClass.INT, "int64_val", "CollectiveCommType of a collective node"),
    WellKnownAttribute("comm_size", ValueClass.INT, "int64_val", "bytes of a communication node"),
    WellKnownAttribute("comm_src", ValueClass.INT, "int32_val", "sending rank of a send/recv node"),
    WellKnownAttribute("comm_dst", ValueClass.INT, "int32_val", "receiving rank of a send/recv node"),
    WellKnownAttribute("comm_tag", ValueClass.INT, "int32_val", "tag matching a send with its recv"),
    WellKnownAttribute("comm_priority", ValueClass.INT, "int32_val", "scheduling priority of a communication node"),
    WellKnownAttribute("involved_dim", ValueClass.BOOL_LIST, "bool_list", "network dimensions a collective spans"),
    WellKnownAttribute("pg_name", ValueClass.STRING, "string_val", "process group (communicator) of a comm node"),
    WellKnownAttribute("op_type", ValueClass.STRING, "string_val", "operator class of a compute node"),
    WellKnownAttribute("rf_id", ValueClass.INT, "int64_val", "PyTorch record-function id"),
    WellKnownAttribute("fw_parent", ValueClass.INT, "int64_val", "PyTorch forward parent id"),
    WellKnownAttribute("seq_id", ValueClass.INT, "int64_val", "PyTorch autograd sequence number"),
    WellKnownAttribute("scope", ValueClass.INT, "int64_val", "PyTorch record scope"),
    WellKnownAttribute("tid", ValueClass.INT, "int64_val", "PyTorch thread id"),
    WellKnownAttribute("fw_tid", ValueClass.INT, "int64_val", "PyTorch forward thread id"),
    WellKnownAttribute("stream", ValueClass.INT, "int64_val", "device stream of a GPU operation"),
    WellKnownAttribute("duration_ns", ValueClass.INT, "int64_val",
                       "duration in ns, where the source timed finer than duration_micros (device work from Kineto)"),
    WellKnownAttribute("children", ValueClass.INT, "int64_val",
                       "host operators recorded directly inside a host operator (the profiler's records of them "
                       "sit in its own time; docs/gpu.md)"),
    WellKnownAttribute("launch_calls", ValueClass.INT, "int64_val",
                       "runtime calls that launched a host operator's device work, where fewer than the work "
                       "(a CUDA graph's replay)"),
    WellKnownAttribute("op_schema", ValueClass.STRING, "string_val", "PyTorch operator schema"),
)
WELL_KNOWN_BY_NAME = {a.name: a for a in WELL_KNOWN_ATTRIBUTES}

IO_INFO_TYPE = pa.struct([("values", pa.string()), ("shapes", pa.string()), ("types", pa.string())])

# One entry of other_attrs: `kind` names the oneof member; exactly the matching value
# field is non-null (integers of every signed kind share `int`, unsigned kinds `uint`).
OTHER_ATTR_TYPE = pa.struct(
    [
        ("name", pa.string()),
        ("kind", pa.dictionary(pa.int8(), pa.string())),
        ("doc_string", pa.string()),
        ("int", pa.int64()),
        ("uint", pa.uint64()),
        ("double", pa.float64()),
        ("float", pa.float32()),
        ("bool", pa.bool_()),
        ("string", pa.string()),
        ("bytes", pa.binary()),
        ("int_list", pa.list_(pa.int64())),
        ("uint_list", pa.list_(pa.uint64())),
        ("double_list", pa.list_(pa.float64())),
        ("float_list", pa.list_(pa.float32())),
        ("bool_list", pa.list_(pa.bool_())),
        ("string_list", pa.list_(pa.string())),
        ("bytes_list", pa.list_(pa.binary())),
    ]
)
LIST_VALUE_FIELDS = ("int_list", "uint_list", "double_list", "float_list", "bool_list", "string_list", "bytes_list")


def _field(name: str, type_: pa.DataType, description: str, nullable: bool = True) -> pa.Field:
    return pa.field(name, type_, nullable=nullable, metadata={"description": description})


NODE_FIELDS: tuple[pa.Field, ...] = (
    _field("id", pa.uint64(), "node id, unique within one rank's trace", nullable=False),
    _field("name", pa.string(), "node name", nullable=False),
    _field("type", pa.int32(), "NodeType number (4 = COMP_NODE, 7 = COMM_COLL_NODE, ...)", nullable=False),
    _field("ctrl_deps", pa.list_(pa.uint64()), "ids of control-dependency parents", nullable=False),
    _field("data_deps", pa.list_(pa.uint64()), "ids of data-dependency parents", nullable=False),
    _field("start_time_micros", pa.uint64(), "start time in microseconds (0 = not recorded)", nullable=False),
    _field("duration_micros", pa.uint64(), "duration in microseconds (0 = not recorded)", nullable=False),
    _field("inputs", IO_INFO_TYPE, "input tensors as text (null = not recorded)"),
    _field("outputs", IO_INFO_TYPE, "output tensors as text (null = not recorded)"),
)
ATTRIBUTE_FIELDS: tuple[pa.Field, ...] = tuple(
    _field(a.name, ARROW_TYPE_OF_CLASS[a.value_class], f"attribute {a.name}: {a.description} (null = absent)")
    for a in WELL_KNOWN_ATTRIBUTES
)
TRAILING_FIELDS: tuple[pa.Field, ...] = (
    _field("other_attrs", pa.list_(OTHER_ATTR_TYPE), "every other attribute, in order, with its value kind",
           nullable=False),
    _field("attr_layout", pa.list_(pa.uint16()),
           "order and value kind of the node's attributes as read ((slot << 5) | (kind field - 3), slot 0 ="
           " next other_attrs entry, slot k = k-th well-known column); null = canonical order"),
    _field("unknown_fields", pa.binary(), "raw bytes of node fields this schema does not define (null = none)"),
)

NODE_SCHEMA = pa.schema(NODE_FIELDS + ATTRIBUTE_FIELDS + TRAILING_FIELDS)


def device_compute(table: pa.Table) -> pa.ChunkedArray:
    """Per row, whether it is compute on the NPU (a COMP_NODE whose is_cpu_op is not true): the
    kernels, copies and memsets of a converted GPU trace."""
    return pc.and_(pc.equal(table.column("type"), pb.COMP_NODE),
                   pc.invert(pc.fill_null(table.column("is_cpu_op"), False)))
