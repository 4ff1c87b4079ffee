"""cli/heap.py: the glibc heap settings `chakra convert` makes before streaming a trace."""

from __future__ import annotations

import os

from chakra_core.cli.heap import M_TOP_PAD, M_TRIM_THRESHOLD, keep_freed_heap, mallopt


def test_keep_freed_heap_sets_glibc_mallopt():
    # this project's machines and containers run glibc: the settings must take
    assert os.confstr("CS_GNU_LIBC_VERSION").startswith("glibc")
    assert keep_freed_heap() is True
    # glibc's defaults back for the rest of this test process
    assert mallopt(M_TRIM_THRESHOLD, 128 << 10) is True and mallopt(M_TOP_PAD, 128 << 10) is True
