"""Bridge between the C codec's flat buffers and Arrow record batches of the node table.

`decode` wraps the buffers that _etcodec.decode fills as Arrow arrays without copying.
`encode_batch` hands _etcodec.encode contiguous numpy views of a record batch; it accepts
sliced and chunked data, and tables that lack the optional columns.
"""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from chakra_core import limits
from chakra_core._native import _etcodec
from chakra_core.format.columns import (
    ARROW_TYPE_OF_CLASS,
    IO_INFO_TYPE,
    KIND_FIELD,
    LIST_VALUE_FIELDS,
    NODE_SCHEMA,
    OTHER_ATTR_TYPE,
    VALUE_KINDS,
    WELL_KNOWN_ATTRIBUTES,
    ValueClass,
)

FormatError = _etcodec.FormatError

_etcodec.configure([(a.name, int(a.value_class), KIND_FIELD[a.default_kind]) for a in WELL_KNOWN_ATTRIBUTES])
# freed column buffers kept for reuse (default 1 GiB; the first 128 MiB stay mapped, the rest the
# kernel may reclaim): 0 gives every buffer back at once; at most 1 TiB (a size_t in C)
_POOL_BYTES = limits.environment_int("CHAKRA_DECODE_POOL_BYTES", 0, 1 << 40)
if _POOL_BYTES is not None:
    _etcodec.pool(_POOL_BYTES)

_KIND_DICTIONARY = pa.array(VALUE_KINDS, pa.string())
_IO_FIELDS = ("values", "shapes", "types")


def default_decode_threads() -> int:
    """Threads for decoding: CHAKRA_DECODE_THREADS, else the CPUs this process may use (at most 16)."""
    configured = limits.environment_int("CHAKRA_DECODE_THREADS", 1, 1024)
    if configured is not None:
        return configured
    return max(1, min(16, len(os.sched_getaffinity(0))))


def decode(data, start: int, base_offset: int, first_index: int, max_nodes: int, final: bool,
           threads: int = 1) -> tuple[list[pa.RecordBatch], int]:
    """Decodes up to max_nodes Node messages from data[start:] into record batches (file order).

    base_offset is the file offset of data[0], first_index the index of the first node (both
    for error messages). Returns the batches and the position where decoding stopped.
    """
    parts, end = _etcodec.decode(data, start, base_offset, first_index, max_nodes, final, threads)
    return [_batch_from_buffers(buffers) for buffers in parts], end


# ---------------------------------------------------------------- buffers -> Arrow


_shared_zeros: pa.Buffer = pa.py_buffer(np.zeros(1 << 20, np.uint8))


class _Buffers:
    """Access to one decode() result by key, as pyarrow buffers.

    The C side leaves the value and offset buffers of all-null (or all-zero) columns empty;
    they are padded here with one read-only zero buffer shared by every batch, so a sparse
    attribute costs no memory per row.
    """

    def __init__(self, raw: dict):
        self.raw = raw

    @staticmethod
    def zeros(nbytes: int) -> pa.Buffer:
        global _shared_zeros
        if _shared_zeros.size < nbytes:
            _shared_zeros = pa.py_buffer(np.zeros(max(nbytes, 2 * _shared_zeros.size), np.uint8))
        return _shared_zeros

    def buf(self, key: str) -> pa.Buffer | None:
        value = self.raw[key]
        return None if value is None else pa.py_buffer(value)

    def padded(self, key: str, nbytes: int) -> pa.Buffer:
        """The buffer under key, or shared zeros when it was left shorter than nbytes."""
        value = self.raw[key]
        if value is None or memoryview(value).nbytes < nbytes:
            return self.zeros(nbytes)
        return pa.py_buffer(value)

    def count(self, key: str, width: int) -> int:
        return memoryview(self.raw[key]).nbytes // width

    def fixed(self, key: str, type_: pa.DataType, length: int) -> pa.Array:
        nbytes = (length + 7) // 8 if type_ == pa.bool_() else length * type_.byte_width
        return pa.Array.from_buffers(type_, length, [self.buf(f"{key}.valid"), self.padded(f"{key}.vals", nbytes)])

    def string(self, key: str, length: int, type_: pa.DataType = pa.string()) -> pa.Array:
        offsets = self.padded(f"{key}.off", (length + 1) * 4)
        return pa.Array.from_buffers(type_, length, [self.buf(f"{key}.valid"), offsets, self.buf(f"{key}.data")])

    def list_of(self, type_: pa.DataType, length: int, off_key: str, child: pa.Array, valid_key: str | None = None):
        valid = self.buf(valid_key) if valid_key else None
        offsets = self.padded(off_key, (length + 1) * 4)
        return pa.Array.from_buffers(type_, length, [valid, offsets], children=[child])


def _plain(type_: pa.DataType, length: int, data: pa.Buffer) -> pa.Array:
    return pa.Array.from_buffers(type_, length, [None, data])


def _plain_padded(b: _Buffers, type_: pa.DataType, length: int, key: str) -> pa.Array:
    return _plain(type_, length, b.padded(key, length * type_.byte_width))


def _known_column(b: _Buffers, attr, n: int) -> pa.Array:
    type_ = ARROW_TYPE_OF_CLASS[attr.value_class]
    key = attr.name
    if attr.value_class == ValueClass.STRING:
        return b.string(key, n)
    if attr.value_class == ValueClass.BOOL_LIST:
        values = _plain(pa.bool_(), _last_offset(b, f"{key}.off"), b.buf(f"{key}.vals"))
        return b.list_of(type_, n, f"{key}.off", values, f"{key}.valid")
    return b.fixed(key, type_, n)


def _last_offset(b: _Buffers, key: str) -> int:
    offsets = np.frombuffer(b.raw[key], np.int32)
    return int(offsets[-1]) if len(offsets) else 0


_EMPTY_ENTRIES = pa.array([], OTHER_ATTR_TYPE)


def _other_attrs(b: _Buffers, n: int) -> pa.Array:
    m = b.count("x.kind.vals", 1)
    if not m:  # no node of the batch has one (most traces): every list is empty
        return b.list_of(pa.list_(OTHER_ATTR_TYPE), n, "x.off", _EMPTY_ENTRIES)
    kind = pa.DictionaryArray.from_arrays(b.fixed("x.kind", pa.int8(), m), _KIND_DICTIONARY)
    children = {
        "name": b.string("x.name", m),
        "kind": kind,
        "doc_string": b.string("x.doc", m),
        "int": b.fixed("x.int", pa.int64(), m),
        "uint": b.fixed("x.uint", pa.uint64(), m),
        "double": b.fixed("x.double", pa.float64(), m),
        "float": b.fixed("x.float", pa.float32(), m),
        "bool": b.fixed("x.bool", pa.bool_(), m),
        "string": b.string("x.string", m),
        "bytes": b.string("x.bytes", m, pa.binary()),
    }
    for name in LIST_VALUE_FIELDS:
        off_key = f"x.{name}.off"
        type_ = OTHER_ATTR_TYPE.field(name).type
        length = _last_offset(b, off_key)
        if name in ("string_list", "bytes_list"):  # elements with offsets of their own
            values = b.string(f"x.{name}.item", length, type_.value_type)
        else:
            values = _plain(type_.value_type, length, b.buf(f"x.{name}.vals"))
        children[name] = b.list_of(type_, m, off_key, values, f"x.{name}.valid")
    entries = pa.StructArray.from_arrays(list(children.values()), fields=list(OTHER_ATTR_TYPE))
    return b.list_of(pa.list_(OTHER_ATTR_TYPE), n, "x.off", entries)


def _batch_from_buffers(raw: dict) -> pa.RecordBatch:
    b = _Buffers(raw)
    n = raw["n"]
    columns = {
        "id": _plain(pa.uint64(), n, b.buf("id")),
        "name": b.string("name", n),
        "type": _plain(pa.int32(), n, b.buf("type")),
        "ctrl_deps": b.list_of(pa.list_(pa.uint64()), n, "ctrl.off",
                               _plain(pa.uint64(), b.count("ctrl.vals", 8), b.buf("ctrl.vals"))),
        "data_deps": b.list_of(pa.list_(pa.uint64()), n, "data.off",
                               _plain(pa.uint64(), b.count("data.vals", 8), b.buf("data.vals"))),
        "start_time_micros": _plain_padded(b, pa.uint64(), n, "start"),
        "duration_micros": _plain_padded(b, pa.uint64(), n, "dur"),
    }
    for io in ("inputs", "outputs"):
        fields = [b.string(f"{io}.{f}", n) for f in _IO_FIELDS]
        columns[io] = pa.StructArray.from_arrays(fields, fields=list(IO_INFO_TYPE), mask=_mask(b, f"{io}.valid", n))
    for attr in WELL_KNOWN_ATTRIBUTES:
        columns[attr.name] = _known_column(b, attr, n)
    columns["other_attrs"] = _other_attrs(b, n)
    columns["attr_layout"] = b.list_of(pa.list_(pa.uint16()), n, "layout.off",
                                       _plain(pa.uint16(), b.count("layout.vals", 2), b.buf("layout.vals")),
                                       "layout.valid")
    columns["unknown_fields"] = b.string("unknown", n, pa.binary())
    return pa.RecordBatch.from_arrays(list(columns.values()), schema=NODE_SCHEMA)


def _mask(b: _Buffers, key: str, n: int) -> pa.Array | None:
    """StructArray.from_arrays wants a null mask (True = null) rather than a validity bitmap."""
    bitmap = b.raw[key]
    if bitmap is None:
        return None
    valid = np.unpackbits(np.frombuffer(bitmap, np.uint8), bitorder="little")[:n].astype(bool)
    return pa.array(~valid)


# ---------------------------------------------------------------- Arrow -> encode inputs


def _valid(arr: pa.Array) -> np.ndarray:
    if arr.null_count == 0:
        return np.ones(len(arr), np.uint8)
    return arr.is_valid().to_numpy(zero_copy_only=False).astype(np.uint8)


def _values(arr: pa.Array, dtype) -> np.ndarray:
    """Values of a primitive array as a contiguous numpy array, nulls as zero (booleans as bytes)."""
    if arr.null_count:
        arr = pc.fill_null(arr, pa.scalar(0 if dtype != np.bool_ else False, arr.type))
    out = np.ascontiguousarray(arr.to_numpy(zero_copy_only=False), dtype=dtype)
    return out.view(np.uint8) if dtype == np.bool_ else out


def _string_parts(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(int64 offsets, data bytes) of a string/binary array; offsets index the data buffer."""
    buffers = arr.buffers()
    width = np.int64 if pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type) else np.int32
    offsets = np.frombuffer(buffers[1], width, count=len(arr) + 1, offset=arr.offset * np.dtype(width).itemsize) \
        if buffers[1] is not None else np.zeros(len(arr) + 1, width)
    offsets = offsets.astype(np.int64)
    data = buffers[2]
    return offsets, (np.frombuffer(data, np.uint8) if data is not None else np.zeros(0, np.uint8))


def _put_string(out: dict, key: str, arr: pa.Array, with_valid: bool = False) -> None:
    if pa.types.is_dictionary(arr.type):
        arr = arr.cast(arr.type.value_type)
    out[f"{key}.off"], out[f"{key}.data"] = _string_parts(arr)
    if with_valid:
        out[f"{key}.valid"] = _valid(arr)


def _list_offsets(arr: pa.Array) -> np.ndarray:
    return np.asarray(arr.offsets).astype(np.int64)


def _put_numeric_list(out: dict, key: str, arr: pa.Array, dtype) -> None:
    out[f"{key}.off"] = _list_offsets(arr)
    out[f"{key}.vals"] = _values(arr.values, dtype)


def _kind_fields(kind: pa.Array) -> np.ndarray:
    """Field numbers (0 = no value) of an other_attrs `kind` column, dictionary or plain."""
    if not pa.types.is_dictionary(kind.type):
        kind = pc.dictionary_encode(kind)
    names = kind.dictionary.to_pylist()
    unknown = [k for k in names if k not in KIND_FIELD]
    if unknown:
        raise ValueError(f"other_attrs: unknown value kind(s) {unknown}; expected one of {list(VALUE_KINDS)}")
    lookup = np.array([KIND_FIELD[k] for k in names] + [0], np.uint8)
    indices = _values(kind.indices.cast(pa.int32()).fill_null(len(names)), np.int32)
    return lookup[indices]


_UNSIGNED_SCALARS = ("uint32", "uint64", "fixed32", "fixed64")
_SIGNED_SCALARS = ("int32", "int64", "sint32", "sint64", "sfixed32", "sfixed64")
_VALUE_FIELDS = ("int", "uint", "double", "float", "bool", "string", "bytes") + LIST_VALUE_FIELDS


def _value_field_of(kind: str) -> str:
    """The other_attrs field that holds a value of this kind (int32_val -> int, fixed64_list -> uint_list)."""
    scalar, suffix = kind.rsplit("_", 1)
    base = "int" if scalar in _SIGNED_SCALARS else "uint" if scalar in _UNSIGNED_SCALARS else scalar
    return base + ("_list" if suffix == "list" else "")


# field number of a kind -> index in _VALUE_FIELDS (-1: no value)
_VALUE_FIELD_OF_NUMBER = np.full(max(KIND_FIELD.values()) + 1, -1, np.int8)
for _kind, _number in KIND_FIELD.items():
    _VALUE_FIELD_OF_NUMBER[_number] = _VALUE_FIELDS.index(_value_field_of(_kind))


def _check_other_attr_values(kinds: np.ndarray, fields: dict, lo: int, hi: int) -> None:
    """Every entry in [lo, hi) whose kind is set holds its value in the matching field.

    Decoded tables always do; a hand-built one that puts the value elsewhere (or nowhere)
    would otherwise be written as a zero/empty value without a word.
    """
    need = _VALUE_FIELD_OF_NUMBER[kinds[lo:hi]]
    used = np.bincount(need.astype(np.intp) + 1, minlength=len(_VALUE_FIELDS) + 1)[1:]
    for i in np.flatnonzero(used):
        name = _VALUE_FIELDS[i]
        values = fields[name].slice(lo, hi - lo)
        if not values.null_count:
            continue
        missing = (need == i) & ~values.is_valid().to_numpy(zero_copy_only=False)
        if missing.any():
            j = lo + int(np.argmax(missing))
            raise ValueError(f"other_attrs entry {fields['name'][j].as_py()!r} has kind "
                             f"{VALUE_KINDS[kinds[j] - 3]} but no value in its field {name!r}")


def _put_other_attrs(out: dict, column: pa.Array) -> None:
    out["x.off"] = _list_offsets(column)
    entries = column.values
    fields = dict(zip([f.name for f in entries.type], entries.flatten()))
    _put_string(out, "x.name", fields["name"])
    _put_string(out, "x.doc", fields["doc_string"], with_valid=True)
    out["x.kind"] = _kind_fields(fields["kind"])
    if len(out["x.off"]):
        _check_other_attr_values(out["x.kind"], fields, int(out["x.off"][0]), int(out["x.off"][-1]))
    out["x.int"] = _values(fields["int"], np.int64)
    out["x.uint"] = _values(fields["uint"], np.uint64)
    out["x.double"] = _values(fields["double"], np.float64)
    out["x.float"] = _values(fields["float"], np.float32)
    out["x.bool"] = _values(fields["bool"], np.bool_)
    _put_string(out, "x.string", fields["string"])
    _put_string(out, "x.bytes", fields["bytes"])
    dtypes = {"int_list": np.int64, "uint_list": np.uint64, "double_list": np.float64,
              "float_list": np.float32, "bool_list": np.bool_}
    for name in LIST_VALUE_FIELDS:
        arr = fields[name]
        if name in dtypes:
            _put_numeric_list(out, f"x.{name}", arr, dtypes[name])
        else:
            out[f"x.{name}.off"] = _list_offsets(arr)
            _put_string(out, f"x.{name}.item", arr.values)


def _encode_inputs(batch: pa.RecordBatch) -> dict:
    """The dict of arrays that _etcodec.encode reads, from a batch with NODE_SCHEMA's columns."""
    col = batch.column
    out: dict = {"n": batch.num_rows}
    out["id"] = _values(col("id"), np.uint64)
    out["type"] = _values(col("type"), np.int32)
    out["start"] = _values(col("start_time_micros"), np.uint64)
    out["dur"] = _values(col("duration_micros"), np.uint64)
    _put_string(out, "name", col("name"))
    for key, name in (("ctrl", "ctrl_deps"), ("data", "data_deps")):
        _put_numeric_list(out, key, col(name), np.uint64)
    for io in ("inputs", "outputs"):
        arr = col(io)
        out[f"{io}.valid"] = _valid(arr)
        for field_name, child in zip(_IO_FIELDS, arr.flatten()):
            _put_string(out, f"{io}.{field_name}", child)
    for attr in WELL_KNOWN_ATTRIBUTES:
        arr = col(attr.name)
        out[f"{attr.name}.valid"] = _valid(arr)
        if attr.value_class == ValueClass.STRING:
            _put_string(out, attr.name, arr)
        elif attr.value_class == ValueClass.BOOL_LIST:
            _put_numeric_list(out, attr.name, arr, np.bool_)
        elif attr.value_class == ValueClass.BOOL:
            out[f"{attr.name}.vals"] = _values(arr, np.bool_)
        else:
            out[f"{attr.name}.vals"] = _values(arr, np.int64 if attr.value_class == ValueClass.INT else np.uint64)
    _put_other_attrs(out, col("other_attrs"))
    layout = col("attr_layout")
    if layout.null_count < len(layout):
        _put_numeric_list(out, "layout", layout, np.uint16)
        out["layout.valid"] = _valid(layout)
    _put_string(out, "unknown", col("unknown_fields"))
    return out


def encode_batch(batch: pa.RecordBatch) -> bytes:
    """Length-prefixed Node messages for every row of a batch that has NODE_SCHEMA's columns."""
    return _etcodec.encode(_encode_inputs(batch))
