"""SQL over the fleet pipeline's warehouse: DuckDB with one view per table.

The pipeline writes `WAREHOUSE/tables/<table>/date=<d>/part-0.parquet` and, for ad hoc sweeps,
`tables/sweep_results/sweep=<name>/[date=<d>/]part-<n>-<run>.parquet` (docs/pipeline.md, docs/sweeps.md).
Here every table folder found under `WAREHOUSE/tables/` becomes a view of the same name, with
its hive partition columns (`date`, and `sweep` for sweep_results) and every column of its
parts (a sweep's parameter columns are null in the rows of sweeps without them). The
warehouse is any fsspec URL: for s3:// (or any other remote store) the fsspec filesystem is
registered with DuckDB, which then reads through it, so no DuckDB extension has to be
downloaded.
"""

from __future__ import annotations

import re

import fsspec

from chakra_core.errors import ChakraError

_TABLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class WarehouseError(ChakraError):
    """A warehouse that cannot be opened, or a query DuckDB refuses (its message, on one line)."""


def _quoted(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def open_warehouse(url: str):
    """(DuckDB connection, {table: [parquet files]}) with a view per table of the warehouse."""
    import duckdb

    fs, root = fsspec.core.url_to_fs(url)
    tables_root = root.rstrip("/") + "/tables"
    if not fs.isdir(tables_root):
        raise WarehouseError(f"{url}: no tables/ folder here; is this a warehouse written by the nightly flow?")
    local = "file" in (fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,))
    con = duckdb.connect()
    if not local:
        con.register_filesystem(fs)
    scheme = "" if local else f"{fs.protocol[0] if isinstance(fs.protocol, tuple) else fs.protocol}://"
    files_by_table: dict[str, list[str]] = {}
    for entry in sorted(fs.ls(tables_root, detail=False)):
        name = entry.rstrip("/").rsplit("/", 1)[-1]
        if not _TABLE_NAME.match(name) or not fs.isdir(entry):
            continue
        files = sorted(f for f in fs.glob(entry.rstrip("/") + "/**/*.parquet") if "/." not in f)
        files_by_table[name] = [scheme + f.lstrip("/") if scheme else f for f in files]
        if files:
            con.execute(f"CREATE VIEW {name} AS {_union(files_by_table[name])}")
    return con, files_by_table


def _union(files: list[str]) -> str:
    """One read_parquet per layout of hive partitions (DuckDB refuses to mix sweep=<n>/ with
    sweep=<n>/date=<d>/ in one), combined by column name: parts of different sweeps have
    different parameter columns."""
    layouts: dict[tuple[str, ...], list[str]] = {}
    for f in files:
        layouts.setdefault(tuple(p.split("=", 1)[0] for p in f.split("/") if "=" in p), []).append(f)
    return " UNION ALL BY NAME ".join(
        f"SELECT * FROM read_parquet([{', '.join(_quoted(f) for f in group)}], hive_partitioning = true, "
        "union_by_name = true)" for group in layouts.values())


def run_query(con, sql: str):
    """The query's result as a pyarrow Table; DuckDB's complaint as one WarehouseError line."""
    import duckdb

    try:
        relation = con.sql(sql)
        return None if relation is None else relation.to_arrow_table()  # None: CREATE, SET, ...
    except duckdb.Error as exc:
        raise WarehouseError(" ".join(str(exc).split())) from None


def table_counts(con, files_by_table: dict[str, list[str]]) -> list[dict]:
    """One row per table: its name, days, rows and files."""
    rows = []
    for name, files in files_by_table.items():
        days = {part for f in files for part in f.split("/") if part.startswith("date=")}
        count = con.execute(f"SELECT count(*) FROM {name}").fetchone()[0] if files else 0
        rows.append({"table": name, "days": len(days), "rows": count, "files": len(files)})
    return rows
