"""Where things live in object storage (any fsspec URL; docs/pipeline.md, 'Where things live').

SOURCE/<YYYY-MM-DD>/<job_id>/...                      a day's drop
WAREHOUSE/traces/date=<d>/job=<id>/<id>.<R>.et       converted, one per rank
WAREHOUSE/.staging/traces/date=<d>/job=<id>-<run>/   a job's outputs until the whole job succeeded
WAREHOUSE/tables/<table>/date=<d>/part-0.parquet     one file per table and day
WAREHOUSE/tables/sweep_results/sweep=<name>/[date=<d>/]part-<n>-<run>.parquet   an ad hoc sweep (docs/sweeps.md)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq

T = TypeVar("T")
PART = "part-0.parquet"  # each table and day is ONE Parquet object (pipeline/tables.py)
RETRY_DELAYS = (1, 4, 10)  # seconds: an endpoint that is down for a moment, then back
# Not transient: retrying cannot help, and the caller says what they mean (e.g. no drop that day).
PERMANENT = (FileNotFoundError, PermissionError, NotADirectoryError, IsADirectoryError, ValueError, TypeError)


class StorageError(Exception):
    """Storage failed after its retries; the message is one line that names the URL."""


def retried(what: str, url: str, call: Callable[[], T], delays: tuple[float, ...] = RETRY_DELAYS) -> T:
    """call(), retried with backoff when storage fails transiently, then StorageError."""
    attempt = 0
    while True:
        try:
            return call()
        except PERMANENT:
            raise
        except Exception as e:  # noqa: BLE001 - fsspec backends raise their own types (botocore, aiohttp)
            if attempt == len(delays):
                detail = str(e).splitlines()[0] if str(e) else "no detail"
                raise StorageError(f"{what} {url} failed {attempt + 1} times: {type(e).__name__}: {detail}") from None
            time.sleep(delays[attempt])
            attempt += 1


def join(base: str, *parts: str) -> str:
    return "/".join([base.rstrip("/"), *[p.strip("/") for p in parts]])


def filesystem(url: str):
    """(fsspec filesystem, path) of a URL; s3 endpoint and credentials come from the environment."""
    return fsspec.core.url_to_fs(url)


def day_url(source: str, date: str) -> str:
    return join(source, date)


def traces_day(warehouse: str, date: str) -> str:
    """traces/date=<d>: the day's converted jobs, a folder each (the synthesizer trains on them all)."""
    return join(warehouse, "traces", f"date={date}")


def traces_dir(warehouse: str, date: str, job_id: str) -> str:
    return join(traces_day(warehouse, date), f"job={job_id}")


def synthetic_dir(warehouse: str, date: str) -> str:
    """synthetic/date=<d>: the day's synthesizer model and, under npus=<n>/, its synthetic jobs."""
    return join(warehouse, "synthetic", f"date={date}")


def sweep_jobs_dir(warehouse: str, name: str) -> str:
    """sweeps/<name>/jobs: the jobs an ad hoc sweep made (generated, converted, sampled), reused by its reruns."""
    return join(warehouse, "sweeps", name, "jobs")


def staging_day(warehouse: str, date: str) -> str:
    """Outside traces/: readers walk traces/date=<d>/ recursively (the synthesizer's training
    finds every <name>.<R>.et below it), so a staging folder there would pass for a job."""
    return join(warehouse, ".staging", "traces", f"date={date}")


def staging_dir(warehouse: str, date: str, job_id: str, run_id: str) -> str:
    return join(staging_day(warehouse, date), f"job={job_id}-{run_id}")


def remove(url: str) -> None:
    """Remove a folder and everything under it, if it is there."""
    fs, path = filesystem(url)
    if fs.exists(path):
        fs.rm(path, recursive=True)


@contextmanager
def staged(url: str) -> Iterator[str]:
    """An empty staging folder for the block; removed when the block ends, so a failure leaves
    nothing behind (a published folder is gone from there already)."""
    remove(url)  # what an attempt of the same run left when its worker died (Ray retries it)
    fs, path = filesystem(url)
    fs.makedirs(path, exist_ok=True)
    try:
        yield url
    finally:
        remove(url)


def publish(staging: str, final: str) -> None:
    """Move the staging folder's files into place, replacing what an earlier run published there.

    The old folder is removed first rather than overwritten: a reader (or a crash) in between
    finds the job missing or partly moved, never one run's ranks mixed with another's, and files
    an earlier run wrote that this one does not (more ranks) cannot linger; the job's manifest,
    written after this, marks it finished. File by file, as fs.mv of a folder fails on s3fs (it
    copies the folder's own entry too): each move is a rename on local disk and a copy then
    delete on object stores.
    """
    remove(final)
    fs, source = filesystem(staging)
    target = filesystem(final)[1].rstrip("/")
    fs.makedirs(target, exist_ok=True)
    for path in fs.find(source):
        fs.mv(path, f"{target}/{path[len(source.rstrip('/')) + 1:]}")


def table_dir(warehouse: str, table: str, date: str) -> str:
    """tables/<table>/date=<d> (an ad hoc sweep's parts: sweep_table_dir)."""
    return join(warehouse, "tables", table, f"date={date}")


def table_part(warehouse: str, table: str, date: str) -> str:
    """The one Parquet object of a table and day (pipeline/tables.py writes it)."""
    return join(table_dir(warehouse, table, date), PART)


def read_day(warehouse: str, table: str, date: str) -> pa.Table:
    fs, path = filesystem(table_part(warehouse, table, date))
    with fs.open(path, "rb") as f:
        return pq.read_table(f)


def sweep_table_dir(warehouse: str, name: str, date: str | None = None) -> str:
    """tables/sweep_results/sweep=<name>[/date=<d>]: an ad hoc sweep's parts (pipeline/sweep_table.py)."""
    return join(warehouse, "tables", "sweep_results", f"sweep={name}", *([f"date={date}"] if date else []))


def report_dir(warehouse: str, date: str) -> str:
    """Where the day's report page goes: WAREHOUSE/reports/date=<d>/ (index.html)."""
    return join(warehouse, "reports", f"date={date}")
