"""chakra_core.format.jsonio: ET -> JSON -> ET is byte-identical; the JSON is one readable document."""

from __future__ import annotations

import base64
import json
import struct
import uuid

import fsspec
import pytest
from et_builders import (
    INT32_MIN,
    INT64_MAX,
    INT64_MIN,
    UINT64_MAX,
    all_kind_attrs,
    attr,
    coverage_nodes,
    et_bytes,
    metadata,
    node,
    read_bytes,
)
from google.protobuf import json_format
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chakra_core.errors import ChakraFormatError
from chakra_core.format.etfile import encode_varint
from chakra_core.format.jsonio import (
    et_to_json,
    json_to_et,
    node_from_dict,
    node_to_dict,
)
from chakra_core.format.protowire import iter_fields
from chakra_core.format.schema import et_def_pb2 as pb

FLT_MAX_BITS = b"\xff\xff\x7f\x7f"


def tag(number: int, wire_type: int) -> bytes:
    return encode_varint(number << 3 | wire_type)


def f32(bits: int) -> bytes:
    return bits.to_bytes(4, "little")


def f64(bits: int) -> bytes:
    return bits.to_bytes(8, "little")


def put(url: str, data: bytes) -> None:
    with fsspec.open(url, "wb") as f:
        f.write(data)


def round_trip(src_url: str, work: str, **kw) -> tuple[bytes, dict]:
    """src .et -> JSON -> .et; returns the new .et bytes and the parsed JSON document."""
    json_url, et_url = f"{work}/t.json", f"{work}/t.et"
    n = et_to_json(src_url, json_url, **kw)
    doc = json.loads(read_bytes(json_url).decode("utf-8"))
    assert json_to_et(json_url, et_url) == n == len(doc["nodes"])
    return read_bytes(et_url), doc


def assert_canonical(nodes: list[bytes]) -> None:
    """The source bytes are what protobuf itself re-serializes (so byte identity is a fair demand)."""
    for n in nodes:
        parsed = pb.Node()
        parsed.ParseFromString(n)
        assert parsed.SerializeToString() == n


# --------------------------------------------------------------------------------------------
# special values and unknown fields, built on the wire


def float_attr(name: str, kind: str, bits: list[bytes] | bytes) -> pb.AttributeProto:
    """A float/double attribute with exact bit patterns (the Python setter would quiet a float sNaN)."""
    a = pb.AttributeProto(name=name)
    number = pb.AttributeProto.DESCRIPTOR.fields_by_name[kind].number
    if isinstance(bits, bytes):
        a.MergeFromString(tag(number, 5 if kind == "float_val" else 1) + bits)
    else:
        packed = b"".join(bits)
        getattr(a, kind).MergeFromString(tag(1, 2) + encode_varint(len(packed)) + packed if packed else b"")
        getattr(a, kind).SetInParent()
    return a


NAN_F32 = [0x7FC00000, 0xFFC00000, 0x7F800001, 0x7FC00123, 0xFFFFFFFF]  # canonical, -nan, sNaN, payloads
NAN_F64 = [0x7FF8000000000000, 0xFFF8000000000000, 0x7FF0000000000001, 0x7FF8DEADBEEF0001]


def special_float_attrs() -> list[pb.AttributeProto]:
    out = []
    for b in NAN_F32 + [0x7F800000, 0xFF800000, 0x80000000, 0x00000001, 0x7F7FFFFF, 0xFF7FFFFF]:
        out.append(float_attr(f"f32_{b:08x}", "float_val", f32(b)))
    for b in NAN_F64 + [0x7FF0000000000000, 0xFFF0000000000000, 0x8000000000000000, 1, 0x7FEFFFFFFFFFFFFF]:
        out.append(float_attr(f"f64_{b:016x}", "double_val", f64(b)))
    out.append(float_attr("f32_list", "float_list", [f32(b) for b in NAN_F32] + [FLT_MAX_BITS, f32(0x3FC00000)]))
    out.append(float_attr("f64_list", "double_list", [f64(b) for b in NAN_F64] + [f64(0x3FF8000000000000)]))
    out.append(float_attr("f32_empty", "float_list", []))
    return out


UNKNOWN_NODE_FIELD = b"\x78\x05"  # field 15, varint 5: a field a newer schema might add


def unknown_field_nodes() -> list[bytes]:
    """Serialized nodes carrying fields the schema does not define, at every message level."""
    out = []
    n = node(100, "unknown field", 4, [attr("comm_size", "int64_val", 0)])
    out.append(n.SerializeToString() + UNKNOWN_NODE_FIELD)

    n = node(101, "nested unknowns", 7, inputs=("", "", ""))
    n.MergeFromString(
        UNKNOWN_NODE_FIELD
        + tag(11, 2) + encode_varint(3) + b"new"  # length-delimited
        + tag(12, 1) + f64(0x0123456789ABCDEF)  # fixed64
        + tag(13, 5) + f32(0xDEADBEEF)  # fixed32
        + tag(14, 3) + tag(1, 0) + b"\x01" + tag(14, 4)  # a group
        + tag(1, 2) + encode_varint(2) + b"ab"  # known number (id), wrong wire type
        + tag(536870911, 0) + encode_varint(UINT64_MAX)  # largest field number
    )
    a = n.attr.add(name="future kind")
    a.MergeFromString(tag(33, 0) + b"\x07")  # a 31st oneof member: attribute with an unknown value
    b = n.attr.add(name="known and unknown", int64_val=0)
    b.MergeFromString(tag(40, 2) + encode_varint(0))
    c = n.attr.add(name="list unknown")
    c.int64_list.values.extend([1, -1])
    c.int64_list.MergeFromString(tag(2, 0) + b"\x01")
    n.inputs.MergeFromString(tag(4, 2) + encode_varint(1) + b"x")
    n.outputs.MergeFromString(tag(9, 0) + b"\x00")  # outputs present only through an unknown field
    out.append(n.SerializeToString())
    return out


def coverage_et(url: str) -> bytes:
    nodes = coverage_nodes() + [
        node(200, "specials", 4, special_float_attrs()),
        node(201, "all kinds again", 4, all_kind_attrs("y"), inputs=("", "", "")),
        node(202, "no value attrs", 4, [attr("a"), attr("b", doc="doc only"), attr("")]),
        node(UINT64_MAX, "max", 42, ctrl_deps=[UINT64_MAX, 0], start=UINT64_MAX, dur=UINT64_MAX),
    ]
    nodes = [n.SerializeToString() for n in nodes] + unknown_field_nodes()
    assert_canonical(nodes)
    meta = metadata("0.0.4", [attr("schema", "string_val", "1.1.0-chakra.0.0.4"), attr("n", "int64_val", 0),
                              float_attr("nan", "double_val", f64(0xFFF8000000000000))])
    data = et_bytes(meta, nodes)
    put(url, data)
    return data


# --------------------------------------------------------------------------------------------
# round trips


def test_microbenchmarks_round_trip_byte_identical(microbenchmark_files, tmp_path):
    for path in microbenchmark_files:
        back, doc = round_trip(str(path), str(tmp_path))
        assert back == path.read_bytes(), path
        assert doc["format"] == "chakra-et-json" and doc["format_version"] == 1


@pytest.mark.parametrize("indent", [1, 2, 0, None])
def test_every_kind_special_value_and_unknown_field_round_trips(tmp_path, indent):
    src = str(tmp_path / "src.et")
    data = coverage_et(src)
    back, doc = round_trip(src, str(tmp_path), indent=indent)
    assert back == data


def test_json_shows_what_the_mapping_alone_would_lose(tmp_path):
    src = str(tmp_path / "src.et")
    coverage_et(src)
    _, doc = round_trip(src, str(tmp_path))
    nodes = {n.get("id", "0"): n for n in doc["nodes"]}
    assert nodes["0"] == {}  # the empty node
    assert nodes["2"]["inputs"] == {} and nodes["2"]["outputs"] == {}  # present but empty
    assert "inputs" not in nodes["4"]  # absent
    assert nodes["42"]["type"] == 42 and nodes["43"]["type"] == -1  # unknown enum numbers
    assert {"name": "comm_type", "int64_val": "0"} in nodes["4"]["attr"]  # zero oneof member kept
    assert {"name": "no_value"} in nodes["7"]["attr"]
    assert nodes["1"]["ctrl_deps"] == ["0"] and nodes["1"]["data_deps"][-1] == str(UINT64_MAX)

    unknown = nodes["100"]
    assert base64.b64decode(unknown["_unknown_fields"]) == UNKNOWN_NODE_FIELD
    nested = nodes["101"]
    assert base64.b64decode(nested["attr"][0]["_unknown_fields"]) == b"\x88\x02\x07"
    assert nested["outputs"] == {"_unknown_fields": base64.b64encode(b"\x48\x00").decode()}
    assert "_unknown_fields" in nested["attr"][2]["int64_list"] and "_unknown_fields" in nested["inputs"]

    specials = {a["name"]: a for a in nodes["200"]["attr"]}
    assert specials["f32_7fc00000"]["float_val"] == "NaN"  # the NaN that "NaN" reads back as
    assert specials["f32_ffc00000"]["float_val"] == "NaN:0xffc00000"
    assert specials["f32_7f800001"]["float_val"] == "NaN:0x7f800001"  # signaling NaN, not quieted
    assert specials["f64_7ff8000000000000"]["double_val"] == "NaN"
    assert specials["f64_fff8000000000000"]["double_val"] == "NaN:0xfff8000000000000"
    assert specials["f32_7f800000"]["float_val"] == "Infinity"
    assert specials["f64_fff0000000000000"]["double_val"] == "-Infinity"
    assert specials["f32_7f7fffff"]["float_val"] == struct.unpack("<f", FLT_MAX_BITS)[0]
    assert specials["f32_list"]["float_list"]["values"][:3] == ["NaN", "NaN:0xffc00000", "NaN:0x7f800001"]
    assert specials["f32_empty"] == {"name": "f32_empty", "float_list": {}}
    assert doc["global_metadata"]["attr"][2]["double_val"] == "NaN:0xfff8000000000000"


def test_json_is_one_readable_document_with_schema_names(tmp_path, microbenchmark_files):
    json_path = tmp_path / "t.json"
    et_to_json(str(microbenchmark_files[0]), str(json_path))
    text = json_path.read_text(encoding="utf-8")
    doc = json.loads(text)  # one valid JSON document
    assert list(doc) == ["format", "format_version", "global_metadata", "nodes"]
    assert text.startswith('{\n "format": "chakra-et-json",\n "format_version": 1,\n')
    assert '"nodes": [\n  {\n   "' in text  # indented, one key per line
    assert text.endswith("\n ]\n}\n")

    src = str(tmp_path / "src.et")
    coverage_et(src)
    et_to_json(src, str(json_path), indent=2)
    text = json_path.read_text(encoding="utf-8")
    doc = json.loads(text)
    keys = {k for n in doc["nodes"] for k in n} | {k for n in doc["nodes"] for a in n.get("attr", []) for k in a}
    assert {"ctrl_deps", "data_deps", "start_time_micros", "duration_micros", "int64_val", "bool_list"} <= keys
    assert not {"ctrlDeps", "int64Val"} & keys
    assert "日本語" in text  # non-ASCII written as is, not \u escapes
    assert doc["nodes"][1]["type"] == "COMP_NODE"

    et_to_json(src, str(json_path), indent=None)  # compact: one node per line
    lines = json_path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == len(doc["nodes"]) + 2
    assert json.loads("\n".join(lines)) == doc


def test_no_nodes(tmp_path):
    src = tmp_path / "empty.et"
    src.write_bytes(et_bytes(metadata("1.0.0"), []))
    for indent in (1, None):
        back, doc = round_trip(str(src), str(tmp_path), indent=indent)
        assert back == src.read_bytes() and doc["nodes"] == []
    src.write_bytes(et_bytes(b"", [b""]))  # empty metadata, one empty node
    back, doc = round_trip(str(src), str(tmp_path))
    assert back == src.read_bytes() and doc == {"format": "chakra-et-json", "format_version": 1,
                                               "global_metadata": {}, "nodes": [{}]}


def test_gzip_and_memory_urls(tmp_path, memfs):
    data = coverage_et("memory://in/src.et")
    assert et_to_json("memory://in/src.et", "memory://out/t.json.gz") > 0
    with fsspec.open("memory://out/t.json.gz", "rb") as f:
        assert f.read(2) == b"\x1f\x8b"
    json_to_et("memory://out/t.json.gz", str(tmp_path / "t.et.gz"))
    assert read_bytes(tmp_path / "t.et.gz") == data
    json_to_et("memory://out/t.json.gz", "memory://out/t.et")
    assert read_bytes("memory://out/t.et") == data


def test_node_dict_helpers():
    n = pb.Node()
    n.ParseFromString(node(5, "n", 4, [attr("x", "int64_val", 0), attr("y")], inputs=("", "", "")).SerializeToString()
                      + UNKNOWN_NODE_FIELD)
    d = node_to_dict(n)
    assert d == {"id": "5", "name": "n", "type": "COMP_NODE", "inputs": {},
                 "attr": [{"name": "x", "int64_val": "0"}, {"name": "y"}], "_unknown_fields": "eAU="}
    assert node_from_dict(d).SerializeToString() == n.SerializeToString()
    assert d["_unknown_fields"] == "eAU="  # the caller's dict is not modified
    # plain protobuf JSON (camelCase from MessageToJson) is accepted too
    assert node_from_dict(json.loads(json_format.MessageToJson(n))).SerializeToString() == \
        n.SerializeToString()[:-2]
    with pytest.raises(json_format.ParseError):
        node_from_dict({"attr": [{"name": "x", "int64_val": "1", "bool_val": True}]})  # two oneof members
    with pytest.raises(json_format.ParseError):
        node_from_dict({"idd": 1})


# --------------------------------------------------------------------------------------------
# reference chakra_jsonizer input


def jsonizer_text(meta: pb.GlobalMetadata, nodes) -> str:
    """What mlcommons chakra_jsonizer writes: MessageToJson of each message, back to back."""
    return json_format.MessageToJson(meta) + "".join(json_format.MessageToJson(n) for n in nodes)


def test_reference_jsonizer_output_is_accepted(tmp_path, microbenchmark_files):
    from chakra_core.format.etfile import iter_nodes, read_metadata

    for path in microbenchmark_files[:8]:
        ref = tmp_path / "ref.json"
        ref.write_text(jsonizer_text(read_metadata(str(path)), iter_nodes(str(path))))
        with pytest.raises(json.JSONDecodeError):
            json.loads(ref.read_text())  # not one JSON document
        assert json_to_et(str(ref), str(tmp_path / "ref.et")) >= 1
        assert (tmp_path / "ref.et").read_bytes() == path.read_bytes()

    # every kind, including FLT_MAX that protobuf writes as 3.4028235e+38 and cannot read back itself
    nodes = coverage_nodes() + [node(9, "max", 4, [float_attr("m", "float_val", FLT_MAX_BITS),
                                                   float_attr("l", "float_list", [FLT_MAX_BITS, f32(0xFF7FFFFF)])])]
    meta = metadata("0.0.4", [attr("n", "int64_val", 0)])
    ref = tmp_path / "ref.json"
    text = jsonizer_text(meta, nodes)
    assert "3.4028235e+38" in text and '"int64Val": "0"' in text
    ref.write_text(text)
    assert json_to_et(str(ref), str(tmp_path / "ref.et")) == len(nodes)
    assert (tmp_path / "ref.et").read_bytes() == et_bytes(meta, nodes)

    # whitespace between objects, and a trace with no nodes (the metadata object alone)
    ref.write_text("\n" + json_format.MessageToJson(meta) + "\n\n" + json_format.MessageToJson(nodes[1]) + "\n")
    assert json_to_et(str(ref), str(tmp_path / "ref.et")) == 1
    ref.write_text(json_format.MessageToJson(meta))
    assert json_to_et(str(ref), str(tmp_path / "ref.et")) == 0
    assert (tmp_path / "ref.et").read_bytes() == et_bytes(meta, [])


# --------------------------------------------------------------------------------------------
# bad input


def good_doc() -> dict:
    return {"format": "chakra-et-json", "format_version": 1, "global_metadata": {"version": "0.0.4"},
            "nodes": [{"id": "1", "type": "COMP_NODE"}, {"id": "2"}, {"id": "3"}]}


def convert_error(tmp_path, content: str | dict | list) -> ChakraFormatError:
    src = tmp_path / "bad.json"
    src.write_text(content if isinstance(content, str) else json.dumps(content))
    out = tmp_path / "out.et"
    with pytest.raises(ChakraFormatError) as info:
        json_to_et(str(src), str(out))
    assert str(src) in str(info.value) and info.value.path == str(src)
    assert not out.exists()  # nothing half-written
    return info.value


def with_node(i: int, value) -> dict:
    doc = good_doc()
    doc["nodes"][i] = value
    return doc


@pytest.mark.parametrize("content, fragments", [
    ({**good_doc(), "format": "chakra-et"}, ['"format" is "chakra-et"']),
    ({k: v for k, v in good_doc().items() if k != "format"}, ['"format"']),
    ({**good_doc(), "format_version": 2}, ["format_version"]),
    ({**good_doc(), "format_version": "1"}, ["format_version"]),
    ({**good_doc(), "extra": 1}, ["extra"]),
    ({**good_doc(), "nodes": {}}, ['"nodes"']),
    ({**good_doc(), "global_metadata": {"versionn": "x"}}, ["global_metadata", "versionn"]),
    ({**good_doc(), "global_metadata": {"attr": [{"name": "a", "_unknown_fields": "wAIF"}]}},
     ["global_metadata", "_unknown_fields", "refuse"]),  # ETReader would refuse the .et
    ('{"schema": "1.0.1", "nodes": []}', ['"format"']),  # a PyTorch host trace
    ('{"foo": 1}', ["no \"format\" key", "foo"]),
    ("[1, 2]", ["expected a JSON object"]),
    ('{"format": "chakra-et-json",\n "nodes": [\n', ["invalid JSON", "line 3", "column 1"]),
    ("", ["invalid JSON", "line 1, column 1"]),
    ('{"format": "chakra-et-json", "format": "chakra-et-json"}', ['duplicate key "format"']),
    ('{"version": "x"}{"id": "1"}{"id": "2"} junk', ["invalid JSON in object 3", "line 1"]),
    ('{"versio": "x"}{"id": "1"}', ["first object is not a GlobalMetadata"]),
])
def test_bad_document(tmp_path, content, fragments):
    err = convert_error(tmp_path, content)
    for fragment in fragments:
        assert fragment in err.message


@pytest.mark.parametrize("bad_node, fragment", [
    ({"id": "x1"}, "id"),
    ({"id": "2", "typ": "COMP_NODE"}, "typ"),
    ({"id": "2", "type": "NO_SUCH_NODE"}, "NO_SUCH_NODE"),
    ({"id": "2", "attr": [{"name": "a", "int64_val": "1", "bool_val": True}]}, "oneof"),
    ({"id": "2", "attr": [{"name": "a", "int32_val": 1 << 40}]}, "int32_val"),
    ({"id": "2", "_unknown_fields": "CAE="}, "field 1 is the schema's id"),  # b"\x08\x01" is the id
    ({"id": "2", "_unknown_fields": "eA=="}, "not protobuf wire format"),  # b"\x78": tag without value
    ({"id": "2", "_unknown_fields": "e!A="}, "not base64"),
    ({"id": "2", "_unknown_fields": 5}, "base64 string"),
    ({"id": "2", "attr": [{"name": "a", "double_val": "NaN:0x7ff8"}]}, "16 hex digits"),
    ({"id": "2", "attr": [{"name": "a", "float_val": "NaN:0x3f800000"}]}, "not a NaN"),
    ({"id": "2", "attr": [{"name": "a", "float_val": 1e39}]}, "too large"),
    ([1], "expected a JSON object"),
])
def test_bad_node_names_its_index(tmp_path, bad_node, fragment):
    err = convert_error(tmp_path, with_node(1, bad_node))
    assert err.node_index == 1
    assert err.message.startswith("nodes[1]: ")
    assert fragment in err.message
    if isinstance(bad_node, dict) and bad_node.get("id") == "2":
        assert err.node_id == 2 and "node id 2" in str(err)


def test_bad_node_in_reference_output(tmp_path):
    err = convert_error(tmp_path, '{"version": "x"}\n{"id": "1"}\n{"id": "2", "nam": "y"}')
    assert err.node_index == 1 and "node 1 (JSON object 2)" in err.message and "nam" in err.message


def test_missing_and_non_utf8_input(tmp_path):
    with pytest.raises(ChakraFormatError, match="no such file"):
        json_to_et(str(tmp_path / "missing.json"), str(tmp_path / "x.et"))
    bad = tmp_path / "latin1.json"
    bad.write_bytes(b'{"version": "\xe4"}')
    with pytest.raises(ChakraFormatError, match="UTF-8"):
        json_to_et(str(bad), str(tmp_path / "x.et"))


def test_et_errors_pass_through(tmp_path):
    src = tmp_path / "trunc.et"
    src.write_bytes(et_bytes(metadata(), [node(1, "x", 4)])[:-2])
    with pytest.raises(ChakraFormatError, match="truncated"):
        et_to_json(str(src), str(tmp_path / "x.json"))


def test_wire_helpers_reject_garbage():
    for data in (b"\x08", b"\x0a\x05ab", b"\x00\x00", b"\x0b\x08\x01", b"\x0b\x14", b"\x0f", b"\xff" * 11):
        with pytest.raises(ValueError):
            list(iter_fields(data))
    group = b"\x0b" * 101 + b"\x0c" * 101
    with pytest.raises(ValueError, match="too deep"):
        list(iter_fields(group))


# --------------------------------------------------------------------------------------------
# property: random nodes round-trip byte for byte

KINDS = [f.name for f in pb.AttributeProto.DESCRIPTOR.oneofs_by_name["value"].fields]
INT_RANGES = {
    "int32": (INT32_MIN, (1 << 31) - 1), "sint32": (INT32_MIN, (1 << 31) - 1), "sfixed32": (INT32_MIN, (1 << 31) - 1),
    "int64": (INT64_MIN, INT64_MAX), "sint64": (INT64_MIN, INT64_MAX), "sfixed64": (INT64_MIN, INT64_MAX),
    "uint32": (0, (1 << 32) - 1), "fixed32": (0, (1 << 32) - 1), "uint64": (0, UINT64_MAX), "fixed64": (0, UINT64_MAX),
}
f32_bits = st.one_of(
    st.integers(0, (1 << 32) - 1).map(f32),
    st.floats(width=32).map(lambda v: struct.pack("<f", v)),
    st.sampled_from([f32(b) for b in NAN_F32] + [FLT_MAX_BITS, f32(0xFF7FFFFF), f32(0x80000000)]),
)
f64_bits = st.one_of(
    st.integers(0, (1 << 64) - 1).map(f64),
    st.floats().map(lambda v: struct.pack("<d", v)),
    st.sampled_from([f64(b) for b in NAN_F64]),
)


def scalar_strategy(base: str):
    if base in INT_RANGES:
        return st.integers(*INT_RANGES[base])
    return {"float": f32_bits, "double": f64_bits, "bool": st.booleans(), "string": st.text(max_size=8),
            "bytes": st.binary(max_size=8)}[base]


def unknown_fields_strategy(first_free: int):
    number = st.integers(first_free, 5000)

    def one(draw_number, kind, value):
        if kind == 0:
            return tag(draw_number, 0) + encode_varint(value % (1 << 64))
        if kind == 1:
            return tag(draw_number, 1) + f64(value % (1 << 64))
        if kind == 5:
            return tag(draw_number, 5) + f32(value % (1 << 32))
        if kind == 2:
            payload = value.to_bytes(3, "little", signed=False) if value < (1 << 24) else b""
            return tag(draw_number, 2) + encode_varint(len(payload)) + payload
        return tag(draw_number, 3) + tag(1, 0) + encode_varint(value % 128) + tag(draw_number, 4)

    field = st.builds(one, number, st.sampled_from([0, 1, 2, 3, 5]), st.integers(0, UINT64_MAX))
    return st.lists(field, max_size=3).map(b"".join)


@st.composite
def attribute(draw) -> pb.AttributeProto:
    a = pb.AttributeProto(name=draw(st.text(max_size=6)))
    if draw(st.booleans()):
        a.doc_string = draw(st.text(max_size=6))
    kind = draw(st.sampled_from(KINDS + [None]))
    if kind is not None:
        base = kind.rsplit("_", 1)[0]
        number = pb.AttributeProto.DESCRIPTOR.fields_by_name[kind].number
        if kind.endswith("_list"):
            values = draw(st.lists(scalar_strategy(base), max_size=4))
            lst = getattr(a, kind)
            if base in ("float", "double"):
                packed = b"".join(values)
                if packed:
                    lst.MergeFromString(tag(1, 2) + encode_varint(len(packed)) + packed)
            else:
                lst.values.extend(values)
            lst.SetInParent()
            lst.MergeFromString(draw(unknown_fields_strategy(2)))
        elif base in ("float", "double"):
            a.MergeFromString(tag(number, 5 if base == "float" else 1) + draw(scalar_strategy(base)))
        else:
            setattr(a, kind, draw(scalar_strategy(base)))
    a.MergeFromString(draw(unknown_fields_strategy(33)))
    return a


@st.composite
def random_node(draw) -> bytes:
    n = pb.Node(id=draw(st.integers(0, UINT64_MAX)), name=draw(st.text(max_size=8)),
                start_time_micros=draw(st.integers(0, UINT64_MAX)), duration_micros=draw(st.integers(0, UINT64_MAX)))
    n.type = draw(st.integers(INT32_MIN, (1 << 31) - 1) | st.integers(0, 8))
    n.ctrl_deps.extend(draw(st.lists(st.integers(0, UINT64_MAX), max_size=3)))
    n.data_deps.extend(draw(st.lists(st.integers(0, UINT64_MAX), max_size=3)))
    for io in ("inputs", "outputs"):
        if draw(st.booleans()):
            msg = getattr(n, io)
            msg.SetInParent()
            msg.values, msg.shapes, msg.types = (draw(st.text(max_size=4)) for _ in range(3))
            msg.MergeFromString(draw(unknown_fields_strategy(4)))
    n.attr.extend(draw(st.lists(attribute(), max_size=4)))
    n.MergeFromString(draw(unknown_fields_strategy(11)))
    return n.SerializeToString()


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nodes=st.lists(random_node(), max_size=3), meta_attrs=st.lists(attribute().map(
    lambda a: (a.DiscardUnknownFields(), a)[1]), max_size=2), indent=st.sampled_from([1, None]))
def test_random_nodes_round_trip_byte_identical(nodes, meta_attrs, indent):
    base = f"memory://jsonio-prop-{uuid.uuid4().hex}"
    fs = fsspec.filesystem("memory")
    try:
        data = et_bytes(metadata("v", meta_attrs), nodes)
        put(f"{base}/src.et", data)
        back, _ = round_trip(f"{base}/src.et", base, indent=indent)
        assert back == data
    finally:
        fs.rm(base, recursive=True)
