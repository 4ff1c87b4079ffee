"""SQL over the fleet's warehouse: DuckDB with one view per table.

Each table of the warehouse's Iceberg catalog (chakra_core/warehouse/catalog.py) is a view over
the data files of one snapshot (the current one, or the one `as_of` names:
chakra_core/warehouse/snapshots.py), with every column of the table's current schema: a column
added since an older file was written reads as null there. A table folder under
`WAREHOUSE/tables/` that the catalog does not hold (an ad hoc sweep's
`tables/sweep_results/sweep=<name>/[date=<d>/]part-<n>-<run>.parquet`, docs/sweeps.md, or a
warehouse not yet migrated) is a view over its Parquet files with their hive partition columns
(`date`, `sweep`). The warehouse is any fsspec URL: for s3:// (or any other remote store) the
fsspec filesystem is registered with DuckDB, which then reads through it, so no DuckDB
extension has to be downloaded.

The connection is confined to its warehouse unless asked otherwise (`full_engine`): once the
views exist, DuckDB may open files only under the warehouse's tables/ folder
(`allowed_directories`, then `enable_external_access = false`, then `lock_configuration`, so
no query can loosen it), loads and installs no extension, and `run_query` takes exactly one
read-only statement (a SELECT: also WITH, FROM, VALUES, SHOW, DESCRIBE, SUMMARIZE): no COPY
TO, ATTACH, INSTALL, SET, CREATE, PRAGMA or second statement. A file of a table that is not
Parquet (judged by its PAR1 magic at both ends) is left out of its view with a warning.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import shutil
import tempfile
import threading

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq

from chakra_core import limits
from chakra_core.errors import ChakraError
from chakra_core.inputs import InputKindError, is_local, open_raw
from chakra_core.literal import files_below
from chakra_core.warehouse import catalog as catalogs
from chakra_core.warehouse import snapshots

_TABLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
PARQUET_MAGIC = b"PAR1"


class WarehouseError(ChakraError):
    """A warehouse that cannot be opened, or a query DuckDB refuses (its message, on one line)."""


def _quoted(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def open_warehouse(url: str, full_engine: bool = False, memory_limit: str = limits.QUERY_MEMORY,
                   as_of: str | None = None, since: str | None = None):
    """(DuckDB connection, {table: [parquet files]}, [warnings]) with a view per table of the
    warehouse as of `as_of` (None: now), its catalog's tables over the days from `since` on
    (None: every day; the report's day page reads its window, not the year); the connection
    confined to it unless full_engine (see the module docstring), its memory bounded by
    memory_limit (DuckDB's form: "2GB") and its spill files in a scratch folder of its own."""
    import duckdb

    fs, root = fsspec.core.url_to_fs(url)
    tables_root = root.rstrip("/") + "/tables"
    if not fs.isdir(tables_root):
        raise WarehouseError(f"{url}: no tables/ folder here; is this a warehouse written by the nightly flow?")
    local = is_local(fs)
    config = {} if full_engine else {"autoinstall_known_extensions": False, "autoload_known_extensions": False}
    con = duckdb.connect(config=config)
    if not local:
        con.register_filesystem(fs)
    scheme = "" if local else f"{fs.protocol[0] if isinstance(fs.protocol, tuple) else fs.protocol}://"
    warnings: list[str] = []
    files_by_table = _iceberg_views(con, url, fs, as_of, since, warnings)
    if as_of and not files_by_table:
        raise WarehouseError(f"{url}: --as-of needs the tables of an Iceberg catalog; this warehouse has none "
                             "(chakra migrate converts one)")
    for entry in sorted(fs.ls(tables_root, detail=False)):
        name = entry.rstrip("/").rsplit("/", 1)[-1]
        if name in files_by_table or not _TABLE_NAME.match(name) or not fs.isdir(entry):
            continue
        if local and os.path.islink(entry):  # never followed: a link to / would open every file on the machine
            warnings.append(f"{entry}: a symbolic link; a table is a folder of the warehouse, left out")
            continue
        files = _parquet_parts(fs, entry, warnings)
        files_by_table[name] = [scheme + f.lstrip("/") if scheme else f for f in files]
        if files:
            con.execute(f"CREATE VIEW {_identifier(name)} AS {_union(files_by_table[name])}")
    _bound(con, memory_limit)
    if not full_engine:
        _confine(con, scheme + tables_root.lstrip("/") if scheme else tables_root)
    return con, files_by_table, warnings


def _iceberg_views(con, url: str, fs, as_of: str | None, since: str | None,
                   warnings: list[str]) -> dict[str, list[str]]:
    """A view per table of the warehouse's catalog over one snapshot's files, with every column
    of the table's schema (an empty typed relation joined by name supplies those no file has)."""
    catalog = catalogs.open_catalog(url)
    if catalog is None:
        return {}
    at_ms = snapshots.as_of_ms(catalog, as_of)
    files_by_table: dict[str, list[str]] = {}
    for name in catalogs.table_names(catalog):
        table = catalogs.load(catalog, name)
        # (url, what DuckDB opens: a local disk's path, else the URL through the registered filesystem)
        located = [(f.url, fsspec.core.url_to_fs(f.url)[1] if is_local(fs) else f.url)
                   for f in snapshots.data_files(table, at_ms, since=since)]
        readable = [(url, path) for url, path in located if _checked(fs, url, path, warnings)]
        files_by_table[name] = [url for url, _ in readable]
        empty = f"_columns_of_{name}"
        con.register(empty, snapshots.arrow_schema(table).empty_table())
        source = (f"SELECT * FROM read_parquet([{', '.join(_quoted(path) for _, path in readable)}], "
                  "union_by_name = true) UNION ALL BY NAME " if readable else "")
        con.execute(f"CREATE VIEW {_identifier(name)} AS SELECT {_typed_columns(con, empty)} FROM "
                    f"({source}SELECT * FROM {_identifier(empty)}) AS stored")
    return files_by_table


def _typed_columns(con, typed: str) -> str:
    """Every column as the table declares it: a value a damaged file stored as another type (a
    number written as text) that does not convert reads as null, never as the column's type."""
    columns = con.execute(f"DESCRIBE {_identifier(typed)}").fetchall()
    return ", ".join(f"TRY_CAST({_identifier(c[0])} AS {c[1]}) AS {_identifier(c[0])}" for c in columns)


def _checked(fs, url: str, path: str, warnings: list[str]) -> bool:
    """Whether a committed data file (at `path` on fs) is Parquet; a warning naming it when not."""
    problem = _not_parquet(fs, path)
    if problem is not None:
        warnings.append(f"{url}: {problem}; left out of its table")
    return problem is None


def _identifier(name: str) -> str:
    """A table name as SQL: quoted, so that a folder named `select` (any keyword) is a table."""
    return '"' + name.replace('"', '""') + '"'


def _bound(con, memory_limit: str) -> None:
    """Memory and spill bounded; DuckDB's temporary directory (by default ./.tmp of the caller's
    folder, which its confinement then allows) a scratch folder of this process's own, removed
    at exit."""
    scratch = tempfile.mkdtemp(prefix="chakra-query-")
    atexit.register(shutil.rmtree, scratch, True)
    con.execute(f"SET memory_limit = {_quoted(memory_limit)}")
    con.execute(f"SET temp_directory = {_quoted(scratch)}")
    con.execute(f"SET max_temp_directory_size = {_quoted(limits.QUERY_SPILL)}")


def _parquet_parts(fs, table_folder: str, warnings: list[str]) -> list[str]:
    """The table's *.parquet files (not temporaries) that are Parquet; a warning for each other
    (a link among them is left out, never followed)."""
    parts = []
    for f in sorted(f for f in _files_below(fs, table_folder) if f.endswith(".parquet") and "/." not in f):
        problem = _not_parquet(fs, f)
        if problem is None:
            parts.append(f)
        else:
            warnings.append(f"{f}: {problem}; left out of its table")
    return parts


def _files_below(fs, folder: str) -> list[str]:
    """Files below the folder, listed (its name may hold `*` or `[`); on a local disk without
    following links, each link a name of its own (then left out as not a regular file)."""
    if not is_local(fs):
        return files_below(fs, folder)
    found = []
    for here, folders, files in os.walk(folder, followlinks=False):
        found += [os.path.join(here, name) for name in files]
        found += [os.path.join(here, name) for name in folders if os.path.islink(os.path.join(here, name))]
    return found


def _not_parquet(fs, path: str) -> str | None:
    """Why the file is not a Parquet file (a link, a FIFO, a device, no PAR1 magic at both ends, a
    footer that does not parse), or None."""
    if is_local(fs) and os.path.islink(path):
        return "a symbolic link, never followed (a table's parts are files of the warehouse)"
    try:
        with (open_raw(path) if is_local(fs) else fs.open(path, "rb")) as part:
            head = part.read(4)
            part.seek(-4 if head == PARQUET_MAGIC else 0, 2)
            if not (head == PARQUET_MAGIC and part.tell() >= 8 and part.read(4) == PARQUET_MAGIC):
                return "not a Parquet file (no PAR1 at both ends)"
            part.seek(0)
            try:  # the footer too: garbage between the marks must not end every query in an error
                pq.ParquetFile(part).metadata
            except (pa.ArrowException, ValueError) as exc:
                return f"a damaged Parquet file ({' '.join(str(exc).split())[:160]})"
            return None
    except InputKindError as exc:
        return exc.message
    except OSError as exc:
        raise WarehouseError(f"{path}: cannot read: {' '.join(str(exc).split())}") from None


def _confine(con, tables_root: str) -> None:
    """From now on the connection opens files only under tables_root, and cannot be unconfined."""
    con.execute(f"SET allowed_directories = [{_quoted(tables_root.rstrip('/') + '/')}]")
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")


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


ADDRESS_SPACE_MARGIN = 1 << 30  # beyond the process's size and the memory limit: DuckDB's own vectors, results


@contextlib.contextmanager
def address_space_bound(memory_limit: float):
    """The process's address space bounded for the block at its size now, plus the memory limit
    and a margin (RLIMIT_AS, soft limit only, restored after): DuckDB's memory_limit bounds its
    buffer manager, not a value a query builds (`repeat('x', 4000000000)` peaked at 7.9 GB with a
    2 GB limit); past the bound DuckDB's allocation fails and the query ends in one line. For a
    process that runs queries alone (`chakra query`): another thread's allocations meet it too."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/statm") as statm:
        size = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    bound = int(size + memory_limit + ADDRESS_SPACE_MARGIN)
    if hard != resource.RLIM_INFINITY:
        bound = min(bound, hard)
    resource.setrlimit(resource.RLIMIT_AS, (bound, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def run_query(con, sql: str, full_engine: bool = False, timeout_s: float = limits.QUERY_TIMEOUT_S):
    """The query's result as a pyarrow Table; DuckDB's complaint, or why the statement is not
    allowed (without full_engine: one read-only statement), as one WarehouseError line. A query
    still running after timeout_s seconds is interrupted."""
    import duckdb

    timer = threading.Timer(timeout_s, con.interrupt)
    timer.start()
    try:
        if not full_engine:
            _one_read_only_statement(con, sql)
        relation = con.sql(sql)
        return None if relation is None else relation.to_arrow_table()  # None: CREATE, SET, ...
    except duckdb.InterruptException:
        raise WarehouseError(f"the query ran past its time limit of {timeout_s:g} s (--timeout raises it)") from None
    except duckdb.OutOfMemoryException as exc:  # its first sentence: the rest is advice on DuckDB's settings
        said = " ".join(str(exc).split()).split(" Possible solutions")[0]
        raise WarehouseError(f"{said} (--memory-limit raises the limit)") from None
    except duckdb.Error as exc:
        raise WarehouseError(" ".join(str(exc).split())) from None
    finally:
        timer.cancel()


def _one_read_only_statement(con, sql: str) -> None:
    import duckdb

    statements = con.extract_statements(sql)
    if len(statements) != 1:
        raise WarehouseError(f"{len(statements)} statements: give one query (a SELECT); --unsafe-full-engine "
                             "runs any SQL")
    kind = statements[0].type
    if kind != duckdb.StatementType.SELECT:
        raise WarehouseError(f"{kind.name} is not a query: the warehouse is read with one SELECT (or WITH, FROM, "
                             "SHOW, DESCRIBE, SUMMARIZE); --unsafe-full-engine runs any SQL")


def table_counts(con, files_by_table: dict[str, list[str]]) -> list[dict]:
    """One row per table: its name, days, rows and files."""
    rows = []
    for name, files in files_by_table.items():
        days = {part for f in files for part in f.split("/") if part.startswith("date=")}
        count = con.execute(f"SELECT count(*) FROM {_identifier(name)}").fetchone()[0] if files else 0
        rows.append({"table": name, "days": len(days), "rows": count, "files": len(files)})
    return rows
