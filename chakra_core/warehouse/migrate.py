"""A warehouse written before the Iceberg tables (one Parquet object per table and day,
`tables/<table>/date=<d>/part-0.parquet`) converted into them, losing nothing.

Per table folder that the catalog does not hold yet (an ad hoc sweep's `sweep_results`, whose
folders are partitioned by sweep, stays as it is): each day's part is rewritten as a data file
with its day as a column (and every column any day of the table has: older days read the ones
added since as null), all of them committed in one commit, then the rows of every day are
counted back from the new snapshot. Only when each day's count is the old part's are the old
folders removed. A part that cannot be read is named and left where it is, with its day.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq

from chakra_core.errors import ChakraError
from chakra_core.literal import remove_tree
from chakra_core.warehouse import catalog as catalogs
from chakra_core.warehouse import parts, snapshots

OLD_PART = "part-0.parquet"
UNPARTITIONED_BY_DAY = ("sweep_results",)  # partitioned by sweep first: read as folders, not migrated


class MigrationError(ChakraError):
    """A migrated table that does not count back to the rows it had; nothing old is removed."""


@dataclass
class TableMigration:
    table: str
    days: dict[str, int] = field(default_factory=dict)  # day -> rows, as read back from the new snapshot
    left: dict[str, str] = field(default_factory=dict)  # day -> why its part was left where it is


def old_days(warehouse: str, table: str) -> dict[str, str]:
    """day -> URL of its one part, for a table folder of the old layout."""
    fs, root = fsspec.core.url_to_fs(f"{warehouse.rstrip('/')}/tables/{table}")
    days = {}
    for entry in fs.ls(root, detail=False):
        name = entry.rstrip("/").rsplit("/", 1)[-1]
        if name.startswith("date=") and fs.exists(f"{entry}/{OLD_PART}"):
            days[name[len("date="):]] = fs.unstrip_protocol(f"{entry}/{OLD_PART}")
    return days


def migrate(warehouse: str, say: Callable[[str], None] = print) -> list[TableMigration]:
    """Every old-layout table of the warehouse converted; what was done, table by table."""
    fs, root = fsspec.core.url_to_fs(warehouse)
    catalog = catalogs.open_catalog(warehouse, create=True)
    held = set(catalogs.table_names(catalog))
    done = []
    for entry in sorted(fs.ls(f"{root.rstrip('/')}/tables", detail=False)):
        table = entry.rstrip("/").rsplit("/", 1)[-1]
        if table in held or table in UNPARTITIONED_BY_DAY:
            continue
        days = old_days(warehouse, table)
        if days:
            done.append(_migrate_table(warehouse, catalog, table, days, say))
    return done


def _migrate_table(warehouse: str, catalog, table: str, days: dict[str, str],
                   say: Callable[[str], None]) -> TableMigration:
    result = TableMigration(table)
    read = {}
    for day, url in sorted(days.items()):
        try:
            with fsspec.open(url, "rb") as f:
                read[day] = pq.read_table(f)
        except Exception as exc:  # noqa: BLE001 - a damaged part is named and left, the rest goes on
            result.left[day] = f"{url}: cannot be read ({type(exc).__name__}: {' '.join(str(exc).split())[:200]})"
    if read:
        _rewrite_and_commit(warehouse, catalog, table, read, days, result)
    say(f"{table}: {len(read)} day(s), {sum(t.num_rows for t in read.values()):,} row(s) migrated and counted back"
        + (f"; {len(result.left)} day(s) left: " + "; ".join(result.left.values()) if result.left else ""))
    return result


def _rewrite_and_commit(warehouse: str, catalog, table: str, read: dict[str, pa.Table], days: dict[str, str],
                        result: TableMigration) -> None:
    """The readable days as data files of one commit, counted back, then their old folders removed."""
    union = pa.unify_schemas([t.schema for t in read.values()], promote_options="permissive")
    # a column some day lacks is nullable: that day reads it as null
    schema = pa.schema([f.with_nullable(f.nullable or any(f.name not in t.column_names for t in read.values()))
                        for f in union])
    files, counts = [], {day: data.num_rows for day, data in read.items()}
    for day, data in read.items():
        if data.num_rows:  # (an empty day has no file: a data file's day is read from its rows)
            files.append(parts.write_part(warehouse, table, day, f"migrated-{day}",
                                          snapshots.conformed(data, schema), schema))
    iceberg = catalogs.ensure_table(catalog, warehouse, table, schema)
    if files:
        with iceberg.transaction() as tx:  # every day of the table in one commit
            tx.add_files(files, snapshot_properties={snapshots.RUN_PROPERTY: "migrated"}, check_duplicate_files=False)
    after: dict[str, int] = {}
    for f in snapshots.data_files(catalogs.load(catalog, table)):  # the snapshot planned once
        after[f.date] = after.get(f.date, 0) + snapshots.row_count([f])
    result.days = {day: after.get(day, 0) for day in read}
    lost = {day: (counts[day], n) for day, n in result.days.items() if n != counts[day]}
    if lost:
        raise MigrationError(f"{table}: rows per day (before, after) differ after the migration: {lost}; the old "
                             "parts are kept")
    for day in read:
        remove_tree(*fsspec.core.url_to_fs(days[day].rsplit("/", 1)[0]))
