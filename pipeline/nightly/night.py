"""The `nights` table: a row per night that committed, with its counts. The days a warehouse
holds are the days of this table (a day of no job has no other row anywhere)."""

from __future__ import annotations

import pyarrow as pa

from chakra_core.table_schema import TableSchema, column

COUNTS = ("jobs", "jobs_converted", "jobs_by_rank", "ranks", "nodes", "files_processed", "rejected_files")
NIGHTS = TableSchema("nights", (column("run_id", pa.string()),
                                *(column(name, pa.int64()) for name in (*COUNTS, "simulations"))))


def night_table(day, simulations: int) -> pa.Table:
    """The night's row from run_day's result (pipeline/nightly/run.py: DayResult)."""
    return NIGHTS.from_rows([{"run_id": day.run_id, **{name: getattr(day, name) for name in COUNTS},
                              "simulations": simulations}])
