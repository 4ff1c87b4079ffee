"""fsspec calls that take a path as it is written.

fsspec's `rm`, `mv`, `copy` and `glob` read `*`, `?` and `[...]` in a path as a pattern on every
filesystem but the local disk (s3fs, memory://): removing `job=a*` removed every job folder, and
a job named `x[1]` was not found. Names in the warehouse come from the drop, so every call on a
path that holds one goes through here, where only calls that never expand a pattern are made
(`find`, `ls`, `rm_file`, `cp_file`, `rmdir`).
"""

from __future__ import annotations

import contextlib
import hashlib
import re

from chakra_core.inputs import is_local

SAFE_NAME = re.compile(r"[A-Za-z0-9._=+-]{1,120}")


def remove_file(fs, path: str) -> None:
    """Removes one file (not a folder); literal on every filesystem."""
    if is_local(fs):
        fs.rm(path)  # LocalFileSystem.rm never globs
    else:
        fs.rm_file(path)


def remove_tree(fs, path: str) -> None:
    """Removes a folder and everything under it, or a file; nothing when it is not there."""
    if is_local(fs):
        if fs.exists(path) or fs.islink(path):
            fs.rm(path, recursive=True)
        return
    entries = fs.find(path, withdirs=True, detail=True)  # find lists below a prefix, never by pattern
    for name, info in entries.items():
        if info["type"] != "directory":
            fs.rm_file(name)
    for name in sorted((n for n, i in entries.items() if i["type"] == "directory"), reverse=True):
        with contextlib.suppress(OSError, FileNotFoundError):
            fs.rmdir(name)
    with contextlib.suppress(OSError, FileNotFoundError):
        fs.rmdir(path)  # memory:// keeps empty folders; object stores have none
    fs.invalidate_cache(path)


def move_file(fs, source: str, target: str) -> None:
    """Moves one file onto target (replacing it): a rename on the local disk, a copy then a
    delete elsewhere."""
    if is_local(fs):
        fs.mv(source, target)  # shutil.move: literal
        return
    fs.cp_file(source, target)
    fs.rm_file(source)


def files_below(fs, path: str) -> list[str]:
    """Every file below a folder, sorted (no pattern: the folder's own name may hold `*` or `[`)."""
    return sorted(fs.find(path))


def rank_siblings(fs, path: str) -> list[str]:
    """The entries of path's folder whose names start with path's last component and a dot
    (`<prefix>.*`), listed rather than globbed."""
    folder, _, name = path.rstrip("/").rpartition("/")
    try:
        listed = fs.ls(folder or ".", detail=False)
    except (FileNotFoundError, NotADirectoryError):
        return []
    return [p for p in listed if p.rstrip("/").rpartition("/")[2].startswith(name + ".")]


def file_name_of(text: str) -> str:
    """A name from data (a job id) as one file name that cannot leave its folder or be read as
    anything else: kept as it is when it is plain (letters, digits, `._=+-`, at most 120
    characters, not starting with a dot); else its plain characters (at most 60) and a hash of
    the whole, so that two names never share a file (`../../x` -> `x-<hash>`, a name with `://`,
    a NUL or 300 bytes alike)."""
    if SAFE_NAME.fullmatch(text) and not text.startswith("."):
        return text
    kept = re.sub(r"[^A-Za-z0-9._=+-]+", "_", text).strip("._")[:60]
    return f"{kept or 'name'}-{hashlib.sha256(text.encode('utf-8', 'surrogatepass')).hexdigest()[:12]}"

