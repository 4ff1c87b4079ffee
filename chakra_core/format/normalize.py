"""Bring a hand-built node table to the exact node-table schema before it is written.

Converters and users build tables with only the columns they care about (say id, name,
type, data_deps, comm_type, comm_size). Missing columns get their neutral value (empty
lists, zero times, absent attributes); present ones are cast to the schema's type, which
fails loudly on a lossy cast (a negative id, a comm_size that is not an integer).
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from chakra_core.errors import ChakraTableError
from chakra_core.format.columns import NODE_SCHEMA, NODE_TYPE_VALUES

_REQUIRED = ("id",)


def _default_column(field: pa.Field, n: int) -> pa.Array:
    if pa.types.is_list(field.type) and not field.nullable:
        return pa.array([[]] * n, field.type)
    if field.name == "name":
        return pa.array([""] * n, field.type)
    if not field.nullable:
        return pa.array([0] * n, field.type)
    return pa.nulls(n, field.type)


def _node_types(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """Accepts NodeType names ("COMP_NODE") as well as numbers."""
    if pa.types.is_string(column.type) or pa.types.is_dictionary(column.type):
        if column.null_count:
            raise ChakraTableError(f"column type has {column.null_count} null value(s); it may have none")
        names = column.cast(pa.string()).to_pylist()
        unknown = sorted({n for n in names if n not in NODE_TYPE_VALUES})
        if unknown:
            raise ChakraTableError(f"column type: unknown node type name(s) {unknown}")
        return pa.chunked_array([pa.array([NODE_TYPE_VALUES[n] for n in names], pa.int32())])
    return column


def normalize_table(table: pa.Table, columns: Sequence[str] | None = None) -> pa.Table:
    """The table with exactly NODE_SCHEMA's columns, in order, keeping the table's metadata; with
    `columns`, only those of them (a question that reads a few columns of a big trace fills in
    no others, and takes a table read with only those: etfile.read_table's `columns`), a
    dictionary-encoded column of the field's values kept encoded."""
    schema = NODE_SCHEMA if columns is None else pa.schema([NODE_SCHEMA.field(name) for name in columns])
    if table.schema.equals(schema):
        return table
    missing = [name for name in _REQUIRED if name not in table.column_names]
    if missing:
        raise ChakraTableError(f"node table lacks required column(s) {missing}")
    extra = [name for name in table.column_names if NODE_SCHEMA.get_field_index(name) < 0]
    if extra:
        raise ChakraTableError(
            f"node table has column(s) {extra} that are not node fields or well-known attributes;"
            " put other attributes in other_attrs"
        )
    n = table.num_rows
    arrays, fields = [], []
    for field in schema:
        fields.append(field)
        if field.name not in table.column_names:
            arrays.append(_default_column(field, n))
            continue
        column = table.column(field.name)
        if field.name == "type":
            column = _node_types(column)
        if not field.nullable and column.null_count:
            raise ChakraTableError(f"column {field.name} has {column.null_count} null value(s); it may have none")
        if columns is not None and pa.types.is_dictionary(column.type) and column.type.value_type == field.type:
            fields[-1] = field.with_type(column.type)  # kept encoded for a question (names: format/nodenames.py)
            arrays.append(column)
            continue
        try:
            arrays.append(pc.cast(column, field.type) if column.type != field.type else column)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise ChakraTableError(f"column {field.name}: cannot store {column.type} as {field.type}: {exc}") from None
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields, table.schema.metadata))
