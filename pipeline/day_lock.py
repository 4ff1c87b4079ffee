"""One run of a day at a time: `WAREHOUSE/.locks/date=<d>.json` names who runs the day now.

The lock is taken by creating its object exclusively (O_EXCL on a disk, If-None-Match on S3),
so of two runs of one day started together one is refused. It is taken over when it is a dead
run's: older than a day (by the store's time of writing or by its own `since`), wherever that
run was; on this host, a process that is gone, or a live process that is not the one that took
it (its start time differs: the pid was reused); or a lock
that cannot be read as one (half written, damaged) once it is older than a minute (a run that
is creating it right now writes it within that). Whatever the lock holds is data: read bounded,
never trusted for its types, shown as text. Something else in the lock's place (a folder, a
FIFO) is not a lock: the night is refused in one line saying what to remove.
"""

from __future__ import annotations

import json
import math
import os
import socket
import stat
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from chakra_core.inputs import is_local
from pipeline.cluster import process_start
from pipeline.layout import filesystem, join

LOCK_STALE_SECONDS = 24 * 3600  # a lock older than a day is a dead run's, wherever it ran
UNREADABLE_GRACE_SECONDS = 60  # a lock that does not read as one is a dead run's after this
MAX_LOCK_BYTES = 4096  # a lock is a small JSON object: more is not read
MAX_PID = 1 << 22  # Linux's largest pid_max


class DayLocked(Exception):
    """Another run of the day holds the warehouse's lock (or the lock's place holds something
    else); the message is one line."""


def lock_url(warehouse: str, date: str) -> str:
    """.locks/date=<d>.json: who runs the day now (host, pid, its start, since)."""
    return join(warehouse, ".locks", f"date={date}.json")


@contextmanager
def day_lock(warehouse: str, date: str) -> Iterator[None]:
    """The day's lock for the block (see the module's docstring)."""
    url = lock_url(warehouse, date)
    fs, path = filesystem(url)
    me = {"host": socket.gethostname(), "pid": os.getpid(), "started": process_start(os.getpid()),
          "since": time.time(), "token": uuid.uuid4().hex}
    fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
    if not _create(fs, path, me):
        held = _holder(fs, path, url)
        if not _stale(held):
            raise DayLocked(f"another run of {date} holds the warehouse's lock ({url}: {_shown(held)}); wait for it "
                            "to end, or remove the lock if that run is dead")
        fs.rm_file(path)
        if not _create(fs, path, me):
            raise DayLocked(f"another run of {date} took the warehouse's lock ({url}) just now")
    try:
        yield
    finally:
        if _holder(fs, path, url).get("token") == me["token"]:
            fs.rm_file(path)


def _create(fs, path: str, holder: dict) -> bool:
    try:
        with fs.open(path, "xb") as f:
            f.write(json.dumps(holder).encode())
    except (FileExistsError, IsADirectoryError):
        return False
    return True


def _holder(fs, path: str, url: str) -> dict:
    """The lock's fields as read ({} when it is gone), with `age` (seconds since it was written)
    and `problem` where it does not read as a lock."""
    try:
        info = fs.info(path)
    except FileNotFoundError:
        return {}
    local_kind = os.stat(path).st_mode if is_local(fs) else None
    if info.get("type") != "file" or (local_kind is not None and not stat.S_ISREG(local_kind)):
        raise DayLocked(f"{url} is not a lock (a folder, FIFO or device in the lock's place): remove it, then re-run")
    age = time.time() - _modified(info)
    if info.get("size", 0) > MAX_LOCK_BYTES:
        return {"problem": f"{info['size']:,} bytes, not a lock", "age": age}
    try:
        held = json.loads(fs.cat_file(path))
    except FileNotFoundError:
        return {}
    except ValueError:
        return {"problem": "not JSON", "age": age}
    if not isinstance(held, dict) or not _well_formed(held):
        return {"problem": "not a lock's fields", "age": age}
    return {**held, "age": age}


def _modified(info: dict) -> float:
    """When the object was written, in seconds since the epoch (fsspec's fields differ by store)."""
    value = info.get("mtime", info.get("LastModified", info.get("last_modified")))
    if hasattr(value, "timestamp"):
        return value.timestamp()
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else time.time()


def _well_formed(held: dict) -> bool:
    since, pid = held.get("since"), held.get("pid")
    return (isinstance(held.get("host"), str) and len(held["host"]) <= 255
            and isinstance(pid, int) and not isinstance(pid, bool) and 0 < pid <= MAX_PID
            and isinstance(since, (int, float)) and math.isfinite(since) and 0 <= since <= time.time() + 3600)


def _stale(held: dict) -> bool:
    """Whether the lock is a dead run's (see the module's docstring)."""
    if not held:
        return True  # gone meanwhile
    if "problem" in held:
        return held["age"] > UNREADABLE_GRACE_SECONDS
    if max(held["age"], time.time() - held["since"]) > LOCK_STALE_SECONDS:  # the file's age or the one it says
        return True
    if held["host"] != socket.gethostname():
        return False
    try:
        os.kill(held["pid"], 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    started = held.get("started")
    return isinstance(started, str) and process_start(held["pid"]) not in (None, started)


def _shown(held: dict) -> str:
    """Who holds the lock, as text (its values are data: repr'd, not formatted)."""
    if "problem" in held:
        return f"a lock that cannot be read ({held['problem']}), written {held['age']:.0f} s ago"
    since = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(held["since"]))
    return f"host {held['host']!r}, pid {held['pid']}, since {since}"
