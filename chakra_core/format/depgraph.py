"""Dependency-graph algorithms over flattened Arrow list columns and CSR arrays.

Shared by the validator (which reports every cycle group) and the feeder (which refuses a
graph it could never drain). Vectorised with numpy where the graph is large; the parts that
walk one node at a time (Kahn on long chains, Tarjan on what is left) are plain Python loops.
"""

from __future__ import annotations

from collections import deque

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def to_numpy(column, fill=None) -> np.ndarray:
    if fill is not None and column.null_count:
        column = pc.fill_null(column, fill)
    return column.to_numpy(zero_copy_only=False) if isinstance(column, pa.Array) else column.to_numpy()


def flat_list(column: pa.ChunkedArray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(values, row of each value) of a list<uint64> column."""
    lengths = to_numpy(pc.list_value_length(column), 0)
    values = to_numpy(pc.list_flatten(column)) if lengths.sum() else np.zeros(0, np.uint64)
    return values.astype(np.uint64, copy=False), np.repeat(np.arange(n, dtype=np.int64), lengths)


def lookup(sorted_unique: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Position of each value in sorted_unique, -1 where absent."""
    if not values.size:
        return np.zeros(0, np.int64)
    lo, hi = int(sorted_unique[0]), int(sorted_unique[-1])
    if hi - lo <= 4 * len(sorted_unique) + 4096:  # dense ids: a direct table beats hashing or bisection
        table = np.full(hi - lo + 1, -1, np.int64)
        table[(sorted_unique - np.uint64(lo)).astype(np.int64)] = np.arange(len(sorted_unique))
        inside = (values >= np.uint64(lo)) & (values <= np.uint64(hi))
        out = np.full(len(values), -1, np.int64)
        out[inside] = table[(values[inside] - np.uint64(lo)).astype(np.int64)]
        return out
    index = pc.index_in(pa.array(values, pa.uint64()), value_set=pa.array(sorted_unique, pa.uint64()))
    return to_numpy(index, -1).astype(np.int64)


def csr(n: int, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Offsets (n + 1) and targets of the edges src -> dst, grouped by source."""
    order = np.argsort(src)
    off = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(src, minlength=n), out=off[1:])
    return off, dst[order]


VECTOR_FRONTIER = 512  # below this many ready vertices, Kahn goes on in a plain Python loop
TARJAN_LIMIT = 100_000  # vertices on or between cycles beyond which only one cycle is reported


def cycle_candidates(n: int, src: np.ndarray, dst: np.ndarray, orders) -> np.ndarray:
    """Mask of the vertices that lie on a cycle or on a path between two cycles.

    Every vertex of a cycle lies between the two ends of some edge that goes backward in a
    vertex order (the cycle has to come back down to its lowest vertex). So only vertices
    covered by a backward edge in one order are kept: the order (each a callable giving every
    vertex a distinct position; None = vertex number = id order) that covers fewest wins, and
    real traces, written in dependency order, usually have no backward edge at all. Kahn's
    sort from the sources, then from the sinks, removes the rest.
    """
    cover = None
    for order in orders:
        pos = order() if order is not None else None
        ps, pd = (src, dst) if pos is None else (pos[src], pos[dst])
        back = ps > pd
        if not back.any():
            return np.zeros(n, bool)
        m = n if pos is None else int(pos.max()) + 1
        depth = np.cumsum(np.bincount(pd[back], minlength=m + 1) - np.bincount(ps[back] + 1, minlength=m + 1))
        covered = depth[:m] > 0
        covered = covered if pos is None else covered[pos]
        if cover is None or covered.sum() < cover.sum():
            cover = covered
    keep = cover[src] & cover[dst]
    src, dst = src[keep], dst[keep]
    left = kahn_leftover(n, src, dst)
    if not left.any():
        return left
    keep = left[src] & left[dst]
    return kahn_leftover(n, dst[keep], src[keep])


def kahn_leftover(n: int, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Kahn's topological sort; the mask of vertices it cannot order (on or after a cycle)."""
    off, targets = csr(n, src, dst)
    indeg = np.bincount(dst, minlength=n).astype(np.int64)
    frontier = np.flatnonzero(indeg == 0)
    # Wide frontiers: one numpy round per level.
    while frontier.size >= VECTOR_FRONTIER:
        starts = off[frontier]
        lengths = off[frontier + 1] - starts
        total = int(lengths.sum())
        if not total:
            return indeg > 0
        ends = np.cumsum(lengths)
        index = np.repeat(starts - (ends - lengths), lengths) + np.arange(total)
        children, counts = np.unique(targets[index], return_counts=True)
        indeg[children] -= counts
        frontier = children[indeg[children] == 0]
    if not frontier.size:
        return indeg > 0
    # Narrow frontiers (long chains): a scalar loop beats a numpy call per level.
    indeg_l, off_l, tgt_l = indeg.tolist(), off.tolist(), targets.tolist()
    stack = frontier.tolist()
    pop, push = stack.pop, stack.append
    while stack:
        u = pop()
        for v in tgt_l[off_l[u]:off_l[u + 1]]:
            d = indeg_l[v] - 1
            indeg_l[v] = d
            if not d:
                push(v)
    return np.array(indeg_l, np.int64) > 0


def strongly_connected(n: int, off: list[int], tgt: list[int]) -> list[tuple[list[int], list[int]]]:
    """Tarjan's algorithm without recursion: (component, label) for each component of 2+ vertices;
    label (one list shared by all) maps every vertex to its component's number, -1 if none."""
    index = [-1] * n
    low = [0] * n
    on_stack = [False] * n
    label = [-1] * n
    stack: list[int] = []
    found: list[list[int]] = []
    counter = 0
    for root in range(n):
        if index[root] >= 0:
            continue
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack[root] = True
        work = [[root, off[root]]]
        while work:
            frame = work[-1]
            v, i = frame
            if i < off[v + 1]:
                frame[1] = i + 1
                w = tgt[i]
                if index[w] < 0:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack[w] = True
                    work.append([w, off[w]])
                elif on_stack[w] and index[w] < low[v]:
                    low[v] = index[w]
                continue
            work.pop()
            if work:
                u = work[-1][0]
                if low[v] < low[u]:
                    low[u] = low[v]
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack[w] = False
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    for w in comp:
                        label[w] = len(found)
                    found.append(comp)
    return [(comp, label) for comp in found]


def one_cycle(comp: list[int], label: list[int], off: list[int], tgt: list[int], ids: list[int]) -> list[int]:
    """The node ids of a shortest cycle through the component's smallest-id vertex, in edge order."""
    start = min(comp, key=ids.__getitem__)
    mine = label[start]
    prev = {start: -1}
    queue = deque([start])
    while queue:
        u = queue.popleft()
        for v in tgt[off[u]:off[u + 1]]:
            if v == start:
                path = [u]
                while path[-1] != start:
                    path.append(prev[path[-1]])
                return [ids[w] for w in reversed(path)]
            if label[v] == mine and v not in prev:
                prev[v] = u
                queue.append(v)
    raise AssertionError("a strongly connected component without a cycle")


def walk_cycle(off: list[int], tgt: list[int], ids: list[int]) -> list[int]:
    """One cycle, found by following first out-edges (inside the candidates every vertex has one),
    as node ids starting at its smallest id."""
    seen = [-1] * (len(off) - 1)
    path: list[int] = []
    v = 0
    while seen[v] < 0:
        seen[v] = len(path)
        path.append(v)
        v = tgt[off[v]]
    ring = [ids[w] for w in path[seen[v]:]]
    k = ring.index(min(ring))
    return ring[k:] + ring[:k]
