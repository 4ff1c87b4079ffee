"""Files written whole or not at all.

Every file a command writes goes through `open_output`: the bytes go to a temporary name
beside the target (`.<name>.<random>.tmp`, which no reader's pattern matches) and are moved
onto the target only when writing finished without error. A failed or interrupted command
leaves the old file, or no file, never half of one. On a local disk the move is a rename; on
S3 an object appears whole when its upload completes.
"""

from __future__ import annotations

import contextlib
import gzip
import uuid
from collections.abc import Iterator
from typing import IO

import fsspec

from chakra_core.errors import ChakraError


class OutputError(ChakraError):
    """An output that cannot be written where it was asked for."""


def _temporary_beside(path: str) -> str:
    folder, _, name = path.rpartition("/")
    return f"{folder}/.{name}.{uuid.uuid4().hex[:12]}.tmp" if folder else f".{name}.{uuid.uuid4().hex[:12]}.tmp"


@contextlib.contextmanager
def open_output(url: str, mode: str = "wb", gzipped: bool | None = None) -> Iterator[IO]:
    """Write `url` atomically; text for mode "w", bytes for "wb". gzipped (default: the URL
    ends in .gz) compresses what is written."""
    fs, path = fsspec.core.url_to_fs(url)
    if fs.isdir(path):
        raise OutputError(f"{url}: is a folder; give a file name to write")
    folder = path.rpartition("/")[0]
    if folder:
        fs.makedirs(folder, exist_ok=True)
    temporary = _temporary_beside(path)
    try:
        with fs.open(temporary, "wb") as raw:
            with contextlib.ExitStack() as stack:
                sink = raw
                if url.endswith(".gz") if gzipped is None else gzipped:
                    sink = stack.enter_context(gzip.GzipFile(fileobj=raw, mode="wb"))
                if mode == "w":
                    sink = stack.enter_context(_text(sink))
                yield sink
        fs.mv(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError, FileNotFoundError):
            if fs.exists(temporary):
                fs.rm(temporary)
        raise


@contextlib.contextmanager
def _text(binary: IO) -> Iterator[IO]:
    import io

    wrapper = io.TextIOWrapper(binary, encoding="utf-8", newline="")
    try:
        yield wrapper
        wrapper.flush()
    finally:
        wrapper.detach()  # the binary file is closed by its owner
