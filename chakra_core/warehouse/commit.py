"""A night's data files published: compacted, then one atomic commit per table.

Compaction: a night's workers write a file per job (or rank); a table's files of the night are
rewritten into files of about TARGET_FILE_BYTES (streamed batch by batch: bounded memory),
so that a year of nights leaves a few files per table and day for every later query to open.
It runs where it is called: a Ray task per table in the nightly flow.

The commit: for each table, one Iceberg transaction that deletes the day's partition (what an
earlier run of the day published) and adds the night's files. A reader sees the table before
or after it, never between; a killed night commits nothing and the last snapshot stays whole.
Each snapshot carries the night's run id (`chakra query --as-of RUN_ID`).
"""

from __future__ import annotations

import datetime as dt
import os
import uuid
import warnings
from collections.abc import Callable, Mapping

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq

from chakra_core.outputs import open_output
from chakra_core.warehouse import catalog as catalogs
from chakra_core.warehouse.catalog import PARTITION
from chakra_core.warehouse.parts import COMPRESSION, part_url
from chakra_core.warehouse.snapshots import RUN_PROPERTY

TARGET_FILE_BYTES = int(os.environ.get("CHAKRA_TABLE_FILE_BYTES", 128 << 20))  # what compaction aims for
SNAPSHOT_DAYS = int(os.environ.get("CHAKRA_SNAPSHOT_DAYS", 35))  # how far back --as-of reaches
COMMIT_TRIES = 5  # a commit that lost a race with another night's (another day) is redone


def _expire_old_snapshots(iceberg) -> None:
    """Snapshots older than SNAPSHOT_DAYS forgotten (each commit copies the table's metadata, which
    grows with every snapshot kept: 1.3 s a table after a year of nights); the current one is kept."""
    cutoff = dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=SNAPSHOT_DAYS)
    current = iceberg.current_snapshot()
    if any(s.timestamp_ms < cutoff.timestamp() * 1000 and (current is None or s.snapshot_id != current.snapshot_id)
           for s in iceberg.snapshots()):
        iceberg.maintenance.expire_snapshots().older_than(cutoff).commit()


def compact(warehouse: str, table: str, date: str, files: list[str], run_id: str,
            target_bytes: int = TARGET_FILE_BYTES,
            rewrite: Callable[[pa.Table], pa.Table] | None = None) -> list[str]:
    """The files rewritten as few files of about target_bytes (on disk, compressed); the small
    ones stay until the commit that no longer needs them (remove_files). `rewrite`, when given,
    maps the whole night's rows first (it then holds them: for small tables only). One file or
    none is left as it is."""
    if len(files) <= 1 and rewrite is None:
        return files
    batches = _all_rows(files, rewrite) if rewrite else _batches(files)
    batch, out = next(batches, None), []
    while batch is not None:  # a file a turn, until its bytes reach the target
        url = part_url(warehouse, table, date, f"{run_id}-c{len(out)}-{uuid.uuid4().hex[:6]}")
        with open_output(url, "wb", gzipped=False) as sink, \
                pq.ParquetWriter(sink, batch.schema, compression=COMPRESSION) as writer:
            written = 0
            while batch is not None and written < target_bytes * 4:  # zstd keeps about a quarter of Arrow's bytes
                writer.write_batch(batch)
                written += batch.nbytes
                batch = next(batches, None)
        out.append(url)
    return out


def _batches(files: list[str]):
    for url in files:
        with fsspec.open(url, "rb") as f:
            yield from pq.ParquetFile(f).iter_batches(batch_size=65536)


def _all_rows(files: list[str], rewrite: Callable[[pa.Table], pa.Table]):
    tables = []
    for url in files:
        with fsspec.open(url, "rb") as f:
            tables.append(pq.read_table(f))
    if tables:
        yield from rewrite(pa.concat_tables(tables)).to_batches(max_chunksize=65536)


def remove_files(files: list[str]) -> None:
    """Data files no snapshot names (a night's small files once compacted and committed)."""
    for url in files:
        fs, path = fsspec.core.url_to_fs(url)
        fs.rm_file(path)


def commit_day(warehouse: str, date: str, files: Mapping[str, list[str]], schemas: Mapping[str, pa.Schema],
               run_id: str, committed: list[str] | None = None) -> dict[str, int]:
    """For each table: the day's partition replaced by `files` in one commit; table -> snapshot id.
    `committed`, when given, gets each table's name as its commit lands (what a failure leaves)."""
    from pyiceberg.exceptions import CommitFailedException
    from pyiceberg.expressions import EqualTo

    catalog = catalogs.open_catalog(warehouse, create=True)
    snapshots = {}
    for table, schema in schemas.items():
        for attempt in range(COMMIT_TRIES):
            iceberg = catalogs.ensure_table(catalog, warehouse, table, schema)
            properties = {RUN_PROPERTY: run_id}
            try:
                with iceberg.transaction() as tx:
                    with warnings.catch_warnings():  # "did not match any records": a first run of the day
                        warnings.simplefilter("ignore", UserWarning)
                        tx.delete(EqualTo(PARTITION, date), snapshot_properties=properties)
                    if files.get(table):
                        tx.add_files(files[table], snapshot_properties=properties, check_duplicate_files=False)
                break
            except CommitFailedException:
                if attempt == COMMIT_TRIES - 1:
                    raise
        iceberg = catalogs.load(catalog, table)
        _expire_old_snapshots(iceberg)  # (the current snapshot is kept)
        current = iceberg.current_snapshot()
        snapshots[table] = None if current is None else current.snapshot_id
        if committed is not None:
            committed.append(table)
    return snapshots
