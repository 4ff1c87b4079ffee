"""Files written whole or not at all, into what the output names.

Every file a command writes goes through `open_output`. A new file, or a regular file already
there, is written to a temporary name beside the target (`.<name>.<random>.tmp`, which no
reader's pattern matches) and moved onto it only when writing finished without error: a failed
or interrupted command leaves the old file, or no file, never half of one. On a local disk the
move is a rename; on S3 an object appears whole when its upload completes.

What is not a regular file is never replaced: a symbolic link, a FIFO or a character device
(`/dev/stdout`, `/dev/null`, a pipe) is written through, as a shell's `>` would write it (not
atomically: no rename could keep the link or the device); a folder, a dangling link, a block
device or a socket is refused in one line.

`together()` makes several outputs one: inside it, the moves wait until the block ends without
error (then `afterwards` actions run, such as removing an earlier job's extra ranks), and a
failed block removes every temporary and leaves every earlier file as it was (a job's rank
files, groups and report are replaced as a set).
"""

from __future__ import annotations

import contextlib
import contextvars
import gzip
import io
import os
import stat
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import IO

import fsspec

from chakra_core.errors import ChakraError
from chakra_core.inputs import file_kind, is_local
from chakra_core.literal import move_file, remove_file


@dataclass
class _Set:
    """What the innermost `together()` block does when it ends well: moves, then actions."""

    moves: list = field(default_factory=list)  # (filesystem, temporary, target)
    actions: list[Callable[[], None]] = field(default_factory=list)


# what waits for the end of the innermost `together()` block
_PENDING: contextvars.ContextVar[_Set | None] = contextvars.ContextVar("chakra_pending_outputs", default=None)


class OutputError(ChakraError):
    """An output that cannot be written where it was asked for."""


def _temporary_beside(path: str) -> str:
    folder, _, name = path.rpartition("/")
    return f"{folder}/.{name}.{uuid.uuid4().hex[:12]}.tmp" if folder else f".{name}.{uuid.uuid4().hex[:12]}.tmp"


def _written_through(fs, path: str, url: str) -> bool:
    """Whether the local path names something to write through (a link, a FIFO, a character
    device) rather than replace; refuses what can be neither written through nor replaced."""
    if not is_local(fs):
        return False
    try:
        own = os.lstat(path).st_mode
    except FileNotFoundError:
        return False
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise OutputError(f"{url}: a symbolic link to nothing; give a file name to write") from None
    if stat.S_ISDIR(mode):
        raise OutputError(f"{url}: is a folder; give a file name to write")
    if stat.S_ISBLK(mode) or stat.S_ISSOCK(mode):
        raise OutputError(f"{url}: is {file_kind(mode)}; an output must be a file, a FIFO or a character device")
    return stat.S_ISLNK(own) or not stat.S_ISREG(mode)


@contextlib.contextmanager
def open_output(url: str, mode: str = "wb", gzipped: bool | None = None) -> Iterator[IO]:
    """Write `url` (atomically where it is a regular file or new); text for mode "w", bytes for
    "wb". gzipped (default: the URL ends in .gz) compresses what is written."""
    fs, path = fsspec.core.url_to_fs(url)
    compress = url.endswith(".gz") if gzipped is None else gzipped
    if _written_through(fs, path, url):
        with open(path, "wb") as raw, _encoded(raw, mode, compress) as sink:
            yield sink
        return
    if fs.isdir(path):
        raise OutputError(f"{url}: is a folder; give a file name to write")
    folder = path.rpartition("/")[0]
    if folder:
        fs.makedirs(folder, exist_ok=True)
    temporary = _temporary_beside(path)
    try:
        with fs.open(temporary, "wb") as raw, _encoded(raw, mode, compress) as sink:
            yield sink
        pending = _PENDING.get()
        if pending is None:
            move_file(fs, temporary, path)
        else:
            pending.moves.append((fs, temporary, path))
    except BaseException:
        _discard(fs, temporary)
        raise


@contextlib.contextmanager
def together() -> Iterator[None]:
    """Outputs opened inside the block are moved into place only when it ends without error,
    then the `afterwards` actions run; otherwise the temporaries are removed and the targets
    keep what they held. Inside another block, the outer block's end decides."""
    pending = _Set()
    token = _PENDING.set(pending)
    try:
        yield
    except BaseException:
        for fs, temporary, _ in pending.moves:
            _discard(fs, temporary)
        raise
    finally:
        _PENDING.reset(token)
    outer = _PENDING.get()
    if outer is not None:
        outer.moves += pending.moves
        outer.actions += pending.actions
        return
    for fs, temporary, path in pending.moves:
        move_file(fs, temporary, path)
    for action in pending.actions:
        action()


def afterwards(action: Callable[[], None]) -> None:
    """Runs action once the outputs of the enclosing `together()` block are in place (now,
    outside one): e.g. removing what an earlier set of files had and the new one does not."""
    pending = _PENDING.get()
    if pending is None:
        action()
    else:
        pending.actions.append(action)


def _discard(fs, temporary: str) -> None:
    with contextlib.suppress(OSError, FileNotFoundError):
        if fs.exists(temporary):
            remove_file(fs, temporary)


@contextlib.contextmanager
def _encoded(raw: IO, mode: str, compress: bool) -> Iterator[IO]:
    """raw, gzipped when compress, as text for mode "w"."""
    with contextlib.ExitStack() as stack:
        sink = raw
        if compress:
            sink = stack.enter_context(gzip.GzipFile(fileobj=raw, mode="wb"))
        if mode == "w":
            sink = stack.enter_context(_text(sink))
        yield sink


@contextlib.contextmanager
def _text(binary: IO) -> Iterator[IO]:
    wrapper = io.TextIOWrapper(binary, encoding="utf-8", newline="")
    try:
        yield wrapper
        wrapper.flush()
    finally:
        wrapper.detach()  # the binary file is closed by its owner
