"""Dependencies of the converted nodes, computed over whole columns with numpy.

Rows are the kept host nodes in id order (entry order = execution order per thread), so a
row number is also a time order. Both rules below only ever point from a row to an earlier
row, which is why the converted graph cannot have a cycle.

- program order: each row follows the latest earlier row of its thread that advances the
  thread (`advances`: false for a communication op that does not block its thread);
- tensor flow: a row that reads a storage depends on the latest earlier row that wrote it.
A per-node Python loop with a dict of last writers does the same at a few microseconds per
node; these sorts and searches do it at memory speed on traces of millions of nodes.
"""

from __future__ import annotations

import numpy as np


def program_order(threads: np.ndarray, advances: np.ndarray) -> np.ndarray:
    """Row of each row's program-order predecessor on its thread, -1 for the first."""
    m = len(threads)
    if m == 0:
        return np.zeros(0, np.int64)
    perm = np.argsort(threads, kind="stable")  # rows grouped by thread, in row order inside
    position = np.arange(m)
    group_start = np.zeros(m, np.int64)
    starts = np.flatnonzero(np.r_[True, threads[perm][1:] != threads[perm][:-1]])
    group_start[starts] = starts
    group_start = np.maximum.accumulate(group_start)
    last_advance = np.maximum.accumulate(np.where(advances[perm], position, -1))
    before = np.r_[-1, last_advance[:-1]]
    ctrl = np.full(m, -1, np.int64)
    valid = before >= group_start
    ctrl[perm[valid]] = perm[before[valid]]
    return ctrl


def csr_rows(ends: np.ndarray, row_of_host: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(row, value) pairs of a per-host-node CSR list, for kept host nodes only."""
    counts = np.diff(np.r_[0, ends])
    rows = np.repeat(row_of_host, counts)
    keep = rows >= 0
    return rows[keep], values[keep]


def tensor_flow(read_rows: np.ndarray, read_keys: np.ndarray, write_rows: np.ndarray, write_keys: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray]:
    """(reader row, writer row) pairs, unique: each read's latest earlier write of its storage."""
    if len(read_rows) == 0 or len(write_rows) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    codes = _dense_codes(np.r_[read_keys, write_keys])
    read_code, write_code = codes[: len(read_keys)], codes[len(read_keys):]
    span = int(max(read_rows.max(), write_rows.max())) + 1
    write_order = np.argsort(write_code * span + write_rows, kind="stable")
    sorted_write = (write_code * span + write_rows)[write_order]
    found = np.searchsorted(sorted_write, read_code * span + read_rows, side="left") - 1
    ok = found >= 0
    ok[ok] = write_code[write_order[found[ok]]] == read_code[ok]
    pairs = sorted_unique(read_rows[ok] * span + write_rows[write_order[found[ok]]])  # sorted by reader
    return pairs // span, pairs % span


def _dense_codes(keys: np.ndarray) -> np.ndarray:
    """0..k-1 per distinct key (np.unique's inverse, by one sort: its hash path is slower here)."""
    order = np.argsort(keys, kind="stable")
    ordered = keys[order]
    codes = np.empty(len(keys), np.int64)
    codes[order] = np.r_[0, np.cumsum(ordered[1:] != ordered[:-1])]
    return codes


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """np.unique by one sort."""
    values = np.sort(values)
    return values[np.r_[True, values[1:] != values[:-1]]] if len(values) else values
