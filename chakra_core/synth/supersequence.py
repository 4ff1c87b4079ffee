"""Shortest common supersequences of integer sequences: one program that every rank's sequence is a subsequence of.

The synthesizer samples SPMD programs: every rank runs the same token sequence and skips
the point-to-point operations its position in the job does not have (the first stage of a
pipeline receives nothing from before it). A job whose ranks differ (the stages of a
pipeline) is turned into such a program by merging its distinct rank sequences pairwise:
the longest common subsequence is shared, everything else kept in order.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

MAX_CELLS = 40_000_000  # LCS table size (int32) above which a pair is not merged


def lcs_table(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(len(a)+1) x (len(b)+1) longest-common-subsequence lengths, a row at a time: a row is
    max(the row above, the diagonal + match) carried forward by a running maximum."""
    table = np.zeros((len(a) + 1, len(b) + 1), np.int32)
    for i in range(1, len(a) + 1):
        above = table[i - 1]
        step = np.maximum(above[1:], above[:-1] + (b == a[i - 1]))
        table[i, 1:] = np.maximum.accumulate(step)
    return table


def supersequence(a: np.ndarray, b: np.ndarray) -> list[tuple[int, int]]:
    """A shortest common supersequence of a and b as (index in a or -1, index in b or -1)
    pairs in order (both set where the element is shared)."""
    table = lcs_table(a, b)
    i, j = len(a), len(b)
    out: list[tuple[int, int]] = []
    while i or j:
        if i and j and a[i - 1] == b[j - 1]:
            out.append((i - 1, j - 1))
            i, j = i - 1, j - 1
        elif i and (not j or table[i - 1, j] >= table[i, j - 1]):
            out.append((i - 1, -1))
            i -= 1
        else:
            out.append((-1, j - 1))
            j -= 1
    out.reverse()
    return out


def merge(keys: Sequence[np.ndarray]) -> tuple[list[list[tuple[int, int]]], int]:
    """A common supersequence of every sequence in `keys`: for each position, the (sequence,
    index) elements merged into it, first sequence first; and how many sequences were too
    long to merge (left out)."""
    if not keys:
        return [], 0
    members = [[(0, i)] for i in range(len(keys[0]))]
    merged = np.asarray(keys[0])
    skipped = 0
    for s in range(1, len(keys)):
        other = np.asarray(keys[s])
        if (len(merged) + 1) * (len(other) + 1) > MAX_CELLS:
            skipped += 1
            continue
        pairs = supersequence(merged, other)
        members = [(members[i] if i >= 0 else []) + ([(s, j)] if j >= 0 else []) for i, j in pairs]
        merged = np.array([merged[i] if i >= 0 else other[j] for i, j in pairs], dtype=merged.dtype)
    return members, skipped
