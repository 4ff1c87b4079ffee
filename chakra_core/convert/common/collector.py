"""The cyclic garbage collector paused while a conversion builds what it keeps.

A conversion makes millions of small objects that live until it is done (events, columns, the
lookups of the analysis) and next to no reference cycles. The collector's passes over the
older generations walk all of them again each time they have grown by a quarter, for nothing:
a fifth of the CPU time of a long conversion (docs/benchmarks.md, 'Production-size traces').
What a conversion does leave in cycles is collected once the collector runs again.
"""

from __future__ import annotations

import contextlib
import functools
import gc
from collections.abc import Callable, Iterator
from typing import TypeVar

T = TypeVar("T")


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """No cyclic collection inside the block (nested blocks: the outermost one resumes it)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def with_collector_paused(function: Callable[..., T]) -> Callable[..., T]:
    """`function` run inside collector_paused()."""

    @functools.wraps(function)
    def paused(*args, **kwargs) -> T:
        with collector_paused():
            return function(*args, **kwargs)

    return paused
