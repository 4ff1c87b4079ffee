"""Sets of time intervals as sorted, disjoint [start, end) pairs of int64 numpy arrays.

`union` turns any intervals (overlapping, unsorted, empty ones included) into such a set; the
other functions take sets and return sets: `intersect`, `subtract`, `clip` to a window, and
`measure`, the time a set covers. Vectorised (a sort and a few searchsorted calls), so that
the device analysis of a trace with thousands of kernels costs milliseconds.
"""

from __future__ import annotations

import numpy as np

Intervals = tuple[np.ndarray, np.ndarray]
EMPTY: Intervals = (np.zeros(0, np.int64), np.zeros(0, np.int64))


def union(starts, ends) -> Intervals:
    """The set covered by the intervals [starts[i], ends[i]) (empty ones ignored)."""
    starts, ends = np.asarray(starts, np.int64), np.asarray(ends, np.int64)
    keep = ends > starts
    starts, ends = starts[keep], ends[keep]
    if not len(starts):
        return EMPTY
    order = np.argsort(starts, kind="stable")
    starts, ends = starts[order], np.maximum.accumulate(ends[order])
    # a new run begins where an interval starts after everything before it has ended
    begins = np.r_[True, starts[1:] > ends[:-1]]
    first = np.flatnonzero(begins)
    last = np.r_[first[1:] - 1, len(starts) - 1]
    return starts[first], ends[last]


def measure(intervals: Intervals) -> int:
    return int((intervals[1] - intervals[0]).sum())


def _covered(intervals: Intervals, points: np.ndarray) -> np.ndarray:
    """For each point, whether the set holds it."""
    at = np.searchsorted(intervals[0], points, side="right") - 1
    inside = at >= 0
    inside[inside] = points[inside] < intervals[1][at[inside]]
    return inside


def _combine(a: Intervals, b: Intervals, keep) -> Intervals:
    """The elementary segments between the two sets' boundaries that `keep(in_a, in_b)` selects."""
    points = np.unique(np.concatenate([a[0], a[1], b[0], b[1]]))
    if len(points) < 2:
        return EMPTY
    lefts, rights = points[:-1], points[1:]
    chosen = keep(_covered(a, lefts), _covered(b, lefts))
    return union(lefts[chosen], rights[chosen])


def intersect(a: Intervals, b: Intervals) -> Intervals:
    return _combine(a, b, np.logical_and)


def subtract(a: Intervals, b: Intervals) -> Intervals:
    return _combine(a, b, lambda in_a, in_b: in_a & ~in_b)


def clip(intervals: Intervals, start: int, end: int) -> Intervals:
    """The part of the set inside [start, end)."""
    starts, ends = np.maximum(intervals[0], start), np.minimum(intervals[1], end)
    keep = ends > starts
    return starts[keep], ends[keep]
