"""What a reader of the warehouse sees: each table's data files in one snapshot.

The current snapshot by default; `as_of` an ISO 8601 UTC time (`2026-03-02T04:00:00Z`: the
last commit at or before it) or a night's run id (the state right after that night's commit).
A table the catalog does not hold is read as the folder of Parquet files it was before
(`tables/<table>/date=<d>/*.parquet`: an ad hoc sweep's results, a warehouse not migrated).
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq

from chakra_core.errors import ChakraError
from chakra_core.warehouse import catalog as catalogs
from chakra_core.warehouse.catalog import PARTITION

RUN_PROPERTY = "chakra.run-id"  # the night's run id, on each snapshot its commit writes
_RUN_ID = re.compile(r"^[0-9a-f]{6,32}$")


class SnapshotError(ChakraError):
    """An --as-of that names no state of the warehouse."""


@dataclass(frozen=True)
class DataFile:
    url: str
    date: str | None  # the partition's day


def as_of_ms(catalog, as_of: str | None) -> int | None:
    """The snapshot time (ms since the epoch) an --as-of names; None: the current snapshots."""
    if not as_of:
        return None
    if _RUN_ID.match(as_of):
        times = [s.timestamp_ms for name in catalogs.table_names(catalog)
                 for s in catalogs.load(catalog, name).snapshots() if s.summary.get(RUN_PROPERTY) == as_of]
        if not times:
            raise SnapshotError(f"--as-of {as_of}: no night with that run id committed to this warehouse")
        return max(times)
    try:
        when = dt.datetime.fromisoformat(as_of.replace("Z", "+00:00"))
    except ValueError:
        raise SnapshotError(f"--as-of {as_of!r}: give an ISO 8601 UTC time (2026-03-02T04:00:00Z) or a night's "
                            "run id") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.timezone.utc)
    return int(when.timestamp() * 1000)


def snapshot_id(table, at_ms: int | None) -> int | None:
    """The table's snapshot at that time (None: current); None also when it had none yet."""
    if at_ms is None:
        snapshot = table.current_snapshot()
    else:
        snapshot = table.snapshot_as_of_timestamp(at_ms)
    return None if snapshot is None else snapshot.snapshot_id


def data_files(table, at_ms: int | None = None, date: str | None = None, since: str | None = None) -> list[DataFile]:
    """The table's data files in the snapshot at `at_ms`: of one day, of the days from `since`
    on, or all (a filter prunes the manifests read, not only the files kept)."""
    from pyiceberg.expressions import AlwaysTrue, EqualTo, GreaterThanOrEqual

    sid = snapshot_id(table, at_ms)
    if sid is None:
        return []
    row_filter = EqualTo(PARTITION, date) if date else GreaterThanOrEqual(PARTITION, since) if since else AlwaysTrue()
    scan = table.scan(snapshot_id=sid, row_filter=row_filter)
    files = []
    for task in scan.plan_files():
        day = task.file.partition[0] if len(task.file.partition) else None
        files.append(DataFile(task.file.file_path, None if day is None else _day(day)))
    return sorted(files, key=lambda f: (f.date or "", f.url))


def _day(value) -> str:
    """A date partition value (days since the epoch, or a date) as YYYY-MM-DD."""
    if isinstance(value, int):
        return (dt.date(1970, 1, 1) + dt.timedelta(days=value)).isoformat()
    return str(value)


def arrow_schema(table) -> pa.Schema:
    """The table's current columns as Arrow types (strings as plain strings)."""
    schema = table.schema().as_arrow()
    return pa.schema([pa.field(f.name, pa.string() if pa.types.is_large_string(f.type) else f.type, f.nullable)
                      for f in schema])


def read_files(files: list[DataFile], schema: pa.Schema, columns: list[str] | None = None) -> pa.Table:
    """The files' rows in the table's current schema: a column an older file lacks reads as null."""
    wanted = pa.schema([schema.field(c) for c in columns]) if columns else schema
    parts = []
    for f in files:
        with fsspec.open(f.url, "rb") as handle:
            stored = pq.ParquetFile(handle)  # its footer read once, for the columns and the rows
            part = stored.read(columns=[c for c in wanted.names if c in stored.schema_arrow.names])
        parts.append(conformed(part, wanted))
    return pa.concat_tables(parts) if parts else wanted.empty_table()


def conformed(part: pa.Table, schema: pa.Schema) -> pa.Table:
    """The rows with the schema's columns, in its order: one the rows lack, null."""
    columns = [part.column(f.name).cast(f.type) if f.name in part.column_names
               else pa.nulls(part.num_rows, f.type) for f in schema]
    return pa.Table.from_arrays(columns, schema=pa.schema([pa.field(f.name, f.type) for f in schema]))


def row_count(files: list[DataFile]) -> int:
    """Rows of the files, from their footers."""
    total = 0
    for f in files:
        with fsspec.open(f.url, "rb") as handle:
            total += pq.ParquetFile(handle).metadata.num_rows
    return total


def read_day(warehouse: str, table: str, date: str, as_of: str | None = None) -> pa.Table:
    """A table's rows of one day, without the day column; an empty table when the day has none."""
    catalog = catalogs.open_catalog(warehouse)
    iceberg = catalogs.load(catalog, table) if catalog is not None else None
    if iceberg is None:
        raise SnapshotError(f"{warehouse}: no table {table} in its catalog")
    schema = arrow_schema(iceberg)
    rows = read_files(data_files(iceberg, as_of_ms(catalog, as_of), date), schema)
    return rows.drop_columns([PARTITION])


def committed_days(warehouse: str) -> list[str] | None:
    """The days nights committed (the `nights` table's, else the `traces` table's), oldest first;
    None for a warehouse without a catalog (its days are its folders')."""
    catalog = catalogs.open_catalog(warehouse)
    if catalog is None:
        return None
    for name in ("nights", "traces"):
        table = catalogs.load(catalog, name)
        days = sorted({f.date for f in data_files(table) if f.date}) if table is not None else []
        if days:
            return days
    return []


def iceberg_folder_rows(url: str) -> pa.Table | None:
    """The current rows of `WAREHOUSE/tables/<table>` when that folder is an Iceberg table of its
    warehouse's catalog (a reader given the folder must not take a superseded night's files for
    data); None when it is a plain folder of Parquet files."""
    head, _, table = url.rstrip("/").rpartition("/")
    warehouse, _, folder = head.rpartition("/")
    if folder != "tables" or not warehouse:
        return None
    fs, path = fsspec.core.url_to_fs(url)
    if not fs.isdir(path.rstrip("/") + "/metadata"):
        return None
    catalog = catalogs.open_catalog(warehouse)
    iceberg = catalogs.load(catalog, table) if catalog is not None else None
    return None if iceberg is None else read_files(data_files(iceberg), arrow_schema(iceberg))

