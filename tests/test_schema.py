"""The schema: generated code matches et_def.proto, and both match the format facts.

The expectations below are written out from the published Chakra schema (docs/format.md; not
derived from the .proto), and are checked against two descriptors: the committed et_def_pb2.py, and
a fresh protoc run on et_def.proto. So a wrong .proto fails here even after regenerating.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2

from chakra_core.format.schema import et_def_pb2 as pb
from chakra_core.format.schema import regenerate

F = descriptor_pb2.FieldDescriptorProto
OPT, REP = F.LABEL_OPTIONAL, F.LABEL_REPEATED

PACKAGE = "ChakraProtoMsg"

# --- messages -> {field name: (number, type, label, message/enum type or None)}
MESSAGES: dict[str, dict[str, tuple]] = {
    "GlobalMetadata": {
        "version": (1, F.TYPE_STRING, OPT, None),
        "attr": (2, F.TYPE_MESSAGE, REP, "AttributeProto"),
    },
    "Node": {
        "id": (1, F.TYPE_UINT64, OPT, None),
        "name": (2, F.TYPE_STRING, OPT, None),
        "type": (3, F.TYPE_ENUM, OPT, "NodeType"),
        "ctrl_deps": (4, F.TYPE_UINT64, REP, None),
        "data_deps": (5, F.TYPE_UINT64, REP, None),
        "start_time_micros": (6, F.TYPE_UINT64, OPT, None),
        "duration_micros": (7, F.TYPE_UINT64, OPT, None),
        "inputs": (8, F.TYPE_MESSAGE, OPT, "IOInfo"),
        "outputs": (9, F.TYPE_MESSAGE, OPT, "IOInfo"),
        "attr": (10, F.TYPE_MESSAGE, REP, "AttributeProto"),
    },
    "IOInfo": {
        "values": (1, F.TYPE_STRING, OPT, None),
        "shapes": (2, F.TYPE_STRING, OPT, None),
        "types": (3, F.TYPE_STRING, OPT, None),
    },
    "Tensor": {
        "tensor_id": (1, F.TYPE_UINT64, OPT, None),
        "storage_id": (2, F.TYPE_UINT64, OPT, None),
        "offset": (3, F.TYPE_UINT64, OPT, None),
        "num_elem": (4, F.TYPE_UINT64, OPT, None),
        "elem_bytes": (5, F.TYPE_UINT64, OPT, None),
        "device": (6, F.TYPE_STRING, OPT, None),
    },
}

# --- 2.2: the AttributeProto oneof `value`: number -> (member, scalar type or list message)
ONEOF_VALUE: dict[int, tuple[str, int | str]] = {
    3: ("double_val", F.TYPE_DOUBLE), 4: ("double_list", "DoubleList"),
    5: ("float_val", F.TYPE_FLOAT), 6: ("float_list", "FloatList"),
    7: ("int32_val", F.TYPE_INT32), 8: ("int32_list", "Int32List"),
    9: ("int64_val", F.TYPE_INT64), 10: ("int64_list", "Int64List"),
    11: ("uint32_val", F.TYPE_UINT32), 12: ("uint32_list", "Uint32List"),
    13: ("uint64_val", F.TYPE_UINT64), 14: ("uint64_list", "Uint64List"),
    15: ("sint32_val", F.TYPE_SINT32), 16: ("sint32_list", "Sint32List"),
    17: ("sint64_val", F.TYPE_SINT64), 18: ("sint64_list", "Sint64List"),
    19: ("fixed32_val", F.TYPE_FIXED32), 20: ("fixed32_list", "Fixed32List"),
    21: ("fixed64_val", F.TYPE_FIXED64), 22: ("fixed64_list", "Fixed64List"),
    23: ("sfixed32_val", F.TYPE_SFIXED32), 24: ("sfixed32_list", "Sfixed32List"),
    25: ("sfixed64_val", F.TYPE_SFIXED64), 26: ("sfixed64_list", "Sfixed64List"),
    27: ("bool_val", F.TYPE_BOOL), 28: ("bool_list", "BoolList"),
    29: ("string_val", F.TYPE_STRING), 30: ("string_list", "StringList"),
    31: ("bytes_val", F.TYPE_BYTES), 32: ("bytes_list", "BytesList"),
}

# The 15 list messages: each `repeated <T> values = 1`.
LIST_MESSAGES: dict[str, int] = {
    "DoubleList": F.TYPE_DOUBLE, "FloatList": F.TYPE_FLOAT, "Int32List": F.TYPE_INT32,
    "Int64List": F.TYPE_INT64, "Uint32List": F.TYPE_UINT32, "Uint64List": F.TYPE_UINT64,
    "Sint32List": F.TYPE_SINT32, "Sint64List": F.TYPE_SINT64, "Fixed32List": F.TYPE_FIXED32,
    "Fixed64List": F.TYPE_FIXED64, "Sfixed32List": F.TYPE_SFIXED32, "Sfixed64List": F.TYPE_SFIXED64,
    "BoolList": F.TYPE_BOOL, "StringList": F.TYPE_STRING, "BytesList": F.TYPE_BYTES,
}

# --- 2.3: enums
ENUMS: dict[str, dict[str, int]] = {
    "NodeType": {
        "INVALID_NODE": 0, "METADATA_NODE": 1, "MEM_LOAD_NODE": 2, "MEM_STORE_NODE": 3,
        "COMP_NODE": 4, "COMM_SEND_NODE": 5, "COMM_RECV_NODE": 6, "COMM_COLL_NODE": 7,
    },
    "CollectiveCommType": {
        "ALL_REDUCE": 0, "REDUCE": 1, "ALL_GATHER": 2, "GATHER": 3, "SCATTER": 4, "BROADCAST": 5,
        "ALL_TO_ALL": 6, "REDUCE_SCATTER": 7, "REDUCE_SCATTER_BLOCK": 8, "BARRIER": 9,
    },
}


def _committed_descriptor() -> descriptor_pb2.FileDescriptorProto:
    fdp = descriptor_pb2.FileDescriptorProto()
    pb.DESCRIPTOR.CopyToProto(fdp)
    return fdp


def _fresh_descriptor(tmp_path: Path) -> descriptor_pb2.FileDescriptorProto:
    """et_def.proto compiled now by protoc (grpcio-tools), independent of the committed code."""
    from grpc_tools import protoc
    out = tmp_path / "et_def.desc"
    rc = protoc.main(["protoc", f"--proto_path={regenerate.SCHEMA_DIR}", f"--descriptor_set_out={out}",
                      str(regenerate.SCHEMA_DIR / regenerate.PROTO_NAME)])
    assert rc == 0
    fds = descriptor_pb2.FileDescriptorSet()
    fds.ParseFromString(out.read_bytes())
    (fdp,) = fds.file
    return fdp


@pytest.fixture(params=["committed_pb2", "fresh_protoc"])
def file_descriptor(request, tmp_path) -> descriptor_pb2.FileDescriptorProto:
    return _committed_descriptor() if request.param == "committed_pb2" else _fresh_descriptor(tmp_path)


def _type_name(name: str) -> str:
    return f".{PACKAGE}.{name}"


def _check_field(field: F, number: int, type_: int, label: int, ref: str | None) -> None:
    assert (field.number, field.type, field.label) == (number, type_, label), field.name
    assert field.type_name == (_type_name(ref) if ref else ""), field.name
    assert not field.proto3_optional, field.name
    assert not field.HasField("default_value"), field.name
    # proto3 repeated scalars are packed by default; nothing may switch that off
    assert not (field.HasField("options") and field.options.HasField("packed") and not field.options.packed)


def test_generated_code_is_current():
    assert regenerate.stale_files() == []


def test_regenerate_check_cli():
    proc = subprocess.run([sys.executable, "-m", "chakra_core.format.schema.regenerate", "--check"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_file_level(file_descriptor):
    assert file_descriptor.syntax == "proto3"
    assert file_descriptor.package == PACKAGE
    expected_messages = set(MESSAGES) | set(LIST_MESSAGES) | {"AttributeProto"}
    assert {m.name for m in file_descriptor.message_type} == expected_messages
    assert {e.name for e in file_descriptor.enum_type} == set(ENUMS)
    assert not file_descriptor.extension and not file_descriptor.service


def test_messages(file_descriptor):
    by_name = {m.name: m for m in file_descriptor.message_type}
    for message, fields in MESSAGES.items():
        desc = by_name[message]
        assert {f.name for f in desc.field} == set(fields), message
        assert not desc.oneof_decl and not desc.nested_type and not desc.enum_type, message
        for f in desc.field:
            _check_field(f, *fields[f.name])


def test_list_messages(file_descriptor):
    by_name = {m.name: m for m in file_descriptor.message_type}
    for message, scalar in LIST_MESSAGES.items():
        (field,) = by_name[message].field
        assert field.name == "values"
        _check_field(field, 1, scalar, REP, None)


def test_attribute_proto(file_descriptor):
    desc = next(m for m in file_descriptor.message_type if m.name == "AttributeProto")
    assert [o.name for o in desc.oneof_decl] == ["value"]
    fields = {f.number: f for f in desc.field}
    assert set(fields) == {1, 2} | set(ONEOF_VALUE)
    _check_field(fields[1], 1, F.TYPE_STRING, OPT, None)
    assert fields[1].name == "name" and not fields[1].HasField("oneof_index")
    _check_field(fields[2], 2, F.TYPE_STRING, OPT, None)
    assert fields[2].name == "doc_string" and not fields[2].HasField("oneof_index")
    for number, (member, value_type) in ONEOF_VALUE.items():
        field = fields[number]
        assert field.name == member
        assert field.HasField("oneof_index") and field.oneof_index == 0, member
        if isinstance(value_type, str):
            _check_field(field, number, F.TYPE_MESSAGE, OPT, value_type)
        else:
            _check_field(field, number, value_type, OPT, None)


def test_enums(file_descriptor):
    by_name = {e.name: e for e in file_descriptor.enum_type}
    for enum, values in ENUMS.items():
        assert {v.name: v.number for v in by_name[enum].value} == values, enum


def test_runtime_classes_agree():
    """The classes the library uses at run time are the checked ones (no stale import path)."""
    assert pb.DESCRIPTOR.package == PACKAGE
    assert pb.Node.DESCRIPTOR.fields_by_name["attr"].message_type is pb.AttributeProto.DESCRIPTOR
    assert pb.NodeType.Value("COMM_COLL_NODE") == 7
    assert pb.CollectiveCommType.Value("BARRIER") == 9
    oneof = pb.AttributeProto.DESCRIPTOR.oneofs_by_name["value"]
    assert {f.number: f.name for f in oneof.fields} == {n: m for n, (m, _) in ONEOF_VALUE.items()}


def test_oneof_zero_value_is_on_the_wire():
    """Fact 1.1: the oneof has presence, so comm_type = ALL_REDUCE (0) is encoded as 48 00."""
    a = pb.AttributeProto(name="comm_type", int64_val=0)
    assert a.SerializeToString() == b"\x0a\x09comm_type\x48\x00"
