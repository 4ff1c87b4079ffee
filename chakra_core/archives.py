"""Job bundles (.zip, .tar, .tar.gz) unpacked within the same limits as a gzip file.

An archive is judged before a byte of it is unpacked: its members are counted (the
`archive_members` limit) and the sizes they declare are added up, and more than `expansion`
times the archive's own size (floored at EXPANSION_FLOOR) is refused, as a gzip bomb is. A
zip member never yields more than it declares (zipfile stops there); a tar is read as a
stream, its gzip layer through BoundedGzipFile, and each member's header is judged before its
data is read. Members land flat in one folder under their base names: only regular files
(no links, devices, sparse members), two members of one base name are refused rather than
one kept, and no path in a member's name is ever followed.
"""

from __future__ import annotations

import os
import shutil
import tarfile
import zipfile
import zlib
from collections.abc import Iterator
from typing import IO

from chakra_core import limits
from chakra_core.errors import ChakraError
from chakra_core.inputs import BoundedGzipFile, GZIP_MAGIC, open_raw

COPY_CHUNK = 1 << 20


class ArchiveError(ChakraError):
    """A bundle that cannot be unpacked, or one beyond the limits: names the archive and the member."""


def unpack(src: str, target: str) -> list[str]:
    """Copies src's archive to target/.archive, then its regular members into target by base
    name; returns the notes on members left out (links, folders). Refused beyond the limits."""
    os.makedirs(target, exist_ok=True)
    local = os.path.join(target, ".archive")
    with open_raw(src) as f, open(local, "wb") as out:
        shutil.copyfileobj(f, out, COPY_CHUNK)
    budget = max(limits.EXPANSION_FLOOR, os.path.getsize(local)) * limits.value("expansion")
    try:
        if zipfile.is_zipfile(local):
            return _unpack_zip(src, local, target, budget)
        return _unpack_tar(src, local, target, budget)
    except (tarfile.TarError, zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, EOFError, OSError,
            NotImplementedError) as exc:  # a damaged bundle (offsets past its end too), or a compression not here
        raise ArchiveError(f"{src}: cannot unpack the job bundle: {' '.join(str(exc).split())}") from None
    finally:
        os.remove(local)


def _base_name(member: str) -> str:
    return member.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]


class _Budget:
    """The members and bytes an archive may still unpack, and the base names already taken."""

    def __init__(self, src: str, target: str, most_bytes: int):
        self.src, self.target, self.most_bytes, self.spent = src, target, most_bytes, 0
        self.members_left = limits.value("archive_members")
        self.names: dict[str, str] = {}

    def admit(self, member: str, size: int) -> str:
        """The target path of a regular member, once its count, size and name are allowed."""
        self.members_left -= 1
        if self.members_left < 0:
            raise limits.LimitExceeded(self.src, "archive_members", f"more than "
                                       f"{limits.value('archive_members'):,} members")
        self.spent += size
        if self.spent > self.most_bytes:
            raise limits.LimitExceeded(self.src, "expansion", f"its members declare {self.spent:,} bytes or more "
                                       f"by {member!r}, over {self.most_bytes:,} for an archive of its size")
        name = _base_name(member)
        if name in ("", ".", "..", ".archive"):
            raise ArchiveError(f"{self.src}: member {member!r} has no usable file name")
        if name in self.names:
            raise ArchiveError(f"{self.src}: members {self.names[name]!r} and {member!r} have one name, {name}; "
                               "a bundle holds each file once")
        self.names[name] = member
        return os.path.join(self.target, name)


def _copy(source: IO, path: str, size: int, src: str, member: str) -> None:
    """A member's bytes, never more than it declared."""
    with open(path, "xb") as out:
        copied = 0
        while chunk := source.read(min(COPY_CHUNK, size - copied + 1)):
            copied += len(chunk)
            if copied > size:
                raise ArchiveError(f"{src}: member {member!r} holds more than the {size:,} bytes it declares")
            out.write(chunk)


def _unpack_zip(src: str, local: str, target: str, budget_bytes: int) -> list[str]:
    budget = _Budget(src, target, budget_bytes)
    with zipfile.ZipFile(local) as z:
        infos = z.infolist()
        if len(infos) > limits.value("archive_members"):
            raise limits.LimitExceeded(src, "archive_members", f"{len(infos):,} members")
        wanted = []
        for info in infos:
            if info.is_dir():
                continue
            wanted.append((info, budget.admit(info.filename, info.file_size)))  # all judged before unpacking
        for info, path in wanted:
            with z.open(info) as member:
                _copy(member, path, info.file_size, src, info.filename)
    return []


def _tar_members(src: str, stream: IO) -> Iterator[tuple[tarfile.TarFile, tarfile.TarInfo]]:
    with tarfile.open(fileobj=stream, mode="r|") as t:
        for member in t:
            yield t, member


def _unpack_tar(src: str, local: str, target: str, budget_bytes: int) -> list[str]:
    notes, budget = [], _Budget(src, target, budget_bytes)
    with open(local, "rb") as raw:
        compressed = raw.read(2) == GZIP_MAGIC
        raw.seek(0)
        stream = BoundedGzipFile(raw, src) if compressed else raw
        for t, member in _tar_members(src, stream):
            if member.isdir():
                continue
            if not member.isfile() or member.issparse():
                notes.append(f"{member.name}: a {_tar_kind(member)} member of the bundle, not unpacked")
                budget.admit(member.name, 0)
                continue
            path = budget.admit(member.name, member.size)
            _copy(t.extractfile(member), path, member.size, src, member.name)
    return notes


def _tar_kind(member: tarfile.TarInfo) -> str:
    if member.issym() or member.islnk():
        return "link"
    if member.issparse():
        return "sparse"
    return "device or FIFO"
