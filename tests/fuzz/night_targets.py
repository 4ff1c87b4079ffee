"""Fuzz targets of the nightly's own stores (issue 47): a day's lock holding anything, and a
committed job_history file replaced by damaged bytes or by a Parquet file of odd columns.

A lock must end in the lock taken (and given back) or in one line of DayLocked; a history file
costs at most its own rows: reading the history and comparing a night against it never raise.
"""

from __future__ import annotations

import io
import json
import os
import socket
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import strategies as st

from pipeline import tables
from pipeline.day_lock import DayLocked, day_lock, lock_url
from pipeline.layout import filesystem
from pipeline.nightly.history import read_history, regression_rows

DAY, NEXT_DAY = "2026-11-01", "2026-11-02"
ODD_VALUES = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20) | \
    st.lists(st.integers(), max_size=3)


def _history_row(job: str, value) -> dict:
    return {"job_id": job, "fingerprint": "f", "metric": "step_ns", "value": value, "unit": "ns", "run_id": "r"}


def _committed_history() -> tuple[str, Path]:
    """(warehouse, its one committed job_history data file)."""
    warehouse = tempfile.mkdtemp(prefix="fuzz-history-")
    tables.write_day(warehouse, "job_history", DAY, [_history_row("j", 5.0)])
    return warehouse, next(Path(warehouse, "tables", "job_history", "data").rglob("*.parquet"))


HISTORY_WAREHOUSE, HISTORY_FILE = _committed_history()  # one a process: a commit takes a second
REAL_HISTORY_BYTES = HISTORY_FILE.read_bytes()


@st.composite
def odd_history_file(draw, mutated) -> bytes:
    """A job_history data file's bytes: the real file's with random edits (`mutated(real)`, a
    strategy), or a Parquet file whose columns hold drawn values of any type (or are missing)."""
    if draw(st.booleans()):
        return draw(mutated(REAL_HISTORY_BYTES))
    columns = {name: [draw(ODD_VALUES)] for name in ("job_id", "fingerprint", "metric", "value", "unit")
               if draw(st.booleans())}
    sink = io.BytesIO()
    try:
        pq.write_table(pa.table(columns or {"x": [1]}), sink)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):  # values Arrow cannot type: the real file
        return REAL_HISTORY_BYTES
    return sink.getvalue()


def compared_against_damaged_history(data: bytes) -> None:
    """The file replaced in place: the next night reads its history (naming what it skipped)
    and compares its own day with it."""
    HISTORY_FILE.write_bytes(data)
    warned: list[str] = []
    history = read_history(HISTORY_WAREHOUSE, NEXT_DAY, warn=warned.append)
    assert all("\n" not in w for w in warned)
    regression_rows([_history_row("j", 7.0)], history, "r")


LOCK_FIELDS = st.fixed_dictionaries({}, optional={
    "host": st.just(socket.gethostname()) | ODD_VALUES, "pid": st.just(os.getpid()) | st.just(1) | ODD_VALUES,
    "since": st.just(time.time()) | ODD_VALUES, "started": ODD_VALUES, "token": ODD_VALUES})


@st.composite
def odd_lock(draw) -> tuple[bytes, bool]:
    """(a lock's bytes: drawn fields as JSON, or any bytes; whether it is older than a day)."""
    body = draw(st.binary(max_size=64) | LOCK_FIELDS.map(lambda d: json.dumps(d, allow_nan=True).encode()))
    return body, draw(st.booleans())


def lock_taken_or_refused(value: tuple[bytes, bool]) -> None:
    """The day's lock over the drawn one: taken and given back, or refused in one line; a lock
    older than a day is always taken over."""
    body, old = value
    warehouse = tempfile.mkdtemp(prefix="fuzz-lock-")
    fs, path = filesystem(lock_url(warehouse, DAY))
    fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
    Path(path).write_bytes(body)
    if old:
        then = time.time() - 2 * 24 * 3600
        os.utime(path, (then, then))
    try:
        with day_lock(warehouse, DAY):
            assert json.loads(Path(path).read_text())["pid"] == os.getpid()
    except DayLocked as exc:
        assert not old or "took the warehouse's lock" in str(exc), str(exc)
        assert "\n" not in str(exc)
        return
    assert not Path(path).exists()
