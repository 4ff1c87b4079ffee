"""Test-data builders: Chakra ETs made with the generated protobuf classes.

Everything here builds messages with `chakra_core.format.schema.et_def_pb2` (the reference
encoding, protobuf's own serializer) so that the columnar codec is checked against an
independent implementation of the wire format.
"""

from __future__ import annotations

import math

import fsspec

from chakra_core.format.etfile import encode_varint, write_messages
from chakra_core.format.schema import et_def_pb2 as pb

INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
UINT64_MAX, UINT32_MAX = (1 << 64) - 1, (1 << 32) - 1

# oneof member -> (representative values). Scalars: a list of values; lists: a list of lists.
SCALAR_SAMPLES: dict[str, list] = {
    "double_val": [0.0, -0.0, 1.5, -2.25e300, math.inf, -math.inf, math.nan, 5e-324],
    "float_val": [0.0, 1.5, -3.25, math.inf, -math.inf, math.nan],
    "int32_val": [0, 1, -1, INT32_MIN, INT32_MAX],
    "int64_val": [0, 1, -1, INT64_MIN, INT64_MAX],
    "uint32_val": [0, 1, UINT32_MAX],
    "uint64_val": [0, 1, INT64_MAX, INT64_MAX + 1, UINT64_MAX],
    "sint32_val": [0, -1, 1, INT32_MIN, INT32_MAX],
    "sint64_val": [0, -1, 1, INT64_MIN, INT64_MAX],
    "fixed32_val": [0, 1, UINT32_MAX],
    "fixed64_val": [0, 1, UINT64_MAX],
    "sfixed32_val": [0, -1, INT32_MIN, INT32_MAX],
    "sfixed64_val": [0, -1, INT64_MIN, INT64_MAX],
    "bool_val": [False, True],
    "string_val": ["", "ascii", "non-ascii: äöü ✓ 日本語 🚀", "with\x00nul"],
    "bytes_val": [b"", b"\x00\x01\xff\xfe", bytes(range(256))],
}

LIST_SAMPLES: dict[str, list[list]] = {
    "double_list": [[], [0.0, -1.5, math.inf, -math.inf, math.nan]],
    "float_list": [[], [0.0, 2.5, math.inf, math.nan]],
    "int32_list": [[], [0, -1, INT32_MIN, INT32_MAX]],
    "int64_list": [[], [0, -1, INT64_MIN, INT64_MAX]],
    "uint32_list": [[], [0, 1, UINT32_MAX]],
    "uint64_list": [[], [0, INT64_MAX + 1, UINT64_MAX]],
    "sint32_list": [[], [0, -1, INT32_MIN, INT32_MAX]],
    "sint64_list": [[], [0, -1, INT64_MIN, INT64_MAX]],
    "fixed32_list": [[], [0, UINT32_MAX]],
    "fixed64_list": [[], [0, UINT64_MAX]],
    "sfixed32_list": [[], [-1, INT32_MIN, INT32_MAX]],
    "sfixed64_list": [[], [-1, INT64_MIN, INT64_MAX]],
    "bool_list": [[], [True, False, True]],
    "string_list": [[], ["", "a", "ünïcödé ✓"]],
    "bytes_list": [[], [b"", b"\x00\xff", b"abc"]],
}

ALL_KINDS = tuple(f.name for f in sorted(pb.AttributeProto.DESCRIPTOR.oneofs_by_name["value"].fields,
                                         key=lambda f: f.number))
assert len(ALL_KINDS) == 30 and set(ALL_KINDS) == set(SCALAR_SAMPLES) | set(LIST_SAMPLES)


def attr(name: str, kind: str | None = None, value=None, doc: str = "") -> pb.AttributeProto:
    """An AttributeProto; kind None leaves the oneof unset."""
    a = pb.AttributeProto(name=name)
    if doc:
        a.doc_string = doc
    if kind is None:
        return a
    if kind.endswith("_list"):
        getattr(a, kind).values.extend(value)
        getattr(a, kind).SetInParent()  # an empty list is still a set oneof member
    else:
        setattr(a, kind, value)
    return a


def all_kind_attrs(prefix: str = "x") -> list[pb.AttributeProto]:
    """One attribute per (kind, sample value): every oneof member, zero values, extremes."""
    out = []
    for kind, values in SCALAR_SAMPLES.items():
        for i, v in enumerate(values):
            out.append(attr(f"{prefix}_{kind}_{i}", kind, v))
    for kind, values in LIST_SAMPLES.items():
        for i, v in enumerate(values):
            out.append(attr(f"{prefix}_{kind}_{i}", kind, v))
    return out


def node(id: int = 0, name: str = "", type: int = 0, attrs=(), ctrl_deps=(), data_deps=(), start: int = 0,
         dur: int = 0, inputs: tuple | None = None, outputs: tuple | None = None) -> pb.Node:
    n = pb.Node(id=id, name=name, start_time_micros=start, duration_micros=dur)
    n.type = type  # open enum: unknown numbers are kept
    n.ctrl_deps.extend(ctrl_deps)
    n.data_deps.extend(data_deps)
    if inputs is not None:
        n.inputs.SetInParent()
        n.inputs.values, n.inputs.shapes, n.inputs.types = inputs
    if outputs is not None:
        n.outputs.SetInParent()
        n.outputs.values, n.outputs.shapes, n.outputs.types = outputs
    n.attr.extend(attrs)
    return n


def metadata(version: str = "0.0.4", attrs=()) -> pb.GlobalMetadata:
    m = pb.GlobalMetadata(version=version)
    m.attr.extend(attrs)
    return m


def frame(payload: bytes) -> bytes:
    return encode_varint(len(payload)) + payload


def et_bytes(meta: pb.GlobalMetadata | bytes, nodes) -> bytes:
    """The .et bytes of a metadata message and nodes (messages or already-serialized bytes)."""
    parts = [frame(meta if isinstance(meta, bytes) else meta.SerializeToString())]
    for n in nodes:
        parts.append(frame(n if isinstance(n, bytes) else n.SerializeToString()))
    return b"".join(parts)


def write_et(url: str, meta: pb.GlobalMetadata, nodes) -> bytes:
    """Writes with chakra_core.format.etfile.write_messages; returns the (uncompressed) file bytes."""
    write_messages(str(url), meta, nodes)
    return et_bytes(meta, nodes)


def read_bytes(url) -> bytes:
    with fsspec.open(str(url), "rb", compression="infer") as f:
        return f.read()


def parse_et(data: bytes) -> tuple[pb.GlobalMetadata, list[pb.Node]]:
    """Splits .et bytes with an independent varint reader and parses them with protobuf."""
    msgs = [data[start:start + length] for _, start, length in _frames(data)]
    meta = pb.GlobalMetadata()
    meta.ParseFromString(msgs[0])
    nodes = []
    for m in msgs[1:]:
        n = pb.Node()
        n.ParseFromString(m)
        nodes.append(n)
    return meta, nodes


def _frames(data: bytes) -> list[tuple[int, int, int]]:
    """(prefix offset, payload offset, payload length) of every message, read with an independent varint loop."""
    out = []
    pos = 0
    while pos < len(data):
        prefix = pos
        length = shift = 0
        while True:
            b = data[pos]
            pos += 1
            length |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                break
        out.append((prefix, pos, length))
        pos += length
    assert pos == len(data)
    return out


def frame_offsets(data: bytes) -> list[int]:
    """Byte offset of every message's length prefix (metadata first)."""
    return [prefix for prefix, _, _ in _frames(data)]


def coverage_nodes() -> list[pb.Node]:
    """Nodes that together exercise every shape of the format the table must carry exactly."""
    nodes = [
        # id 0 and every field at its default: an empty message
        node(),
        node(1, "every kind", 4, all_kind_attrs(), ctrl_deps=[0], data_deps=[0, 1 << 63, UINT64_MAX],
             start=UINT64_MAX, dur=1, inputs=("[1, 2]", "[[2], [3]]", "['Tensor(float)']"),
             outputs=("ü", "", "")),
        # empty IOInfo present (an empty submessage on the wire) vs absent
        node(2, "empty io", 4, inputs=("", "", ""), outputs=("", "", "")),
        node(3, "only outputs", 4, outputs=("", "[]", "")),
        # well-known attributes with their usual kinds
        node(4, "coll", 7, [attr("is_cpu_op", "bool_val", False), attr("comm_type", "int64_val", 0),
                            attr("comm_size", "int64_val", 1048576), attr("pg_name", "string_val", "1"),
                            attr("involved_dim", "bool_list", [True, False])]),
        # well-known attributes with other kinds that their column still holds exactly
        node(5, "odd kinds", 5, [attr("comm_type", "sint64_val", 7), attr("comm_src", "int64_val", 3),
                                 attr("comm_dst", "uint32_val", 2), attr("comm_tag", "sfixed32_val", -5),
                                 attr("comm_priority", "fixed64_val", 9), attr("tensor_size", "int32_val", 12),
                                 attr("num_ops", "uint64_val", INT64_MAX), attr("tid", "sint32_val", -2)]),
        # well-known names whose kind or value the typed column cannot hold -> other_attrs
        node(6, "misfits", 4, [attr("is_cpu_op", "int32_val", 1), attr("comm_size", "uint64_val", INT64_MAX + 1),
                               attr("tensor_size", "int64_val", -1), attr("pg_name", "bytes_val", b"\xff"),
                               attr("involved_dim", "int32_list", [1, 0]), attr("comm_type", "double_val", 1.0),
                               attr("num_ops", "int64_list", [1]), attr("op_schema", "string_list", ["a"])]),
        # duplicated well-known attributes (first fills the column, the rest other_attrs), doc strings,
        # attributes with no value member set
        node(7, "dups", 4, [attr("comm_size", "int64_val", 1), attr("comm_size", "int64_val", 2),
                            attr("comm_size", "int32_val", 3), attr("is_cpu_op", "bool_val", True, doc="d"),
                            attr("is_cpu_op", "bool_val", False), attr("no_value"), attr("comm_tag"),
                            attr("documented", "int64_val", 0, doc="some doc ✓"), attr("", "int64_val", 4),
                            attr("only doc", doc="x")]),
        # unknown node types: a future type and a negative number
        node(42, "future type", 42),
        node(43, "negative type", -1),
        node(44, "min type", INT32_MIN),
        # negative int32 everywhere (10-byte varints)
        node(45, "negatives", 4, [attr("comm_src", "int32_val", -1), attr("neg", "int32_val", INT32_MIN),
                                  attr("negl", "int32_list", [-1, -2])]),
    ]
    return nodes


# ------------------------------------------------------------------ hypothesis strategies

WELL_KNOWN_NAMES = ("is_cpu_op", "num_ops", "tensor_size", "tensor_loc", "comm_type", "comm_size", "comm_src",
                    "comm_dst", "comm_tag", "comm_priority", "involved_dim", "pg_name", "op_type", "rf_id",
                    "fw_parent", "seq_id", "scope", "tid", "fw_tid", "stream", "op_schema")


def strategies():
    """Hypothesis strategies for random nodes and metadata (imported lazily: hypothesis is a dev extra)."""
    from hypothesis import strategies as st

    u64 = st.integers(0, UINT64_MAX)
    small_or_big = st.one_of(st.integers(0, 300), u64)
    ranges = {
        "int32": (INT32_MIN, INT32_MAX), "sint32": (INT32_MIN, INT32_MAX), "sfixed32": (INT32_MIN, INT32_MAX),
        "int64": (INT64_MIN, INT64_MAX), "sint64": (INT64_MIN, INT64_MAX), "sfixed64": (INT64_MIN, INT64_MAX),
        "uint32": (0, UINT32_MAX), "fixed32": (0, UINT32_MAX), "uint64": (0, UINT64_MAX), "fixed64": (0, UINT64_MAX),
    }

    def scalar(base: str):
        if base in ranges:
            lo, hi = ranges[base]
            return st.one_of(st.integers(lo, hi), st.sampled_from([lo, hi, 0, -1 if lo < 0 else 1]))
        if base == "double":
            return st.floats(allow_nan=True, allow_infinity=True)
        if base == "float":
            return st.floats(width=32, allow_nan=True, allow_infinity=True)
        if base == "bool":
            return st.booleans()
        if base == "string":
            return st.text(max_size=12)
        return st.binary(max_size=12)

    def value_for(kind: str):
        base = kind.rsplit("_", 1)[0]
        return st.lists(scalar(base), max_size=5) if kind.endswith("_list") else scalar(base)

    names = st.one_of(st.sampled_from(WELL_KNOWN_NAMES), st.text(max_size=8))
    kinds = st.one_of(st.none(), st.sampled_from(ALL_KINDS))
    # well-known names with the kinds their columns usually hold, to make those common
    usual = st.one_of(
        st.tuples(st.sampled_from(["comm_type", "comm_size", "num_ops", "comm_src", "tensor_size", "stream"]),
                  st.sampled_from(["int64_val", "int32_val", "uint64_val", "sint64_val", "fixed32_val"])),
        st.tuples(st.just("is_cpu_op"), st.just("bool_val")),
        st.tuples(st.sampled_from(["pg_name", "op_schema"]), st.just("string_val")),
        st.tuples(st.just("involved_dim"), st.just("bool_list")),
    )

    @st.composite
    def attribute(draw):
        if draw(st.booleans()):
            name, kind = draw(usual)
        else:
            name, kind = draw(names), draw(kinds)
        doc = draw(st.one_of(st.just(""), st.text(max_size=5)))
        return attr(name, kind, None if kind is None else draw(value_for(kind)), doc=doc)

    io = st.one_of(st.none(), st.tuples(st.text(max_size=6), st.text(max_size=6), st.text(max_size=6)))
    types = st.one_of(st.integers(0, 7), st.integers(INT32_MIN, INT32_MAX))
    # unknown fields (numbers 11..2000) appended the way protobuf re-serializes them: after the known ones
    unknown_field = st.one_of(
        st.builds(lambda f, v: encode_varint(f << 3) + encode_varint(v), st.integers(11, 2000), u64),
        st.builds(lambda f, b: encode_varint(f << 3 | 2) + encode_varint(len(b)) + b, st.integers(11, 2000),
                  st.binary(max_size=6)),
        st.builds(lambda f, b: encode_varint(f << 3 | 5) + b, st.integers(11, 2000), st.binary(min_size=4, max_size=4)),
        st.builds(lambda f, b: encode_varint(f << 3 | 1) + b, st.integers(11, 2000), st.binary(min_size=8, max_size=8)),
    )

    @st.composite
    def node_bytes(draw):
        n = node(draw(small_or_big), draw(st.text(max_size=10)), draw(types), draw(st.lists(attribute(), max_size=6)),
                 draw(st.lists(small_or_big, max_size=4)), draw(st.lists(small_or_big, max_size=4)),
                 draw(small_or_big), draw(small_or_big), draw(io), draw(io))
        extra = b"".join(draw(st.lists(unknown_field, max_size=2)))
        return n.SerializeToString() + extra

    meta = st.builds(lambda v, a: metadata(v, a), st.text(max_size=6), st.lists(attribute(), max_size=3))
    return {"attribute": attribute(), "node_bytes": node_bytes(), "metadata": meta}
