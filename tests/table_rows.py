"""Rows for tests that write a warehouse table by hand: the columns a test cares about, the
table's other required columns filled with empty values, so that the row passes its table's
declaration (pipeline/tables.TABLES) as a producer's would."""

from __future__ import annotations

import pyarrow as pa

from pipeline import tables


def complete(table: str, row: dict) -> dict:
    """`row` with an empty value ("", 0, False) for each required column it does not give."""
    def empty(kind: pa.DataType):
        return "" if pa.types.is_string(kind) else False if pa.types.is_boolean(kind) else 0

    return {**{c.name: empty(c.type) for c in tables.TABLES[table].columns if not c.nullable}, **row}


def night_tables(day, warehouse: str) -> dict[str, pa.Table]:
    """A run_day's night committed (as the nightly flow commits it), then every table of its day
    read back: what a reader sees of the night."""
    tables.commit_night(warehouse, day.date, day.files, day.run_id)
    return {name: tables.read_day(warehouse, name, day.date) for name in tables.TABLES}
