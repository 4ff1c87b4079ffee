"""Untrusted input opened one way: only regular files, gunzipped within the expansion limit.

Every reader of input bytes (Chakra ETs, PyTorch ET and Kineto JSON, configuration documents,
simulator logs, job bundles) opens them through `open_input`. A local path is opened without
blocking and checked before a byte is read: a FIFO, a device (`/dev/zero`), a socket or a
folder is refused in one line instead of hanging or reading forever; a symbolic link is
followed to what it names, which must be a regular file too. Gzip input (by its magic bytes)
is inflated by `BoundedGzipFile`, which refuses a stream expanding beyond the `expansion`
limit. Other stores (s3://, memory://) hold only regular objects and are opened by fsspec.
"""

from __future__ import annotations

import contextlib
import gzip
import os
import stat
from collections.abc import Iterator
from typing import BinaryIO

import fsspec

from chakra_core import limits
from chakra_core.errors import ChakraFormatError

GZIP_MAGIC = b"\x1f\x8b"


class InputKindError(ChakraFormatError):
    """An input that is not a regular file (a FIFO, a device, a socket, a folder)."""


def file_kind(mode: int) -> str:
    """What a stat mode names, in words."""
    for test, what in ((stat.S_ISREG, "a regular file"), (stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return what
    return "not a regular file"


def is_local(fs) -> bool:
    """Whether an fsspec filesystem is the local disk (where links, FIFOs and devices live)."""
    protocol = fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)
    return "file" in protocol or "local" in protocol


def _open_local(path: str, url: str) -> BinaryIO:
    """The regular file at path, opened without blocking (a FIFO would wait for a writer)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise InputKindError(url, f"is {file_kind(mode)}; input must be a regular file")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


@contextlib.contextmanager
def open_raw(url: str) -> Iterator[BinaryIO]:
    """The bytes of url as stored (no gunzipping): a regular local file or a remote object."""
    fs, path = fsspec.core.url_to_fs(url)
    if is_local(fs):
        with _open_local(path, url) as f:
            yield f
        return
    with fs.open(path, "rb") as f:
        yield f


@contextlib.contextmanager
def open_input(url: str) -> Iterator[BinaryIO]:
    """The bytes of url, gunzipped (within the `expansion` limit) when they start with the gzip magic."""
    with open_raw(url) as raw:
        head = raw.read(2)
        raw.seek(0)
        if head == GZIP_MAGIC:
            with BoundedGzipFile(raw, url) as unzipped:
                yield unzipped
            return
        yield raw


def read_bounded(url: str, limit: str, what: str) -> bytes:
    """All of url's (gunzipped) bytes, refused beyond `limit` bytes before more are read."""
    most = limits.value(limit)
    with open_input(url) as f:
        data = f.read(most + 1)
    if len(data) > most:
        raise limits.LimitExceeded(url, limit, f"{what} too large (over {most:,} bytes)")
    return data


def bounded_lines(f: BinaryIO, max_line_bytes: int) -> Iterator[str]:
    """Lines of a binary file as text (undecodable bytes replaced); a line longer than
    max_line_bytes is cut there and the rest of it skipped, so that no line fills memory."""
    while True:
        line = f.readline(max_line_bytes)
        if not line:
            return
        if len(line) == max_line_bytes and not line.endswith(b"\n"):
            while (rest := f.readline(max_line_bytes)) and not rest.endswith(b"\n"):
                pass
        yield line.decode("utf-8", errors="replace")


class BoundedGzipFile(gzip.GzipFile):
    """Gunzips like GzipFile, but refuses a stream that expands beyond the `expansion` limit
    (a decompression bomb), judged from EXPANSION_FLOOR decompressed bytes on, so that a bomb
    is stopped after a fraction of a second instead of filling memory."""

    JUDGE_EVERY = 256 << 10  # decompressed bytes between two looks at the ratio

    def __init__(self, raw: BinaryIO, url: str):
        super().__init__(fileobj=raw, mode="rb")
        self._raw, self._url = raw, url
        self._max_ratio = limits.value("expansion")
        self._out, self._next_judgement = 0, limits.EXPANSION_FLOOR

    def _count(self, n: int) -> None:
        self._out += n
        if self._out >= self._next_judgement:
            self._next_judgement = self._out + self.JUDGE_EVERY
            consumed = max(1, self._raw.tell() - self._read_ahead())
            if self._out > consumed * self._max_ratio:
                raise limits.LimitExceeded(self._url, "expansion", f"{consumed:,} gzip bytes expanded to "
                                           f"{self._out:,} (x{self._out // consumed:,})")

    def _read_ahead(self) -> int:
        """Compressed bytes read from the file but not yet inflated (GzipFile reads 8 KiB ahead,
        which would hide a bomb's ratio for its first megabytes); 0 where Python's gzip differs."""
        padded = getattr(getattr(self._buffer, "raw", None), "_fp", None)
        try:
            return max(0, padded._length - padded._read)
        except (AttributeError, TypeError):
            return 0

    def read(self, size=-1):
        data = super().read(size)
        self._count(len(data))
        return data

    def read1(self, size=-1):
        data = super().read1(size)
        self._count(len(data))
        return data

    def readinto(self, b):
        n = super().readinto(b)
        self._count(n)
        return n

    def readline(self, size=-1):
        line = super().readline(size)  # GzipFile's readline goes around read()
        self._count(len(line))
        return line

    def seek(self, offset, whence=0):
        position = super().seek(offset, whence)
        self._out = position  # a rewind re-reads: count what is out from the new position
        self._next_judgement = max(position, limits.EXPANSION_FLOOR)
        return position
