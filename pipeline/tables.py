"""The warehouse's nightly tables: each declared once beside the code that makes its rows
(chakra_core.table_schema), gathered here for writers and readers, and the night's commit.

Each table is an Apache Iceberg table partitioned by day (chakra_core/warehouse/). A night's
workers write data files; `commit_night` compacts each table's files of the night (a Ray task
per table) and publishes them with one commit per table that replaces the day's partition. A
reader sees a table before or after the night, never half of it; a killed night leaves the last
snapshot whole; a re-run replaces its day and nothing else. Columns are documented in
docs/pipeline.md.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping

import pyarrow as pa

from chakra_core.table_schema import TableSchema
from chakra_core.warehouse import commit, parts, snapshots
from chakra_core.warehouse.catalog import table_location
from pipeline import simulation
from pipeline.nightly import colocation, history, jobs, night, represent, synthesis

__all__ = ["SCHEMAS", "TABLES", "commit_night", "empty", "from_rows", "read_day", "write_day", "write_rows"]

# table -> its declaration, from the module that makes its rows
TABLES: dict[str, TableSchema] = {t.name: t for t in (
    jobs.INGEST_LOG, jobs.REJECTS, jobs.TRACES, jobs.COLLECTIVES, simulation.SIM_RESULTS,
    represent.REPRESENTATIVES, synthesis.SYNTHETIC_TRACES, synthesis.FIDELITY,
    jobs.DEVICE_TIME, jobs.DEVICE_VERDICTS, jobs.KERNELS, jobs.STRAGGLERS, history.JOB_HISTORY, history.REGRESSIONS,
    night.NIGHTS, colocation.COLOCATION,
)}
SCHEMAS: dict[str, pa.Schema] = {name: t.schema for name, t in TABLES.items()}  # as the files store them
# an ad hoc sweep's results (tables/sweep_results/sweep=<name>/[date=<d>/]part-<n>-<run>.parquet) start with
# sim_results' columns; pipeline/sweep/table.py adds the sweep's own and its parameter columns
SCHEMAS["sweep_results"] = SCHEMAS["sim_results"]


def empty(table: str) -> pa.Table:
    return TABLES[table].empty()


def from_rows(table: str, rows: list[dict]) -> pa.Table:
    """The rows as `table`; chakra_core.table_schema.TableRowError for a key the table lacks, a
    required column left out or null."""
    return TABLES[table].from_rows(rows)


def write_rows(warehouse: str, table: str, date: str, name: str, rows: list[dict] | pa.Table) -> list[str]:
    """The rows as one data file of `table`'s day, not yet committed (none for no rows); its URL
    in a list. chakra_core.table_schema.TableRowError for rows that are not the table's."""
    declared = TABLES[table]
    data = declared.from_table(rows) if isinstance(rows, pa.Table) else declared.from_rows(rows)
    return [parts.write_part(warehouse, table, date, name, data, declared.schema)] if data.num_rows else []


def write_day(warehouse: str, table: str, date: str, data: pa.Table | list[dict]) -> str:
    """Replace `table`'s day with these rows in one commit (outside a night: a tool's or a test's
    warehouse); the table's location."""
    run_id = uuid.uuid4().hex[:12]
    files = write_rows(warehouse, table, date, f"{run_id}-day", data)
    commit.commit_day(warehouse, date, {table: files}, {table: TABLES[table].schema}, run_id)
    return table_location(warehouse, table)


def read_day(warehouse: str, table: str, date: str, as_of: str | None = None) -> pa.Table:
    """A committed table's rows of one day (no date column), as of now or `as_of`."""
    return snapshots.read_day(warehouse, table, date, as_of)


def mark_duplicates(ingest: pa.Table) -> pa.Table:
    """ingest_log of a night: a file whose content appeared earlier in the day (another job's
    identical copy, in job and file order) says which file it duplicates."""
    ingest = ingest.sort_by([("job_id", "ascending"), ("file", "ascending")])
    first: dict[str, str] = {}
    duplicate_of = []
    for sha, name in zip(ingest.column("sha256").to_pylist(), ingest.column("file").to_pylist()):
        duplicate_of.append(first.get(sha))
        first.setdefault(sha, name)
    i = ingest.schema.get_field_index("duplicate_of")
    return ingest.set_column(i, ingest.schema.field(i), pa.array(duplicate_of, pa.string()))


# per table, what compaction does to the whole night's rows besides rewriting them
REWRITES = {"ingest_log": mark_duplicates}


def commit_night(warehouse: str, date: str, files: Mapping[str, list[str]], run_id: str,
                 committed: list[str] | None = None) -> dict[str, int]:
    """Every nightly table's files of the night compacted (a Ray task per table when Ray runs)
    and committed, replacing the day; table -> its new snapshot id. `committed` gets the tables
    whose commit landed, one by one."""
    compacted = _compacted(warehouse, date, files, run_id)
    snapshot_ids = commit.commit_day(warehouse, date, compacted, {name: TABLES[name].schema for name in TABLES},
                                     run_id, committed)
    kept = {url for urls in compacted.values() for url in urls}
    commit.remove_files([url for urls in files.values() for url in urls if url not in kept])
    return snapshot_ids


def _compacted(warehouse: str, date: str, files: Mapping[str, list[str]], run_id: str) -> dict[str, list[str]]:
    import ray

    work = {name: urls for name, urls in files.items() if len(urls) > 1 or (urls and name in REWRITES)}
    out = {name: list(urls) for name, urls in files.items()}
    if not work:
        return out
    if ray.is_initialized():
        from pipeline.cluster import WORKER_RETRIES

        task = ray.remote(max_retries=WORKER_RETRIES)(commit.compact)
        refs = {name: task.remote(warehouse, name, date, urls, run_id, rewrite=REWRITES.get(name))
                for name, urls in work.items()}
        out.update({name: ray.get(ref) for name, ref in refs.items()})
    else:
        out.update({name: commit.compact(warehouse, name, date, urls, run_id, rewrite=REWRITES.get(name))
                    for name, urls in work.items()})
    return out
