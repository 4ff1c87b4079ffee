"""Output for people and for pipes.

On a terminal, tables and progress bars are drawn for a person. When stdout is a pipe or a
log file, nothing is truncated, wrapped or coloured: every value and path is printed whole on
its line, so `chakra stats x.et | cat` and a cron log keep all of it. Progress goes to stderr,
and only when stderr is a terminal.
"""

from __future__ import annotations

import sys
import unicodedata

# Wide enough that rich never wraps or folds a row when the output is not a terminal.
_UNLIMITED_WIDTH = 1 << 20


# Characters that reorder the text around them (bidirectional embeddings, overrides, isolates
# and marks): in untrusted text they make `abc.et` display as another name.
BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def printable(text: str) -> str:
    """text with control characters (a newline, a NUL, an escape) and bidirectional controls
    written as escapes (\\n, \\x00, \\x1b, \\u202e): untrusted names in one-line messages,
    tables, GraphML and SVG."""
    if all(unicodedata.category(c) != "Cc" and c not in BIDI_CONTROLS for c in text):
        return text
    return "".join(c.encode("unicode_escape").decode("ascii") if unicodedata.category(c) == "Cc" or c in BIDI_CONTROLS
                   else c for c in text)


def _shown(text: str) -> str:
    """printable(text), keeping the line breaks and tabs of what the commands print themselves."""
    return "\n".join("\t".join(printable(part) for part in line.split("\t")) for line in text.split("\n"))


def human_bytes(size: float, compact: bool = False) -> str:
    """A size in binary units as humanize spells them (`512 Bytes`, `1.5 KiB`, `64.0 MiB`): the
    one way sizes are written for people. compact: without a trailing `.0` (`64 MiB`, axis ticks)."""
    import humanize

    text = humanize.naturalsize(size, binary=True, format="%.1f")
    return text.replace(".0 ", " ") if compact else text


def console():
    """A rich Console on stdout: the terminal's width there, unlimited width in a pipe. Text is
    text: no markup is read in it (a value `ok[/]` or `[red]x` prints as it is), and escape
    sequences and other control characters in it print escaped (OSC and CSI never reach the
    terminal); style goes in rich.text.Text objects."""
    from rich.console import Console

    class _TextConsole(Console):
        def render_str(self, text: str, **options):
            return super().render_str(_shown(text), **options)

    if sys.stdout.isatty():
        return _TextConsole(highlight=False, markup=False, emoji=False)
    return _TextConsole(highlight=False, markup=False, width=_UNLIMITED_WIDTH, soft_wrap=True, no_color=True,
                        emoji=False)


def plain_table(*columns: str, **options):
    """A rich Table without borders (columns apart by spaces), as the commands print them."""
    from rich.table import Table

    return Table(*columns, box=None, pad_edge=False, **options)


def for_a_person() -> bool:
    """True when stdout is a terminal, where long lists may be shortened."""
    return sys.stdout.isatty()


class Progress:
    """A progress bar per stage on stderr (silent when stderr is not a terminal), called as
    progress(label, done, total): bytes read per file for conversions, or done/total items
    (`items=True`) for stages that count files, jobs or nodes."""

    def __init__(self, items: bool = False):
        # Off a terminal there is nothing to draw, and rich is not even imported: start-up
        # of every command that a script or a pipeline runs.
        self._progress = _rich_progress(items) if sys.stderr.isatty() else None
        self._describe = "{}" if items else "reading {}"
        self._tasks: dict[str, int] = {}

    def __enter__(self):
        if self._progress is not None:
            self._progress.__enter__()
        return self

    def __exit__(self, *exc):
        if self._progress is not None:
            self._progress.__exit__(*exc)

    def __call__(self, label: str, done: int, total: int) -> None:
        if self._progress is None:
            return
        if label not in self._tasks:
            self._tasks[label] = self._progress.add_task(self._describe.format(label), total=total or None)
        self._progress.update(self._tasks[label], completed=done, total=total or None)


def _rich_progress(items: bool):
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        MofNCompleteColumn,
        TextColumn,
        TimeElapsedColumn,
    )
    from rich.progress import Progress as RichProgress

    stderr = Console(stderr=True)
    return RichProgress(TextColumn("{task.description}"), BarColumn(),
                        MofNCompleteColumn() if items else DownloadColumn(), TimeElapsedColumn(),
                        console=stderr, transient=True, disable=not stderr.is_terminal)
