"""glibc malloc settings for the `chakra` process (mallopt; elsewhere than glibc nothing is done).

Why `keep_freed_heap` for conversions: a conversion reads its trace in batches, and each batch
allocates and frees tens of MB. glibc hands the freed top of the heap back to the kernel as soon
as more than its trim threshold (128 KiB) is free, and the next batch faults the same pages in
again: at K = 37 of the issue 40 trace, about 0.5 s of the conversion's 1.5 s of system time.
Keeping up to 256 MB free at the top of the heap, and growing it 128 MB at a time, leaves those
pages mapped; the peak RSS grows by about 20 MiB (docs/benchmarks.md). Only `chakra convert`
and `chakra split` ask for it: other commands and library callers keep glibc's trimming.
"""

from __future__ import annotations

import ctypes
import sys

M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3  # malloc.h's mallopt parameters
TRIM_THRESHOLD_BYTES = 256 << 20
TOP_PAD_BYTES = 128 << 20


def mallopt(param: int, value: int) -> bool:
    """glibc's mallopt(param, value); False where it is not there or refuses the value."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        return ctypes.CDLL("libc.so.6").mallopt(param, value) == 1
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False


def keep_freed_heap() -> bool:
    """Keep freed memory at the heap's top mapped (see above); False where not set."""
    return mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES) and mallopt(M_TOP_PAD, TOP_PAD_BYTES)
