"""The warehouse's nightly tables: each declared once beside the code that makes its rows
(chakra_core.table_schema), gathered here for writers and readers, and an atomic per-day write.

Each table and day is ONE Parquet object, `tables/<table>/date=<d>/part-0.parquet`: written
under a temporary name beside it, then moved over the old one. On a local disk the move is a
rename; on S3 it is a copy onto the key, and a key is replaced whole. Either way a reader sees
the previous day's version or the new one, never half of it, and a re-run replaces the day
instead of adding rows. Every table is written for every day, empty ones included, so that a
re-run with fewer rejects clears the old ones. Columns are documented in docs/pipeline.md.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from chakra_core.outputs import open_output
from chakra_core.table_schema import TableSchema
from pipeline import history, jobs, represent, simulation, synthesis
from pipeline.layout import PART, read_day, table_part

__all__ = ["PART", "SCHEMAS", "TABLES", "empty", "from_rows", "read_day", "write_day"]

# table -> its declaration, from the module that makes its rows
TABLES: dict[str, TableSchema] = {t.name: t for t in (
    jobs.INGEST_LOG, jobs.REJECTS, jobs.TRACES, jobs.COLLECTIVES, simulation.SIM_RESULTS,
    represent.REPRESENTATIVES, synthesis.SYNTHETIC_TRACES, synthesis.FIDELITY,
    jobs.DEVICE_TIME, jobs.DEVICE_VERDICTS, jobs.KERNELS, history.JOB_HISTORY, history.REGRESSIONS,
)}
SCHEMAS: dict[str, pa.Schema] = {name: t.schema for name, t in TABLES.items()}  # as the files store them
# an ad hoc sweep's results (tables/sweep_results/sweep=<name>/[date=<d>/]part-<n>-<run>.parquet) start with
# sim_results' columns; pipeline/sweep_table.py adds the sweep's own and its parameter columns
SCHEMAS["sweep_results"] = SCHEMAS["sim_results"]


def empty(table: str) -> pa.Table:
    return TABLES[table].empty()


def from_rows(table: str, rows: list[dict]) -> pa.Table:
    """The rows as `table`; chakra_core.table_schema.TableRowError for a key the table lacks, a
    required column left out or null."""
    return TABLES[table].from_rows(rows)


def write_day(warehouse: str, table: str, date: str, data: pa.Table) -> str:
    """Replace `table` for `date` atomically; returns the object's URL."""
    data = TABLES[table].from_table(data)
    url = table_part(warehouse, table, date)
    with open_output(url, "wb", gzipped=False) as f:  # a temporary beside it (not *.parquet: globs skip it)
        pq.write_table(data, f, compression="zstd")
    return url
