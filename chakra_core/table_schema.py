"""A table's columns declared once, beside the code that makes its rows (as Dagster declares an
asset's schema with the function that produces it), and rows checked against it on the way in.

A row gives every column that is not declared nullable, and no key the table lacks; a nullable
column may be left out or None (a failed simulation has no times). A producer that forgets a
required column, adds one its table lacks or leaves a required value empty fails at once,
instead of its value being dropped or written as a column of nulls. Parquet files store every column as
nullable: the declaration is the producers' contract, and days written before a column became
required read with the same schema as the days after.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property

import pyarrow as pa
import pyarrow.compute as pc


class TableRowError(ValueError):
    """Rows that do not match their table's declaration: a producer's bug, not bad input."""


def column(name: str, type_: pa.DataType, nullable: bool = False) -> pa.Field:
    """A declared column: nullable=True where a producer may legitimately leave the value empty."""
    return pa.field(name, type_, nullable=nullable)


@dataclass(frozen=True)
class TableSchema:
    name: str
    columns: tuple[pa.Field, ...]

    def __post_init__(self) -> None:
        names = [c.name for c in self.columns]
        twice = next((n for n in names if names.count(n) > 1), None)
        if twice:
            raise TableRowError(f"{self.name}: column {twice} declared twice")

    @cached_property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    @cached_property
    def schema(self) -> pa.Schema:
        """The columns as files store them (every one nullable)."""
        return pa.schema([c.with_nullable(True) for c in self.columns])

    @cached_property
    def required(self) -> tuple[str, ...]:
        """The columns that never hold a null."""
        return tuple(c.name for c in self.columns if not c.nullable)

    def field(self, name: str) -> pa.Field:
        """The declared column called `name`."""
        return self.columns[self.names.index(name)]

    def extended(self, front: Sequence[pa.Field] = (), back: Sequence[pa.Field] = (), name: str | None = None
                 ) -> TableSchema:
        """This table with more columns before and after its own (e.g. the pipeline's job id and run id)."""
        return TableSchema(name or self.name, (*front, *self.columns, *back))

    def empty(self) -> pa.Table:
        return self.schema.empty_table()

    def from_rows(self, rows: Iterable[dict]) -> pa.Table:
        """The rows as a table; TableRowError names the first row with a key too many or too few."""
        rows = list(rows)
        names, required = self._name_set, frozenset(self.required)
        for i, row in enumerate(rows):
            if not (row.keys() <= names and row.keys() >= required):
                raise TableRowError(f"{self.name}: row {i}: {self._difference(row.keys())}")
        return self._checked(pa.Table.from_pylist(rows, schema=self.schema))

    def from_table(self, table: pa.Table) -> pa.Table:
        """A table made column-wise, in this table's column order and types; same checks as from_rows."""
        given = table.column_names
        if set(given) != self._name_set or len(given) != len(self.names):
            raise TableRowError(f"{self.name}: {self._difference(given) or 'a column given twice'}")
        return self._checked(table.select(list(self.names)).cast(self.schema))

    @cached_property
    def _name_set(self) -> frozenset[str]:
        return frozenset(self.names)

    def _difference(self, given: Iterable[str]) -> str:
        extra = [k for k in given if k not in self._name_set]
        if extra:
            return f"{extra[0]}: not a column of the table"
        missing = [n for n in self.required if n not in set(given)]
        return f"missing {', '.join(missing)}" if missing else ""

    def _checked(self, table: pa.Table) -> pa.Table:
        empty = next((n for n in self.required if table.column(n).null_count), None)
        if empty:
            at = pc.index(pc.is_null(table.column(empty)), True).as_py()
            raise TableRowError(f"{self.name}: row {at}: {empty}: null in a column declared not nullable")
        return table

