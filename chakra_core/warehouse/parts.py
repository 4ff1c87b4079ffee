"""A table's data files as the workers write them, before a night's commit publishes them.

`WAREHOUSE/tables/<table>/data/date=<d>/<name>.parquet`, each holding the declared columns and
the day (the partition Iceberg reads from the file's statistics). A worker writes the rows it
made (a job's, a rank's) and returns the file's URL; nothing reads a file until a commit names
it, so the files of a killed night are never seen (and a later night's are named apart by its
run id).
"""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pyarrow.parquet as pq

from chakra_core.outputs import open_output
from chakra_core.warehouse.catalog import PARTITION, table_location, with_partition

COMPRESSION = "zstd"


def data_folder(warehouse: str, table: str, date: str) -> str:
    return f"{table_location(warehouse, table)}/data/{PARTITION}={date}"


def part_url(warehouse: str, table: str, date: str, name: str) -> str:
    return f"{data_folder(warehouse, table, date)}/{name}.parquet"


def with_day(data: pa.Table, schema: pa.Schema, date: str) -> pa.Table:
    """The rows in the declared schema, with the day appended."""
    day = pa.array([dt.date.fromisoformat(date)] * data.num_rows, pa.date32())
    return data.select(schema.names).cast(schema).append_column(with_partition(schema).field(PARTITION), day)


def write_part(warehouse: str, table: str, date: str, name: str, data: pa.Table, schema: pa.Schema) -> str:
    """Write the rows (declared columns, `schema`) as one data file of the day; its URL."""
    url = part_url(warehouse, table, date, name)
    with open_output(url, "wb", gzipped=False) as f:  # a temporary beside it, then moved: never half a file
        pq.write_table(with_day(data, schema, date), f, compression=COMPRESSION)
    return url
