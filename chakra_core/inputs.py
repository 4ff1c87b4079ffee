"""Untrusted input opened one way: only regular files, gunzipped within the expansion limit.

Every reader of input bytes (Chakra ETs, PyTorch ET and Kineto JSON, configuration documents,
simulator logs, job bundles) opens them through `open_input`. A local path is opened without
blocking and checked before a byte is read: a FIFO, a device (`/dev/zero`), a socket or a
folder is refused in one line instead of hanging or reading forever; a symbolic link is
followed to what it names, which must be a regular file too. Gzip input (by its magic bytes)
is inflated by `BoundedGzipFile`, which refuses a stream expanding beyond the `expansion`
limit. Other stores (s3://, memory://) hold only regular objects and are opened by fsspec.
Inside a `content_hashes(urls)` block those files are also hashed as they are read, so that a caller
who needs a file's contents and its sha256 reads it once.
"""

from __future__ import annotations

import contextlib
import contextvars
import gzip
import hashlib
import io
import os
import stat
from collections.abc import Iterable, Iterator
from typing import BinaryIO

import fsspec
from isal import igzip, isal_zlib

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
    """The bytes of url as stored (no gunzipping): a regular local file or a remote object.
    Inside a `content_hashes(urls)` block naming it, the bytes read are also hashed on their way."""
    fs, path = fsspec.core.url_to_fs(url)
    with (_open_local(path, url) if is_local(fs) else fs.open(path, "rb")) as f:
        hashes, key = _HASHES.get(), fs.unstrip_protocol(path)
        yield _HashedReads(f, hashes.progress(key)) if hashes is not None and key in hashes.keys else f


HASH_CHUNK = 4 << 20
_HASHES: contextvars.ContextVar[InputHashes | None] = contextvars.ContextVar("input_hashes", default=None)


class _Digest:
    """The sha256 of a file's first `length` bytes, extended by reads that reach past them."""

    def __init__(self):
        self.digest, self.length = hashlib.sha256(), 0
        self.whole = False  # a read ended at the end of the file with every byte before it hashed

    def saw(self, start: int, data, asked: int) -> None:
        """`data` read at `start` for a request of `asked` bytes (-1: all): fewer is the file's end."""
        if start <= self.length < start + len(data):
            self.digest.update(memoryview(data)[self.length - start:])
            self.length = start + len(data)
        if (asked < 0 or len(data) < asked) and start + len(data) == self.length:
            self.whole = True


class InputHashes:
    """The sha256 of the files named to a `content_hashes(urls)` block, taken from the bytes as the
    readers read them inside it, so that a caller who needs both the contents and the hash of a
    file (the nightly job: the hash says whether it changed) reads it once."""

    def __init__(self, urls: Iterable[str]):
        self.keys = {_key(url) for url in urls}
        self._digests: dict[str, _Digest] = {}

    def progress(self, key: str) -> _Digest:
        return self._digests.setdefault(key, _Digest())

    def of(self, url: str) -> str:
        """The sha256 of one of the files: what the readers left unread (all of it, for a file
        nobody opened) is read now."""
        digest = self.progress(_key(url))
        if not digest.whole:
            token = _HASHES.set(None)  # this read feeds the digest itself
            try:
                with open_raw(url) as f:
                    f.seek(digest.length)
                    while not digest.whole:
                        digest.saw(digest.length, f.read(HASH_CHUNK), HASH_CHUNK)
            finally:
                _HASHES.reset(token)
        return digest.digest.hexdigest()


def sha256(url: str) -> str:
    """The content hash of a regular file (anything else is refused, as by open_raw)."""
    return InputHashes([url]).of(url)


def _key(url: str) -> str:
    """One spelling of a file's URL (a path and its file:// URL are one file)."""
    fs, path = fsspec.core.url_to_fs(url)
    return fs.unstrip_protocol(path)


@contextlib.contextmanager
def content_hashes(urls: Iterable[str]) -> Iterator[InputHashes]:
    """Hash these files as they are read in the block (InputHashes.of gives the hash); other
    files are opened as usual (a local Chakra ET mapped rather than streamed)."""
    token = _HASHES.set(InputHashes(urls))
    try:
        yield _HASHES.get()
    finally:
        _HASHES.reset(token)


class _HashedReads:
    """A raw input file that feeds what is read from it to its _Digest. It has no fileno, so
    that readers stream it rather than map it (a mapped read would pass the digest by)."""

    def __init__(self, f: BinaryIO, digest: _Digest):
        self._f, self._digest, self._position = f, digest, 0

    def read(self, size: int = -1) -> bytes:
        data = self._f.read(size)
        self._advance(data, -1 if size is None else size)
        return data

    read1 = read

    def readinto(self, buffer) -> int:
        n = self._f.readinto(buffer)
        self._advance(memoryview(buffer)[:n], len(memoryview(buffer)))
        return n

    def readline(self, size: int = -1) -> bytes:
        line = self._f.readline(size)
        self._advance(line, 0 if line.endswith(b"\n") else size)  # no newline: the end, or `size` reached
        return line

    def _advance(self, data, asked: int) -> None:
        self._digest.saw(self._position, data, asked)
        self._position += len(data)

    def seek(self, offset: int, whence: int = 0) -> int:
        self._position = self._f.seek(offset, whence)
        return self._position

    def tell(self) -> int:
        return self._position

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return self._f.seekable()

    @property
    def closed(self) -> bool:
        return self._f.closed

    def close(self) -> None:
        self._f.close()

    def __iter__(self):
        return iter(self.readline, b"")


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


class BoundedGzipFile(igzip.IGzipFile):
    """Gunzips like GzipFile, with ISA-L's inflate (the `isal` package: about four times zlib's
    speed on traces), but refuses a stream that expands beyond the `expansion` limit (a
    decompression bomb), judged from EXPANSION_FLOOR decompressed bytes on, so that a bomb is
    stopped after a fraction of a second instead of filling memory. A corrupt deflate stream is
    an OSError (gzip.BadGzipFile) like every other damaged gzip file, not ISA-L's own error."""

    JUDGE_EVERY = 256 << 10  # decompressed bytes between two looks at the ratio

    def __init__(self, raw: BinaryIO, url: str):
        super().__init__(fileobj=raw, mode="rb")
        self._fed = _GrowingReads(raw)
        self._buffer = io.BufferedReader(igzip._IGzipReader(self._fed, _GrowingReads.MOST))
        self._url = url
        self._max_ratio = limits.value("expansion")
        self._out, self._next_judgement = 0, limits.EXPANSION_FLOOR

    def _count(self, n: int) -> None:
        self._out += n
        if self._out >= self._next_judgement:
            self._next_judgement = self._out + self.JUDGE_EVERY
            consumed = max(1, self._fed.position)
            if self._out > consumed * self._max_ratio:
                raise limits.LimitExceeded(self._url, "expansion", f"{consumed:,} gzip bytes expanded to "
                                           f"{self._out:,} (x{self._out // consumed:,})")

    def read(self, size=-1):
        with _gzip_errors_as_os_errors():
            data = super().read(size)
        self._count(len(data))
        return data

    def read1(self, size=-1):
        with _gzip_errors_as_os_errors():
            data = super().read1(size)
        self._count(len(data))
        return data

    def readinto(self, b):
        """Inflates straight into b (GzipFile's readinto would read a copy first)."""
        self._check_not_closed()
        with _gzip_errors_as_os_errors():
            n = self._buffer.readinto(b)
        self._count(n)
        return n

    def readline(self, size=-1):
        with _gzip_errors_as_os_errors():
            line = super().readline(size)
        self._count(len(line))
        return line

    def seek(self, offset, whence=0):
        with _gzip_errors_as_os_errors():
            position = super().seek(offset, whence)
        self._out = position  # a rewind re-reads: count what is out from the new position
        self._next_judgement = max(position, limits.EXPANSION_FLOOR)
        return position


@contextlib.contextmanager
def _gzip_errors_as_os_errors() -> Iterator[None]:
    """ISA-L's error for a corrupt deflate stream (zlib's would be zlib.error) raised as an
    OSError (gzip.BadGzipFile), as every other damaged gzip file is; and a member header (its
    extra field, name and comment) longer than ISA-L's input buffer, which a legal gzip file may
    have and no trace writer makes, refused as one (its size is the bound on what is read)."""
    try:
        yield
    except isal_zlib.error as exc:
        raise gzip.BadGzipFile(f"corrupt gzip stream: {exc}") from None
    except OverflowError as exc:
        if "header" not in str(exc):
            raise
        raise gzip.BadGzipFile(f"a gzip member header longer than {_GrowingReads.MOST:,} bytes (its extra field, "
                               "name or comment): not read") from None


class _GrowingReads:
    """The compressed file as the inflater reads it: in reads of at most an eighth of what it
    read before (256 bytes at first, MOST at most), so that the input it holds not yet inflated,
    unseen by the expansion ratio, is never much of it: a bomb is judged by its true ratio from
    its first 256 KiB out, as with GzipFile's exact count."""

    FIRST, MOST = 256, 8 << 10

    def __init__(self, raw: BinaryIO):
        self._raw, self.position = raw, 0

    def _next_read(self) -> int:
        return max(self.FIRST, min(self.MOST, self.position // 8))

    def readinto(self, b) -> int:
        with memoryview(b) as view, view[:self._next_read()] as part:
            n = self._raw.readinto(part)
        self.position += n
        return n

    def read(self, size: int = -1) -> bytes:  # what marks a file to the inflater (it calls readinto)
        data = bytearray(self._next_read() if size < 0 else size)
        return bytes(data[:self.readinto(data)])

    def seek(self, offset: int, whence: int = 0) -> int:
        self.position = self._raw.seek(offset, whence)
        return self.position

    def tell(self) -> int:
        return self.position

    def seekable(self) -> bool:
        return self._raw.seekable()
