"""The protobuf wire format, just enough for chakra_core.format.jsonio's lossless round trip:
cutting a serialized message into its top-level fields, the raw bytes of the fields the schema
does not define (unknown_bytes), and the exact IEEE bits of float/double fields (float_bits).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator

from google.protobuf import descriptor, unknown_fields
from google.protobuf.message import Message

from chakra_core.format.schema import et_def_pb2 as pb

_FD = descriptor.FieldDescriptor
FLOAT_TYPES = {_FD.TYPE_FLOAT: (4, 5), _FD.TYPE_DOUBLE: (8, 1)}  # width in bytes, wire type
_MAX_GROUP_DEPTH = 100

# wire types a known field is parsed from; anything else lands in the unknown fields
_VARINT_TYPES = {_FD.TYPE_INT32, _FD.TYPE_INT64, _FD.TYPE_UINT32, _FD.TYPE_UINT64, _FD.TYPE_SINT32,
                 _FD.TYPE_SINT64, _FD.TYPE_BOOL, _FD.TYPE_ENUM}
_FIXED64_TYPES = {_FD.TYPE_FIXED64, _FD.TYPE_SFIXED64, _FD.TYPE_DOUBLE}
_FIXED32_TYPES = {_FD.TYPE_FIXED32, _FD.TYPE_SFIXED32, _FD.TYPE_FLOAT}


# --------------------------------------------------------------------------------------------
# protobuf wire format, just enough to cut a serialized message into its top-level fields


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise ValueError("truncated varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise ValueError("varint longer than 10 bytes")


def _skip_value(buf: bytes, pos: int, number: int, wire_type: int, depth: int = 0) -> int:
    """The end of the value of field `number` whose tag ends at `pos`."""
    if wire_type == 0:
        _, pos = _read_varint(buf, pos)
    elif wire_type == 1:
        pos += 8
    elif wire_type == 5:
        pos += 4
    elif wire_type == 2:
        length, pos = _read_varint(buf, pos)
        pos += length
    elif wire_type == 3:  # group: fields up to the matching end-group tag
        if depth >= _MAX_GROUP_DEPTH:
            raise ValueError("groups nested too deep")
        while True:
            tag, pos = _read_varint(buf, pos)
            if tag & 7 == 4:
                if tag >> 3 != number:
                    raise ValueError(f"group {number} closed by end-group tag of field {tag >> 3}")
                break
            if tag >> 3 == 0:
                raise ValueError("field number 0")
            pos = _skip_value(buf, pos, tag >> 3, tag & 7, depth + 1)
    else:
        raise ValueError(f"invalid wire type {wire_type} (field {number})")
    if pos > len(buf):
        raise ValueError(f"truncated value of field {number}")
    return pos


def iter_fields(buf: bytes) -> Iterator[tuple[int, int, int, int, int]]:
    """(field number, wire type, start of tag, start of value, end) for each top-level field.

    For a length-delimited field the value starts after its length prefix."""
    pos = 0
    while pos < len(buf):
        start = pos
        tag, pos = _read_varint(buf, pos)
        number, wire_type = tag >> 3, tag & 7
        if number == 0:
            raise ValueError("field number 0")
        end = _skip_value(buf, pos, number, wire_type)
        if wire_type == 2:
            _, pos = _read_varint(buf, pos)
        yield number, wire_type, start, pos, end
        pos = end


def is_schema_field(desc: descriptor.Descriptor, number: int, wire_type: int) -> bool:
    """Whether protobuf parses (number, wire_type) into a known field of `desc` (else: unknown field)."""
    fd = desc.fields_by_number.get(number)
    if fd is None:
        return False
    if fd.type in _VARINT_TYPES:
        expected = 0
    elif fd.type in _FIXED64_TYPES:
        expected = 1
    elif fd.type in _FIXED32_TYPES:
        expected = 5
    elif fd.type == _FD.TYPE_GROUP:
        expected = 3
    else:  # string, bytes, message
        return wire_type == 2
    repeated = fd.is_repeated
    return wire_type == expected or (repeated and wire_type == 2)  # repeated scalars: packed or not


# --------------------------------------------------------------------------------------------
# unknown fields and float bits


def unknown_bytes(msg: Message) -> bytes:
    """The raw wire bytes of the fields of `msg` (this level only) that the schema does not define.

    Taken from the message's own serialization: every top-level field that the schema would
    not parse is copied verbatim, in order. This is robust where the alternatives are not:
    it copies the bytes as protobuf keeps them (no re-encoding from UnknownFieldSet's decoded
    values, which would need its own encoder for varints, fixed ints and nested groups), it
    does not depend on where a serializer puts unknown fields (upb, installed here, puts them
    last, but "the tail after the known fields" would silently break if one did not), and
    it also catches a known field number sent with the wrong wire type, which protobuf keeps as
    an unknown field too. The count is checked against UnknownFieldSet so nothing is dropped
    silently. Sub-messages are not looked into here: each carries its own "_unknown_fields".
    """
    expected = len(unknown_fields.UnknownFieldSet(msg))
    if not expected:
        return b""
    data = msg.SerializeToString()
    desc = msg.DESCRIPTOR
    pieces = [data[start:end] for number, wire_type, start, _, end in iter_fields(data)
              if not is_schema_field(desc, number, wire_type)]
    if len(pieces) != expected:  # cannot happen with a protobuf that follows the wire format
        raise RuntimeError(f"{desc.full_name}: found {len(pieces)} unknown fields, protobuf reports {expected}")
    return b"".join(pieces)


def float_bits(msg: Message, fd: descriptor.FieldDescriptor) -> list[bytes]:
    """The exact IEEE bytes of each value of float/double field `fd`, read from the wire form.

    Needed because the Python value of a float (32-bit) field is a double: a signaling NaN
    comes back quieted, so the value alone does not give the bits that are stored."""
    width, fixed_wire_type = FLOAT_TYPES[fd.type]
    repeated = fd.is_repeated
    data = msg.SerializeToString()
    out: list[bytes] = []
    for number, wire_type, _, value_start, end in iter_fields(data):
        if number != fd.number:
            continue
        if wire_type == fixed_wire_type:
            out.append(data[value_start:end])
        elif wire_type == 2 and repeated:
            out += [data[i:i + width] for i in range(value_start, end, width)]
    return out


@functools.cache
def canonical_nan(field_type: int) -> bytes:
    """The bits json_format's "NaN" becomes in a field of this type."""
    msg = pb.FloatList(values=[math.nan]) if field_type == _FD.TYPE_FLOAT else pb.DoubleList(values=[math.nan])
    return float_bits(msg, msg.DESCRIPTOR.fields_by_name["values"])[0]
