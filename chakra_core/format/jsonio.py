"""Chakra ET <-> JSON, human readable and lossless both ways.

    et_to_json("trace.0.et", "trace.0.json")      # -> node count
    json_to_et("trace.0.json", "copy.0.et")       # -> node count; copy.0.et == trace.0.et, byte for byte

The JSON is ONE document (the reference `chakra_jsonizer` writes concatenated objects, which
is not valid JSON):

    {
     "format": "chakra-et-json",
     "format_version": 1,
     "global_metadata": {"version": "0.0.4"},
     "nodes": [
      {"id": "1", "name": "all_reduce", "type": "COMM_COLL_NODE",
       "attr": [{"name": "comm_type", "int64_val": "0"}, ...]},
      ...
     ]
    }

Each message is written with protobuf's canonical JSON mapping
(`json_format.MessageToDict(preserving_proto_field_name=True)`): keys are the schema's field
names (`ctrl_deps`, `int64_val`), enums are names (`"COMP_NODE"`; a number the schema does not
name stays a number, e.g. `42`), 64-bit integers are strings, bytes are base64, float specials
are "NaN" / "Infinity" / "-Infinity". Fields at their proto3 default are left out; fields with
presence (the attribute `value` oneof, `inputs` / `outputs`) are written whenever set, so an
`int64_val` of 0 and an empty-but-present `inputs: {}` survive.

Where the mapping alone would lose information, a few extensions keep the round trip exact
(all of them only appear when needed, so ordinary files read like plain protobuf JSON):

- `"_unknown_fields": "<base64>"` in any message object: the raw wire bytes of fields the
  schema does not define (written by a newer schema), re-appended on the way back.
- `"NaN:0x<hex>"` for a float/double NaN whose bit pattern is not the one that "NaN" parses
  to (e.g. the negative "default NaN" x86 produces, or a NaN with a payload); the hex is the
  IEEE bits at the field's width (8 digits for float, 16 for double).
- a float (32-bit) field holding +-FLT_MAX is written as the exact double (3.4028234663852886e+38)
  rather than protobuf's shortest form 3.4028235e+38, which protobuf's own ParseDict rejects as
  "Float value too large"; on input such a value is rounded to float32 instead of refused.

Byte identity: ET -> JSON -> ET reproduces the file exactly when its messages are encoded the
way protobuf serializers encode them (field order, packed repeated fields, defaults omitted),
which is what every Chakra writer produces. A hand-made, non-canonical encoding (unpacked
repeated fields, explicit zero scalars, duplicated fields) comes back canonical: same messages,
different bytes; reading it with any protobuf library normalizes it the same way.

Input (`json_to_et`): the document above ("global_metadata" may be left out: empty), or the
reference `chakra_jsonizer` form: concatenated `MessageToJson` objects, first the
GlobalMetadata, then each Node, lowerCamelCase keys (both key styles are accepted either way).
Bad input raises ChakraFormatError naming the file and, for a node, its index.

`node_to_dict` / `node_from_dict` (and `message_to_dict` / `message_from_dict` for any schema
message) are the per-message conversions the files are made of.
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
import math
import re
import struct
from typing import Any

from google.protobuf import descriptor, json_format, unknown_fields
from google.protobuf.message import DecodeError, Message

from chakra_core.errors import ChakraFormatError
from chakra_core.format.etfile import ETReader, encode_varint, iter_nodes, open_binary
from chakra_core.format.protowire import (
    FLOAT_TYPES,
    canonical_nan,
    float_bits,
    is_schema_field,
    iter_fields,
    unknown_bytes,
)
from chakra_core.format.schema import et_def_pb2 as pb

FORMAT = "chakra-et-json"
FORMAT_VERSION = 1
UNKNOWN_FIELDS_KEY = "_unknown_fields"
_TOP_KEYS = ("format", "format_version", "global_metadata", "nodes")

_FD = descriptor.FieldDescriptor
_FLOAT_MAX = struct.unpack("<f", b"\xff\xff\x7f\x7f")[0]
_NAN_RE = re.compile(r"NaN:0x([0-9a-fA-F]+)\Z")


@functools.cache
def _fields_by_key(desc: descriptor.Descriptor) -> dict[str, descriptor.FieldDescriptor]:
    """Field descriptors by schema name and by lowerCamelCase JSON name (both are accepted)."""
    out = {fd.json_name: fd for fd in desc.fields}
    out.update({fd.name: fd for fd in desc.fields})
    return out


# --------------------------------------------------------------------------------------------
# message -> dict


def message_to_dict(msg: Message) -> dict[str, Any]:
    """The JSON object of any schema message (see the module docstring for the format)."""
    d = json_format.MessageToDict(msg, preserving_proto_field_name=True)
    _annotate(msg, d)
    return d


def node_to_dict(node: pb.Node) -> dict[str, Any]:
    """The JSON object of one Node: protobuf JSON mapping with schema field names, lossless."""
    return message_to_dict(node)


def _annotate(msg: Message, d: dict[str, Any]) -> None:
    """Adds to MessageToDict's output what the JSON mapping loses (unknown fields, NaN bits, FLT_MAX)."""
    for fd, value in msg.ListFields():
        if fd.type == _FD.TYPE_MESSAGE:
            if fd.is_repeated:
                for sub, sub_d in zip(value, d[fd.name], strict=True):
                    _annotate(sub, sub_d)
            else:
                _annotate(value, d[fd.name])
        elif fd.type in FLOAT_TYPES:
            _annotate_floats(msg, fd, value, d)
    raw = unknown_bytes(msg)
    if raw:
        d[UNKNOWN_FIELDS_KEY] = base64.b64encode(raw).decode("ascii")


def _annotate_floats(msg: Message, fd: descriptor.FieldDescriptor, value: Any, d: dict[str, Any]) -> None:
    repeated = fd.is_repeated
    values = list(value) if repeated else [value]
    is_float32 = fd.type == _FD.TYPE_FLOAT
    if not any(math.isnan(v) or (is_float32 and abs(v) == _FLOAT_MAX) for v in values):
        return
    bits = float_bits(msg, fd)
    if len(bits) != len(values):
        raise RuntimeError(f"{msg.DESCRIPTOR.full_name}.{fd.name}: {len(bits)} encoded values for {len(values)}")
    out = list(d[fd.name]) if repeated else [d[fd.name]]
    for i, v in enumerate(values):
        if math.isnan(v):
            if bits[i] != canonical_nan(fd.type):
                out[i] = f"NaN:0x{int.from_bytes(bits[i], 'little'):0{2 * len(bits[i])}x}"
        elif is_float32 and abs(v) == _FLOAT_MAX:
            out[i] = v  # the exact value; MessageToDict's 3.4028235e+38 is refused by ParseDict
    if repeated:
        d[fd.name] = out
    else:
        d[fd.name] = out[0]


# --------------------------------------------------------------------------------------------
# dict -> message


def message_from_dict(d: Any, cls: type[Message]) -> Message:
    """A schema message from its JSON object (ours, or plain protobuf JSON with either key style).

    Raises json_format.ParseError on anything that is not a valid object for `cls`."""
    if not isinstance(d, dict):
        raise json_format.ParseError(f"expected a JSON object for {cls.DESCRIPTOR.name}, got {type(d).__name__}")
    msg = cls()
    json_format.ParseDict(_clean(d, cls.DESCRIPTOR, cls.DESCRIPTOR.name), msg)
    try:
        _restore(msg, d, cls.DESCRIPTOR.name)
    except DecodeError as exc:
        raise json_format.ParseError(f"{cls.DESCRIPTOR.name}: {exc}") from None
    return msg


def node_from_dict(d: dict[str, Any]) -> pb.Node:
    """The Node of a JSON object written by node_to_dict (or any protobuf JSON of a Node).

    Raises json_format.ParseError when `d` is not a valid Node."""
    return message_from_dict(d, pb.Node)


def _clean(d: dict[str, Any], desc: descriptor.Descriptor, path: str) -> dict[str, Any]:
    """A copy of `d` that ParseDict accepts: extensions removed or reduced to plain JSON mapping."""
    fields = _fields_by_key(desc)
    out = {}
    for key, value in d.items():
        if key == UNKNOWN_FIELDS_KEY:
            continue  # checked and applied by _restore
        fd = fields.get(key)
        if fd is None or value is None:
            out[key] = value  # ParseDict reports an unknown key itself
        elif fd.type == _FD.TYPE_MESSAGE:
            sub = fd.message_type
            if fd.is_repeated and isinstance(value, list):
                value = [_clean(v, sub, f"{path}.{key}[{i}]") if isinstance(v, dict) else v
                         for i, v in enumerate(value)]
            elif isinstance(value, dict):
                value = _clean(value, sub, f"{path}.{key}")
            out[key] = value
        elif fd.type in FLOAT_TYPES:
            if fd.is_repeated and isinstance(value, list):
                value = [_clean_float(v, fd, f"{path}.{key}[{i}]") for i, v in enumerate(value)]
            else:
                value = _clean_float(value, fd, f"{path}.{key}")
            out[key] = value
        else:
            out[key] = value
    return out


def _clean_float(value: Any, fd: descriptor.FieldDescriptor, path: str) -> Any:
    if isinstance(value, str) and value.startswith("NaN:"):
        _nan_bits(value, fd, path)  # validates
        return "NaN"
    if fd.type == _FD.TYPE_FLOAT and isinstance(value, (int, float)) and not isinstance(value, bool):
        if math.isfinite(value) and abs(value) > _FLOAT_MAX:
            # protobuf writes FLT_MAX as 3.4028235e+38 and then refuses to read it back: round
            # to the nearest float32 when that is finite (a real overflow is still an error)
            try:
                return struct.unpack("<f", struct.pack("<f", value))[0]
            except OverflowError:
                return value
    return value


def _nan_bits(text: str, fd: descriptor.FieldDescriptor, path: str) -> bytes:
    width, _ = FLOAT_TYPES[fd.type]
    match = _NAN_RE.match(text)
    if not match or len(match.group(1)) != 2 * width:
        kind = "float" if width == 4 else "double"
        raise json_format.ParseError(f'{path}: bad NaN "{text}": expected "NaN:0x" and {2 * width} hex digits ({kind})')
    bits = int(match.group(1), 16)
    exponent_bits = 8 if width == 4 else 11
    mantissa_bits = 8 * width - 1 - exponent_bits
    all_ones = (1 << exponent_bits) - 1
    if (bits >> mantissa_bits) & all_ones != all_ones or not bits & ((1 << mantissa_bits) - 1):
        raise json_format.ParseError(f'{path}: "{text}" is not a NaN bit pattern')
    return bits.to_bytes(width, "little")


def _restore(msg: Message, d: dict[str, Any], path: str) -> None:
    """Applies the extensions of `d` to `msg` (just parsed from _clean(d)): NaN bits, unknown fields."""
    fields = _fields_by_key(msg.DESCRIPTOR)
    for key, value in d.items():
        fd = fields.get(key)
        if fd is None or value is None:
            continue
        if fd.type == _FD.TYPE_MESSAGE:
            # ParseDict has accepted `value`, so a list holds one item per element; only objects
            # can carry extensions (ParseDict also lets odd shapes such as [] pass for a message)
            if fd.is_repeated:
                if isinstance(value, list) and len(value) == len(getattr(msg, fd.name)):
                    for i, (sub, sub_d) in enumerate(zip(getattr(msg, fd.name), value)):
                        if isinstance(sub_d, dict):
                            _restore(sub, sub_d, f"{path}.{key}[{i}]")
            elif isinstance(value, dict):
                _restore(getattr(msg, fd.name), value, f"{path}.{key}")
        elif fd.type in FLOAT_TYPES:
            _restore_nans(msg, fd, value, f"{path}.{key}")
    raw = d.get(UNKNOWN_FIELDS_KEY)
    if raw is not None:
        msg.MergeFromString(_check_unknown(raw, msg.DESCRIPTOR, path))


def _restore_nans(msg: Message, fd: descriptor.FieldDescriptor, value: Any, path: str) -> None:
    repeated = fd.is_repeated
    if repeated and not isinstance(value, list):
        return
    values = value if repeated else [value]
    special = {i: _nan_bits(v, fd, path) for i, v in enumerate(values) if isinstance(v, str) and v.startswith("NaN:")}
    if not special:
        return
    _, fixed_wire_type = FLOAT_TYPES[fd.type]
    if not repeated:
        msg.MergeFromString(encode_varint(fd.number << 3 | fixed_wire_type) + special[0])
        return
    bits = float_bits(msg, fd)
    if len(bits) != len(values):  # cannot happen after ParseDict accepted the list
        raise json_format.ParseError(f"{path}: {len(values)} values in JSON, {len(bits)} parsed")
    packed = b"".join(special.get(i, b) for i, b in enumerate(bits))
    msg.ClearField(fd.name)
    msg.MergeFromString(encode_varint(fd.number << 3 | 2) + encode_varint(len(packed)) + packed)


def _check_unknown(raw: Any, desc: descriptor.Descriptor, path: str) -> bytes:
    """The bytes of an "_unknown_fields" value, checked to be well-formed fields the schema does not define."""
    if not isinstance(raw, str):
        raise json_format.ParseError(f"{path}.{UNKNOWN_FIELDS_KEY}: expected a base64 string")
    try:
        data = base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise json_format.ParseError(f"{path}.{UNKNOWN_FIELDS_KEY}: not base64 ({exc})") from None
    try:
        for number, wire_type, *_ in iter_fields(data):
            if is_schema_field(desc, number, wire_type):
                raise json_format.ParseError(
                    f"{path}.{UNKNOWN_FIELDS_KEY}: field {number} is the schema's "
                    f"{desc.fields_by_number[number].name}; give it as a JSON key instead"
                )
    except ValueError as exc:
        raise json_format.ParseError(f"{path}.{UNKNOWN_FIELDS_KEY}: not protobuf wire format ({exc})") from None
    return data


# --------------------------------------------------------------------------------------------
# files


def _dumps(obj: Any, indent: int | None, level: int) -> str:
    text = json.dumps(obj, indent=indent, ensure_ascii=False, allow_nan=False)
    if indent is None:
        return text
    return text.replace("\n", "\n" + " " * (indent * level))


def et_to_json(et_url: str, json_url: str, indent: int | None = 1) -> int:
    """Writes the .et at `et_url` as one chakra-et-json document; returns the node count.

    Streams: nodes are read, converted and written one at a time, so memory does not grow with
    the file. `indent` is the JSON indentation (None: compact, one node per line). Both URLs may
    be any fsspec URL; a json_url ending in .gz is gzipped. Raises ChakraFormatError on a bad .et.
    """
    with ETReader(et_url) as reader:
        metadata = reader.metadata
    if indent is None:
        key_sep, node_sep, close_nodes, close_doc = " ", "\n", "\n", "}\n"
        open_doc = "{"
    else:
        key_sep = "\n" + " " * indent
        node_sep = "\n" + " " * (2 * indent)
        close_nodes = key_sep
        open_doc = "{" + key_sep
        close_doc = "\n}\n"
    count = 0
    with open_binary(json_url, "wb") as f:
        f.write((f'{open_doc}"format": "{FORMAT}",{key_sep}"format_version": {FORMAT_VERSION},{key_sep}'
                 f'"global_metadata": {_dumps(message_to_dict(metadata), indent, 1)},{key_sep}"nodes": [').encode())
        for node in iter_nodes(et_url):
            f.write(((node_sep if not count else "," + node_sep) + _dumps(node_to_dict(node), indent, 2)).encode())
            count += 1
        f.write(((close_nodes if count else "") + "]" + close_doc).encode())
    return count


class _DuplicateKey(ValueError):
    pass


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(key)
            seen.add(key)
    return out


def _where(exc: json.JSONDecodeError) -> str:
    return f"{exc.msg} (line {exc.lineno}, column {exc.colno})"


def _load_documents(text: str, url: str) -> tuple[list[Any], bool]:
    """The JSON documents of the file: ([doc], False) for one document, (docs, True) for concatenated ones."""
    decoder = json.JSONDecoder(object_pairs_hook=_no_duplicates)
    try:
        try:
            return [decoder.decode(text)], False
        except json.JSONDecodeError as exc:
            if exc.msg != "Extra data":
                raise ChakraFormatError(url, f"invalid JSON: {_where(exc)}") from None
        # several documents back to back: the reference chakra_jsonizer's output
        docs = []
        pos, end = 0, len(text)
        while True:
            while pos < end and text[pos] in " \t\r\n":
                pos += 1
            if pos == end:
                return docs, True
            try:
                doc, pos = decoder.raw_decode(text, pos)
            except json.JSONDecodeError as exc:
                raise ChakraFormatError(url, f"invalid JSON in object {len(docs)}: {_where(exc)}") from None
            docs.append(doc)
    except _DuplicateKey as exc:
        raise ChakraFormatError(url, f'invalid JSON: duplicate key "{exc.args[0]}" in an object') from None
    except RecursionError:
        raise ChakraFormatError(url, "invalid JSON: nested too deep") from None


def _node_id(d: Any) -> int | None:
    value = d.get("id") if isinstance(d, dict) else None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None


def _has_unknown_fields(msg: Message) -> bool:
    if len(unknown_fields.UnknownFieldSet(msg)):
        return True
    for fd, value in msg.ListFields():
        if fd.type == _FD.TYPE_MESSAGE and any(map(_has_unknown_fields, value if fd.is_repeated else [value])):
            return True
    return False


def _parse_metadata(d: Any, url: str, where: str) -> pb.GlobalMetadata:
    try:
        metadata = message_from_dict(d, pb.GlobalMetadata)
    except json_format.ParseError as exc:
        raise ChakraFormatError(url, f"{where}: {exc}") from None
    if _has_unknown_fields(metadata):
        # etfile.ETReader takes unknown metadata fields as the sign of a file that is not a
        # Chakra ET, so writing them would make an .et that this library refuses to read
        raise ChakraFormatError(url, f"{where}: {UNKNOWN_FIELDS_KEY} in the global metadata: readers refuse such an ET")
    return metadata


def _parse_node(d: Any, url: str, index: int, where: str) -> pb.Node:
    try:
        return node_from_dict(d)
    except json_format.ParseError as exc:
        raise ChakraFormatError(url, f"{where}: {exc}", node_index=index, node_id=_node_id(d)) from None


def json_to_et(json_url: str, et_url: str) -> int:
    """Writes the .et described by a chakra-et-json document (or reference chakra_jsonizer output).

    Returns the node count. The JSON is loaded whole (json.load), then every node is converted
    before the output is opened, so bad input leaves no partial .et behind; memory is that of
    the parsed JSON plus the encoded nodes. Both URLs may be any fsspec URL; gzipped JSON is
    read transparently and an et_url ending in .gz is gzipped. Raises ChakraFormatError naming
    the file (and, for a bad node, its index in "nodes") on anything that is not valid input."""
    try:
        with open_binary(json_url) as f:
            raw = f.read()
    except FileNotFoundError:
        raise ChakraFormatError(json_url, "no such file") from None
    except (OSError, EOFError) as exc:
        raise ChakraFormatError(json_url, f"cannot read: {exc}") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ChakraFormatError(json_url, f"not UTF-8 text: {exc}", offset=exc.start) from None
    del raw
    docs, concatenated = _load_documents(text, json_url)
    del text

    if not concatenated and isinstance(docs[0], dict) and ("format" in docs[0] or "nodes" in docs[0]):
        top = docs[0]
        if "format" not in top:
            raise ChakraFormatError(json_url, f'not a {FORMAT} document: no "format" key')
        if top["format"] != FORMAT:
            raise ChakraFormatError(
                json_url, f'not a {FORMAT} document: "format" is {json.dumps(top["format"])}, expected "{FORMAT}"'
            )
        version = top.get("format_version")
        if type(version) is not int or version != FORMAT_VERSION:
            raise ChakraFormatError(
                json_url, f'unsupported "format_version" {json.dumps(version)} (this reader knows {FORMAT_VERSION})'
            )
        extra = sorted(set(top) - set(_TOP_KEYS))
        if extra:
            raise ChakraFormatError(json_url, f"unexpected top-level keys {extra} (allowed: {list(_TOP_KEYS)})")
        if not isinstance(top.get("nodes"), list):
            raise ChakraFormatError(json_url, '"nodes" must be a JSON array of node objects')
        metadata = _parse_metadata(top.get("global_metadata", {}), json_url, "global_metadata")
        node_dicts, label = top["nodes"], "nodes[{}]"
    else:
        # reference chakra_jsonizer: GlobalMetadata object, then one object per Node. One object
        # alone (a trace without nodes) must read as a GlobalMetadata, else it is not ours.
        if not isinstance(docs[0], dict):
            raise ChakraFormatError(json_url, f"expected a JSON object, got {type(docs[0]).__name__}")
        what = "the first object is not a GlobalMetadata" if concatenated else \
            f'not a {FORMAT} document (no "format" key) nor chakra_jsonizer output'
        metadata = _parse_metadata(docs[0], json_url, what)
        node_dicts, label = docs[1:], "node {} (JSON object {})"
    del docs

    frames = []
    for i, d in enumerate(node_dicts):
        payload = _parse_node(d, json_url, i, label.format(i, i + 1)).SerializeToString()
        frames.append(encode_varint(len(payload)) + payload)
        node_dicts[i] = None  # the encoded node is far smaller than its parsed JSON
    payload = metadata.SerializeToString()
    with open_binary(et_url, "wb") as f:
        f.write(encode_varint(len(payload)) + payload)
        for frame in frames:
            f.write(frame)
    return len(frames)
