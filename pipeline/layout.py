"""Where things live in object storage (any fsspec URL; docs/pipeline.md, 'Where things live').

SOURCE/<YYYY-MM-DD>/<job_id>/...                      a day's drop
WAREHOUSE/traces/date=<d>/job=<id>/<id>.<R>.et       converted, one per rank
WAREHOUSE/.staging/traces/date=<d>/job=<id>-<run>/   a job's outputs until the whole job succeeded
WAREHOUSE/tables/<table>/                            an Iceberg table (chakra_core/warehouse/): metadata/, data/date=<d>/
WAREHOUSE/tables/sweep_results/sweep=<name>/[date=<d>/]part-<n>-<run>.parquet   an ad hoc sweep (docs/sweeps.md)
"""

from __future__ import annotations

import errno
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import fsspec

from chakra_core.literal import files_below, move_file, remove_tree

T = TypeVar("T")
RETRY_DELAYS = (1, 4, 10)  # seconds: an endpoint that is down for a moment, then back
# Not transient: retrying cannot help, and the caller says what they mean (e.g. no drop that day).
PERMANENT = (FileNotFoundError, PermissionError, NotADirectoryError, IsADirectoryError, ValueError, TypeError)
# Storage that cannot take the write or the read (full, read-only, no rights): waiting does not help.
STORAGE_PERMANENT = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EFBIG,
                     errno.ENOTDIR}  # a warehouse or drop path through a file: the storage is set up wrong
STORAGE_TRANSIENT = {errno.ETIMEDOUT, errno.ECONNRESET, errno.ECONNREFUSED, errno.ECONNABORTED, errno.EHOSTUNREACH,
                     errno.ENETUNREACH, errno.ENETDOWN, errno.EAGAIN, errno.EPIPE, errno.EIO}
# botocore's and aiohttp's words for a store that is slow or away for a moment
TRANSIENT_NAMES = ("Timeout", "EndpointConnectionError", "ConnectionClosedError", "ClientConnectionError",
                   "ServerDisconnectedError", "SlowDown", "ServiceUnavailable", "RequestTimeout", "Throttl")


class StorageError(Exception):
    """Storage failed (after its retries, when the fault was transient); the message is one line
    that names the storage. Never a reason to reject an input."""


def storage_fault(exc: BaseException) -> str | None:
    """'transient' or 'permanent' when exc is a fault of the storage (space, rights, a vanished
    bucket, a timeout, a dropped connection), None when it is not (bad input, a bug)."""
    if isinstance(exc, StorageError):
        return "permanent"
    names = " ".join(type(c).__name__ for c in type(exc).__mro__) + " " + str(exc)[:200]
    if isinstance(exc, (TimeoutError, ConnectionError)) or any(n in names for n in TRANSIENT_NAMES):
        return "transient"
    if isinstance(exc, OSError) and exc.errno in STORAGE_TRANSIENT:
        return "transient"
    if isinstance(exc, OSError) and exc.errno in STORAGE_PERMANENT or isinstance(exc, PermissionError):
        return "permanent"
    if isinstance(exc, FileNotFoundError) and ("bucket" in str(exc).lower() or "NoSuchBucket" in names):
        return "permanent"  # s3fs's word for a bucket that is gone
    return None



def raise_if_storage(exc: BaseException, while_doing: str) -> None:
    """A fault of the storage (full, no rights, a bucket gone, a timeout) is not the input's: it
    ends the run as one StorageError line saying what was being done; anything else is left to
    the caller."""
    if storage_fault(exc) is not None:
        raise StorageError(f"storage failed while {while_doing}: {describe(exc)}") from None


def describe(exc: BaseException) -> str:
    """An exception as one line: an OSError by its code's words and the path it names."""
    if isinstance(exc, StorageError):
        return str(exc)
    if isinstance(exc, OSError) and exc.errno is not None and exc.strerror:
        where = f" ({exc.filename})" if exc.filename else ""
        return f"{exc.strerror} [{errno.errorcode.get(exc.errno, exc.errno)}]{where}"
    detail = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {detail or 'no detail'}"


def retried(what: str, url: str, call: Callable[[], T], delays: tuple[float, ...] = RETRY_DELAYS) -> T:
    """call(), retried with backoff when storage fails transiently, then StorageError; a
    permanent fault of storage (full, no rights, no bucket) is StorageError at once."""
    attempt = 0
    while True:
        try:
            return call()
        except Exception as e:  # noqa: BLE001 - fsspec backends raise their own types (botocore, aiohttp)
            fault = storage_fault(e)
            if fault == "permanent":
                raise StorageError(f"{what} {url}: {describe(e)}") from None
            if fault is None and isinstance(e, PERMANENT):
                raise
            if attempt == len(delays):
                raise StorageError(f"{what} {url} failed {attempt + 1} times: {describe(e)}") from None
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
        remove_tree(fs, path)  # literal: a job named `a*` is not every job


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
    for path in files_below(fs, source):
        move_file(fs, path, f"{target}/{path[len(source.rstrip('/')) + 1:]}")


def sweep_table_dir(warehouse: str, name: str, date: str | None = None) -> str:
    """tables/sweep_results/sweep=<name>[/date=<d>]: an ad hoc sweep's parts (pipeline/sweep/table.py)."""
    return join(warehouse, "tables", "sweep_results", f"sweep={name}", *([f"date={date}"] if date else []))


def report_dir(warehouse: str, date: str) -> str:
    """Where the day's report page goes: WAREHOUSE/reports/date=<d>/ (index.html)."""
    return join(warehouse, "reports", f"date={date}")
