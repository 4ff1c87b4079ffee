"""cli/heap.py and cli.configure_blas_threads: the process settings `chakra` makes before a command runs."""

from __future__ import annotations

import os
import subprocess
import sys

from chakra_core.cli.heap import M_TOP_PAD, M_TRIM_THRESHOLD, keep_freed_heap, mallopt


def test_keep_freed_heap_sets_glibc_mallopt():
    # this project's machines and containers run glibc: the settings must take
    assert os.confstr("CS_GNU_LIBC_VERSION").startswith("glibc")
    assert keep_freed_heap() is True
    # glibc's defaults back for the rest of this test process
    assert mallopt(M_TRIM_THRESHOLD, 128 << 10) is True and mallopt(M_TOP_PAD, 128 << 10) is True


def _threads_after_numpy(env: dict) -> list[str]:
    """(OPENBLAS_NUM_THREADS, the process's thread count) once `chakra`'s set-up ran and numpy
    was imported, in a fresh interpreter."""
    code = ("import os, chakra_core.cli as cli; cli.configure_blas_threads(); import numpy; "
            "print(os.environ['OPENBLAS_NUM_THREADS'], len(os.listdir('/proc/self/task')))")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return done.stdout.split()


def test_chakra_runs_numpy_without_openblas_threads_unless_asked():
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    # one thread in all: OpenBLAS's spinning threads cost every command ~0.1 s of CPU
    assert _threads_after_numpy(env) == ["1", "1"]
    # a value the user gave is kept
    assert _threads_after_numpy({**env, "OPENBLAS_NUM_THREADS": "2"})[0] == "2"
