"""A day's drop, walked as untrusted: its job folders and files, and what in it must not be opened.

The walk never leaves the day's folder and never opens what is not a regular file: on a local
disk every entry is looked at without following it (lstat), and a symbolic link (dangling, to
a folder, to a device or FIFO, out of the drop, or even to a file inside it), a FIFO, a device
or a socket becomes a file with a `problem`, which the job rejects alone (its reason says what
the entry is, never what it points to or holds) while the rest of the job and of the night goes
on. Object stores hold regular objects only. A name holding a control character (a newline, a
NUL) is a problem too, shown escaped; a job folder whose name differs from an earlier one's only
in case is the same job dropped twice, and is rejected rather than processed and weighted twice.
"""

from __future__ import annotations

import os
import stat
import unicodedata

from chakra_core.inputs import file_kind, is_local
from chakra_core.terminal import printable
from pipeline.nightly.ingest import InputFile, JobInput, kind_in_job
from pipeline.layout import day_url, filesystem

REGULAR_FILES_ONLY = "a drop holds regular files only; not read"


def _name_problem(name: str) -> str | None:
    if printable(name) != name:
        return f"{printable(name)}: the name holds a control character or a bidirectional control; not read"
    return None


# A job's name is a folder and a file prefix in the warehouse (job=<id>/<id>.<R>.et,
# <id>.comm_groups.json, staging's job=<id>-<run>): they must fit a file name (255 bytes).
MAX_JOB_NAME_BYTES = 200


def _job_name_problem(name: str) -> str | None:
    size = len(name.encode("utf-8", "surrogateescape"))
    if size > MAX_JOB_NAME_BYTES:
        return (f"{printable(name)[:60]}...: a job name of {size} bytes; at most {MAX_JOB_NAME_BYTES}, so that the"
                " warehouse's file names of the job fit 255 bytes")
    return _name_problem(name)


def _identity(name: str) -> str:
    """What tells two jobs apart for a person: not case, Unicode form (NFC or NFD é) or invisible
    characters (a zero-width space)."""
    return "".join(c for c in unicodedata.normalize("NFKC", name) if unicodedata.category(c) != "Cf").casefold()


def _link_problem(path: str, root: str) -> str:
    """What a symbolic link inside the drop names, in words (never the target itself)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return "a symbolic link to nothing"
    real = os.path.realpath(path)
    if not real.startswith(os.path.realpath(root).rstrip("/") + "/"):
        return "a symbolic link out of the drop"
    return f"a symbolic link to {file_kind(mode)}"


def _local_files(folder: str, root: str, relative: str = "") -> list[tuple[str, str, int, str | None]]:
    """(storage path, path relative to folder, bytes, problem) of every entry below a local
    folder, walked without following links (stack, not recursion)."""
    found, pending = [], [(folder, relative)]
    while pending:
        here, prefix = pending.pop()
        with os.scandir(here) as entries:
            for entry in entries:
                name = f"{prefix}{entry.name}"
                info = entry.stat(follow_symlinks=False)
                if stat.S_ISDIR(info.st_mode):
                    pending.append((entry.path, f"{name}/"))
                    continue
                problem = (None if stat.S_ISREG(info.st_mode) else
                           _link_problem(entry.path, root) if stat.S_ISLNK(info.st_mode) else file_kind(info.st_mode))
                found.append((entry.path, name, info.st_size if problem is None else 0,
                              f"{printable(name)}: {problem}; {REGULAR_FILES_ONLY}" if problem else None))
    return sorted(found, key=lambda f: f[1])


def _top_level(fs, root: str) -> list[tuple[str, str, bool, int, str | None]]:
    """(storage path, name, is a job folder, bytes, problem) of each entry of the day folder."""
    if not is_local(fs):
        return [(e["name"].rstrip("/"), e["name"].rstrip("/").rsplit("/", 1)[-1], e["type"] == "directory",
                 int(e.get("size") or 0), None) for e in fs.ls(root, detail=True)]
    entries = []
    with os.scandir(root) as listing:
        for entry in listing:
            info = entry.stat(follow_symlinks=False)
            mode = info.st_mode
            if stat.S_ISDIR(mode) or stat.S_ISREG(mode):
                entries.append((entry.path, entry.name, stat.S_ISDIR(mode), info.st_size, None))
            else:
                what = _link_problem(entry.path, root) if stat.S_ISLNK(mode) else file_kind(mode)
                entries.append((entry.path, entry.name, False, 0,
                                f"{printable(entry.name)}: {what}; {REGULAR_FILES_ONLY}"))
    return entries


def _job_files(fs, path: str, root: str) -> list[tuple[str, str, int, str | None]]:
    if is_local(fs):
        return _local_files(path, root)
    return [(p, p[len(path.rstrip("/")) + 1:], int(info.get("size") or 0), None)
            for p, info in sorted(fs.find(path, detail=True).items())]


def list_day(source: str, date: str) -> tuple[list[JobInput], list[InputFile]]:
    """The day's job folders, and files lying outside any job folder (with their problems)."""
    day = day_url(source, date)
    fs, root = filesystem(day)
    if not fs.exists(root):
        raise FileNotFoundError(f"{day}: no drop for {date}")
    jobs, loose, first_of = [], [], {}
    for path, name, is_job, size, problem in sorted(_top_level(fs, root), key=lambda e: e[1]):
        if not is_job:
            loose.append(InputFile(fs.unstrip_protocol(path), printable(name), size, "unknown",
                                   problem or _name_problem(name)))
            continue
        job = JobInput(printable(name), fs.unstrip_protocol(path), problem=_job_name_problem(name))
        earlier = first_of.setdefault(_identity(name), job.job_id)
        if earlier != job.job_id and job.problem is None:
            job.problem = (f"{job.job_id}: the same job as {earlier}, its name differing only in case, Unicode form or"
                           " invisible characters; a job is processed once")
        for file_path, relative, file_size, file_problem in _job_files(fs, path, root):
            file_problem = file_problem or _name_problem(relative)  # a file with a problem is never opened
            kind = "unknown" if file_problem is not None else kind_in_job(fs, file_path, relative)
            job.files.append(InputFile(fs.unstrip_protocol(file_path), f"{job.job_id}/{printable(relative)}",
                                       file_size, kind, file_problem))
        jobs.append(job)
    return jobs, loose


