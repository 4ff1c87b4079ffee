"""A graph feeder over one rank's node table, with feeder_v3's dependency semantics.

    from chakra_core.sim.workload.feeder import GraphFeeder
    feeder = GraphFeeder.from_file("trace.0.et")
    while feeder.has_nodes_to_issue():
        i = feeder.next_issuable()          # lowest id first, as ASTRA-sim's issue loop visits them
        ...                                 # simulate node i (feeder.ids[i], feeder.table row i)
        feeder.free_children(i)             # it finished: its children may become issuable

Semantics (docs/format.md, 'Dependencies and issue order'; feeder_v3 with
RESOLVE_DATA_DEPS = RESOLVE_CTRL_DEPS):

- A node is issuable only when every id in **both** its ``data_deps`` and its ``ctrl_deps`` has
  finished (unlike the legacy feeder, which ignores ``ctrl_deps``). A parent listed twice, or in
  both lists, counts once.
- A dependency on an id that no node has is fatal at construction (feeder_v3: "Node <id> in
  data_dep graph, but not found in index, file might be corrupted").
- A non-empty graph without a dependency-free node is refused (feeder_v3: "No dependancy free
  nodes found, there might be deadlocks"). An empty table gives an empty feeder (feeder_v3 also
  refuses a file without nodes; callers that care can test ``len(feeder) == 0``).
- Duplicate ids: one node per id; its body is the **last** row with that id and its
  dependencies are the **union** of the ``data_deps`` (and of the ``ctrl_deps``) of all its rows.
  ``feeder.table`` is that deduplicated table (merged dependency lists, last row's other fields).
- File order does not matter.
- Cycles (self-dependencies included) are an error at construction, naming one cycle's ids.
  feeder_v3 does not detect them (the nodes are silently never issued); here a graph whose nodes
  can never all be issued fails at load instead of stalling a simulation later.

Nodes are addressed by an internal index 0..n-1: the position in the deduplicated table (the
rows of the input that are the last row of their id, in input order). ``ids[index]`` is its id,
``index_of(id)`` / ``lookup(id)`` the reverse. Node life cycle::

    waiting --(all parents finished)--> issuable --next_issuable()/take()--> taken
    taken --push_back()--> issuable            taken --free_children()--> finished
    finished --remove_node()--> removed

Speed: construction is vectorised with numpy (CSR child lists, in-degrees, a cycle check that
costs O(edges) when ids or file order follow the dependencies, as every converter writes them;
otherwise a Kahn pass that goes level by level in numpy and per node in Python on narrow
frontiers). The issue-and-finish methods work on plain Python lists and a heap of ints.
Measured on a 2-core machine (tests/test_feeder.py prints the figures), 1,000,000 nodes and
1.9M edges (a chain plus a fan-in every 8th node): ids in dependency order, build 0.4-0.7 s and
drain (next_issuable -> free_children) 0.6-1.0 s; ids and rows shuffled, build 1.9-2.7 s (the
Kahn pass runs per node on a long chain) and drain 1.8-2.9 s (cache misses).
"""

from __future__ import annotations

from array import array
from heapq import heapify, heappop, heappush
from itertools import chain
from typing import Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from chakra_core.format.depgraph import (
    csr,
    cycle_candidates,
    flat_list,
    lookup,
    walk_cycle,
)
from chakra_core.errors import ChakraError

__all__ = ["FeederError", "GraphFeeder", "UnknownNodeError"]

# Node states.
WAITING, ISSUABLE, TAKEN, FINISHED, REMOVED = 0, 1, 2, 3, 4
STATE_NAMES = ("waiting", "issuable", "taken", "finished", "removed")

# Heap keys are (id << 32) | index: ascending key = ascending id, and the index comes back with a mask.
_SHIFT = 32
_MASK = (1 << _SHIFT) - 1
SHOWN_CYCLE_IDS = 20  # a cycle message lists at most this many ids


class FeederError(ChakraError):
    """A node table the feeder cannot run, or a feeder call out of turn; names file and node."""

    def __init__(self, path: str, message: str, node_id: int | None = None, missing_id: int | None = None,
                 cycle: list[int] | None = None):
        self.path = path
        self.message = message
        self.node_id = node_id
        self.missing_id = missing_id
        self.cycle = cycle  # ids of one dependency cycle, each depending on the one before it
        where = [path]
        if node_id is not None:
            where.append(f"node id {node_id}")
        super().__init__(f"{': '.join(where)}: {message}")


class UnknownNodeError(FeederError, KeyError):
    """lookup()/index_of() of an id that no (unremoved) node has."""

    __str__ = Exception.__str__  # not KeyError's repr-quoting


def _flat(typecode: str, values: np.ndarray) -> array:
    """values as an array.array of `typecode` (copied once, no Python int per value)."""
    flat = array(typecode)
    flat.frombytes(memoryview(np.ascontiguousarray(values, dtype=np.dtype(typecode))).cast("B"))
    return flat


def _cycle_text(cycle: list[int]) -> str:
    shown = " -> ".join(str(i) for i in cycle[:SHOWN_CYCLE_IDS])
    if len(cycle) > SHOWN_CYCLE_IDS:
        shown += f" -> ... ({len(cycle)} nodes)"
    return f"{shown} -> {cycle[0]} (a -> b: b depends on a)"


def _list_column(table: pa.Table, name: str, path: str) -> pa.Array | None:
    if name not in table.column_names:
        return None
    column = table.column(name)
    column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if not (pa.types.is_list(column.type) or pa.types.is_large_list(column.type)):
        raise FeederError(path, f"column {name} is {column.type}, not a list of ids")
    return column


class GraphFeeder:
    """Issuable-node bookkeeping for one rank's node table (see the module docstring)."""

    def __init__(self, table: pa.Table, path: str = "<table>"):
        self.path = path
        self._source = table
        self._table: pa.Table | None = None
        ids_raw, rank, index_of_rank = self._index_ids(table)
        # (the raw edges, repeats included, live only as long as it takes to find the unique ones)
        parent, child, indeg, coff = self._unique_edges(*self._dependency_edges(table, ids_raw, index_of_rank),
                                                        rank, index_of_rank)
        del ids_raw, index_of_rank
        self._refuse_unrunnable(parent, child, rank, indeg)
        del parent, rank  # (what _start builds is the feeder's own state: nothing else kept beside it)
        self._start(indeg, child, coff)

    def _index_ids(self, table: pa.Table) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Ids deduplicated: index i <-> the last row of its id, in row order. Returns the raw
        ids, each index's rank in ascending id order, and the index of each rank."""
        path, n_raw = self.path, table.num_rows
        if "id" not in table.column_names:
            raise FeederError(path, "the node table has no id column")
        id_col = table.column("id")
        if id_col.null_count:
            raise FeederError(path, f"column id has {id_col.null_count} null value(s)")
        try:
            id_col = pc.cast(id_col, pa.uint64()) if id_col.type != pa.uint64() else id_col
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise FeederError(path, f"column id cannot be read as uint64 ids: {exc}") from None
        ids_raw = np.asarray(id_col.to_numpy(), dtype=np.uint64)
        order = np.argsort(ids_raw, kind="stable")
        sorted_ids = ids_raw[order]
        is_last = np.ones(n_raw, bool)
        if n_raw:
            is_last[:-1] = sorted_ids[1:] != sorted_ids[:-1]
        self._uniq = sorted_ids if n_raw and is_last.all() else sorted_ids[is_last]  # the ids, ascending
        self.duplicates = n_raw - len(self._uniq)  # rows merged into an earlier-listed id
        if self.duplicates:
            last_rows = order[is_last]
            rows = np.sort(last_rows)
            index_of_rank = np.searchsorted(rows, last_rows)  # rank = position in ascending id order
            group = np.cumsum(is_last) - is_last  # rank of each sorted position's id
            row_index = np.empty(n_raw, np.int64)
            row_index[order] = index_of_rank[group]
        else:
            rows = np.arange(n_raw, dtype=np.int64)
            index_of_rank = order.astype(np.int64, copy=False)
            row_index = rows
        n = len(rows)
        self._n0 = n
        self.rows = rows  # rows[i]: the input row whose body node i has
        self._row_index = row_index  # index of the node each input row belongs to
        base_ids = ids_raw[rows] if self.duplicates else ids_raw
        base_ids.flags.writeable = False
        self._base_ids = base_ids
        self._ids_cache: np.ndarray | None = base_ids
        rank = np.empty(n, np.int64)
        rank[index_of_rank] = np.arange(n, dtype=np.int64)
        return ids_raw, rank, index_of_rank

    def _dependency_edges(self, table: pa.Table, ids_raw: np.ndarray,
                          index_of_rank: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Dependency edges parent -> child over indices (data and ctrl deps, repeats kept);
        a reference to an absent id is fatal, naming the first one."""
        path, n_raw, row_index = self.path, table.num_rows, self._row_index
        src_parts, dst_parts = [], []
        missing = None  # (row, kind, position) of the first missing reference
        n_missing = 0
        for kind_number, kind in enumerate(("data_deps", "ctrl_deps")):
            column = _list_column(table, kind, path)
            if column is None or not len(column):
                continue
            values, child_rows = flat_list(column, n_raw)
            if not values.size:
                continue
            position = lookup(self._uniq, values)
            absent = position < 0
            if absent.any():
                where = np.flatnonzero(absent)
                n_missing += len(where)
                first = (int(child_rows[where[0]]), kind_number, int(where[0]))
                if missing is None or first[:2] < missing[0][:2]:
                    missing = (first, kind, values)
                continue
            src_parts.append(index_of_rank[position])
            dst_parts.append(row_index[child_rows])
        if missing is not None:
            (row, _, at), kind, values = missing
            child_id, missing_id = int(ids_raw[row]), int(values[at])
            more = f"; {n_missing - 1} more reference(s) to absent ids" if n_missing > 1 else ""
            raise FeederError(
                path,
                f"depends on id {missing_id} ({kind}), but no node in the file has that id (feeder_v3 throws"
                f" 'Node {missing_id} in {kind[:-5]}_dep graph, but not found in index, file might be"
                f" corrupted'){more}",
                node_id=child_id, missing_id=missing_id)
        src = np.concatenate(src_parts) if src_parts else np.zeros(0, np.int64)
        dst = np.concatenate(dst_parts) if dst_parts else np.zeros(0, np.int64)
        return src, dst

    def _unique_edges(self, src: np.ndarray, dst: np.ndarray, rank: np.ndarray,
                      index_of_rank: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(parent, child) of each unique edge by parent then child id, in-degrees, and the
        children CSR offsets (each parent's children in ascending id order)."""
        n = self._n0
        key = src * max(n, 1) + rank[dst]
        key.sort(kind="stable")  # by parent, then child id; adaptive (fast on the usual near-sorted runs)
        if len(key) > 1:
            distinct = np.empty(len(key), bool)
            distinct[0] = True
            np.not_equal(key[1:], key[:-1], out=distinct[1:])
            if not distinct.all():
                key = key[distinct]  # a parent listed twice, or in both lists, counts once
        parent = key // max(n, 1)
        child = index_of_rank[key % max(n, 1)]
        indeg = np.bincount(child, minlength=n)
        coff = np.zeros(n + 1, np.int64)
        np.cumsum(np.bincount(parent, minlength=n), out=coff[1:])
        self.num_edges = len(key)
        narrow = np.int32 if n < 1 << 31 else np.int64  # (half the memory a big trace's edges would take)
        self._edges = (parent.astype(narrow), child.astype(narrow))  # for parents CSR, built on first use
        return parent, child, indeg, coff

    def _refuse_unrunnable(self, parent: np.ndarray, child: np.ndarray, rank: np.ndarray, indeg: np.ndarray) -> None:
        """Refuses what can never run: no root, then cycles (self-dependencies first)."""
        n = self._n0
        if n and not (indeg == 0).any():
            cycle = self._find_cycle(parent, child, rank)
            raise FeederError(
                self.path,
                f"none of the {n} node(s) is free of dependencies (feeder_v3 throws 'No dependancy free nodes"
                f" found, there might be deadlocks'); e.g. the cycle {_cycle_text(cycle)}",
                cycle=cycle)
        cycle = self._find_cycle(parent, child, rank)
        if cycle:
            raise FeederError(
                self.path, f"dependency cycle {_cycle_text(cycle)}; these nodes can never be issued",
                node_id=cycle[0], cycle=cycle)

    def _start(self, indeg: np.ndarray, child: np.ndarray, coff: np.ndarray) -> None:
        """The state the hot methods work on: flat arrays of machine ints (array.array), which
        index as fast as lists of Python ints do, in 4 or 8 bytes a value instead of about 40 (a
        million-node trace's state in tens of MB, not hundreds)."""
        n, base_ids = self._n0, self._base_ids
        code = "i" if max(n, len(child)) < 1 << 31 else "q"  # 4 bytes a value where every index and count fits
        self._pend = _flat(code, indeg)
        self._cidx = _flat(code, child)
        self._coff = _flat(code, coff)
        if int(base_ids.max(initial=0)) <= _MASK and n <= _MASK:
            self._key = _flat("Q", (base_ids << np.uint64(_SHIFT)) | np.arange(n, dtype=np.uint64))
        else:  # keys past 64 bits: Python ints
            self._key = [(i << _SHIFT) | k for k, i in enumerate(base_ids.tolist())]
        roots = np.flatnonzero(indeg == 0)
        self._state = _flat("b", np.where(indeg == 0, ISSUABLE, WAITING))
        self._heap: list[int] = [self._key[i] for i in roots.tolist()]
        heapify(self._heap)
        self._n_issuable = len(roots)
        self._remaining = n
        self._extra_children: dict[int, list[int]] = {}  # parent index -> children added by add_node
        self._added_ids: list[int] = []
        self._added_parents: dict[int, list[int]] = {}  # added node index -> its parent indices
        self._index: dict[int, int] | None = None  # id -> index, built on first lookup
        self._parents_csr: tuple[array, array] | None = None

    @classmethod
    def from_file(cls, url: str) -> "GraphFeeder":
        """Reads a Chakra ET (any fsspec URL) and builds its feeder."""
        from chakra_core.format.etfile import read_table

        return cls(read_table(url), path=url)

    # ------------------------------------------------------------ construction helpers

    def _find_cycle(self, parent: np.ndarray, child: np.ndarray, rank: np.ndarray) -> list[int]:
        """Ids of one dependency cycle (in edge order, from its smallest id), [] if the graph is acyclic."""
        n = self._n0
        loops = np.flatnonzero(parent == child)
        if loops.size:
            return [int(self._base_ids[parent[loops]].min())]
        if not parent.size:
            return []
        candidates = cycle_candidates(n, parent, child, (None, lambda: rank))
        verts = np.flatnonzero(candidates)
        if not verts.size:
            return []
        keep = candidates[parent] & candidates[child]
        local = np.full(n, -1, np.int64)
        local[verts] = np.arange(len(verts))
        off, tgt = csr(len(verts), local[parent[keep]], local[child[keep]])
        return walk_cycle(off.tolist(), tgt.tolist(), self._base_ids[verts].tolist())

    def _error(self, index: int, message: str) -> FeederError:
        node_id = int(self.ids[index]) if 0 <= index < len(self._state) else None
        return FeederError(self.path, message, node_id=node_id)

    def _check_state(self, index: int, wanted: int, call: str) -> None:
        if not isinstance(index, (int, np.integer)) or not 0 <= index < len(self._state):
            raise FeederError(self.path, f"{call}: no node has index {index!r}")
        state = self._state[index]
        if state != wanted:
            raise self._error(index, f"{call}: the node is {STATE_NAMES[state]}, not {STATE_NAMES[wanted]}")

    # ------------------------------------------------------------ ids

    @property
    def ids(self) -> np.ndarray:
        """Node ids by index (uint64, read-only), added nodes included."""
        if self._ids_cache is None:
            extra = np.array(self._added_ids, dtype=np.uint64)
            self._ids_cache = np.concatenate([self._base_ids, extra])
            self._ids_cache.flags.writeable = False
        return self._ids_cache

    def __len__(self) -> int:
        """Number of nodes (indices), finished and removed ones included."""
        return len(self._state)

    def lookup(self, node_id: int) -> int:
        """Index of the node with this id; UnknownNodeError (a FeederError and KeyError) if none."""
        index = self._index
        if index is None:
            index = self._index = dict(zip(self._base_ids.tolist(), range(self._n0)))
            index.update((i, self._n0 + k) for k, i in enumerate(self._added_ids))
            for k, state in enumerate(self._state):
                if state == REMOVED:
                    del index[int(self.ids[k])]
        try:
            return index[node_id]
        except (KeyError, TypeError):
            raise UnknownNodeError(self.path, f"no node has id {node_id!r}") from None

    index_of = lookup

    @property
    def table(self) -> pa.Table:
        """The deduplicated node table, row i = node i (the input itself when no id repeats).

        For a repeated id: the last row's fields, with data_deps and ctrl_deps the union of all
        its rows' lists (first-seen order). Nodes added by add_node are not in it.
        """
        if self._table is None:
            if not self.duplicates:
                self._table = self._source
            else:
                t = self._source.take(pa.array(self.rows))
                for kind in ("data_deps", "ctrl_deps"):
                    column = _list_column(self._source, kind, self.path)
                    if column is not None:
                        merged = self._merged_deps(column)
                        t = t.set_column(t.schema.get_field_index(kind), t.schema.field(kind), merged)
                self._table = t
        return self._table

    def _merged_deps(self, column: pa.Array) -> pa.Array:
        n_raw = self._source.num_rows
        values, child_rows = flat_list(column, n_raw)
        node = self._row_index[child_rows]
        repeated = np.bincount(self._row_index, minlength=self._n0)[node] > 1
        order = np.lexsort((values, node))  # stable: first-seen first within each (node, value)
        first = np.ones(len(order), bool)
        if len(order):
            s_node, s_val = node[order], values[order]
            first[1:] = (s_node[1:] != s_node[:-1]) | (s_val[1:] != s_val[:-1])
        keep = np.zeros(len(order), bool)
        keep[order[first]] = True
        keep |= ~repeated  # a node with one row keeps its list as it was
        kept = np.flatnonzero(keep)
        kept = kept[np.argsort(node[kept], kind="stable")]
        offsets = np.zeros(self._n0 + 1, np.int64)
        np.cumsum(np.bincount(node[kept], minlength=self._n0), out=offsets[1:])
        list_type = column.type
        offsets_type = pa.int64() if pa.types.is_large_list(list_type) else pa.int32()
        array_class = pa.LargeListArray if pa.types.is_large_list(list_type) else pa.ListArray
        merged = array_class.from_arrays(pa.array(offsets, offsets_type), pa.array(values[kept], pa.uint64()))
        return merged.cast(list_type)

    # ------------------------------------------------------------ the hot path

    def has_nodes_to_issue(self) -> bool:
        """Whether some issuable node has not been taken."""
        return self._n_issuable > 0

    def next_issuable(self) -> int | None:
        """Takes the issuable node with the lowest id and returns its index; None if there is none."""
        heap, state = self._heap, self._state
        while heap:
            i = heappop(heap) & _MASK
            if state[i] == ISSUABLE:  # else a stale entry (taken by take(), or pushed back twice)
                state[i] = TAKEN
                self._n_issuable -= 1
                return i
        return None

    def free_children(self, index: int) -> list[int]:
        """Marks a taken node finished; returns (ascending id, then added nodes) the children that
        became issuable, which are also in the issuable set now."""
        state = self._state
        if index < 0 or index >= len(state) or state[index] != TAKEN:
            self._check_state(index, TAKEN, "free_children")
        state[index] = FINISHED
        self._remaining -= 1
        pend, key, heap = self._pend, self._key, self._heap
        freed = []
        children = self._cidx[self._coff[index]:self._coff[index + 1]]
        if self._extra_children:  # children of nodes added by add_node
            children = chain(children, self._extra_children.pop(index, ()))
        for c in children:
            p = pend[c] - 1
            pend[c] = p
            if not p:
                state[c] = ISSUABLE
                heappush(heap, key[c])
                freed.append(c)
        self._n_issuable += len(freed)
        return freed

    def push_back(self, index: int) -> None:
        """Returns a taken node to the issuable set (its hardware slot was busy)."""
        state = self._state
        if index < 0 or index >= len(state) or state[index] != TAKEN:
            self._check_state(index, TAKEN, "push_back")
        state[index] = ISSUABLE
        heappush(self._heap, self._key[index])
        self._n_issuable += 1

    def issuable(self) -> list[int]:
        """The issuable nodes (not taken), ascending id, without taking them (ASTRA-sim's issue loop
        copies the free set into an ordered set the same way). O(k log k) for k issuable nodes."""
        state = self._state
        live = sorted({k for k in self._heap if state[k & _MASK] == ISSUABLE})
        self._heap = live  # a sorted list is a heap; stale and repeated entries are gone
        return [k & _MASK for k in live]

    def take(self, index: int) -> None:
        """Takes a specific issuable node (one from issuable())."""
        state = self._state
        if index < 0 or index >= len(state) or state[index] != ISSUABLE:
            self._check_state(index, ISSUABLE, "take")
        state[index] = TAKEN  # its heap entry goes stale and is skipped
        self._n_issuable -= 1

    def save_state(self) -> tuple:
        """The issue-and-finish state, for restore_state (a simulator that runs a job again);
        not for feeders with nodes added by add_node."""
        if self._added_ids or self._extra_children:
            raise FeederError(self.path, "save_state: nodes were added to the graph")
        return self._pend[:], self._state[:], list(self._heap), self._n_issuable, self._remaining

    def restore_state(self, saved: tuple) -> None:
        """Back to the state save_state returned."""
        pend, state, heap, self._n_issuable, self._remaining = saved
        self._pend, self._state, self._heap = pend[:], state[:], list(heap)

    # ------------------------------------------------------------ dynamic graphs

    def add_node(self, node_id: int, data_deps: Iterable[int] = (), ctrl_deps: Iterable[int] = ()) -> int:
        """Adds a node whose parents (ids of existing, unremoved nodes) are given; returns its index.

        Finished parents count as met, so a node whose parents have all finished is issuable at
        once. The id must not be in use. The node is not in ``table``.
        """
        node_id = int(node_id)
        if not 0 <= node_id < 2**64:
            raise FeederError(self.path, f"add_node: id {node_id} is not a uint64")
        try:
            self.lookup(node_id)
        except UnknownNodeError:
            pass
        else:
            raise FeederError(self.path, "add_node: a node with this id exists already", node_id=node_id)
        parents: list[int] = []
        for kind, deps in (("data_deps", data_deps), ("ctrl_deps", ctrl_deps)):
            for dep in deps:
                if int(dep) == node_id:
                    raise FeederError(self.path, f"add_node: the node depends on itself ({kind}), a cycle",
                                      node_id=node_id, cycle=[node_id])
                try:
                    parents.append(self.lookup(int(dep)))
                except UnknownNodeError:
                    raise FeederError(self.path, f"add_node: depends on id {dep} ({kind}), but no node has"
                                      " that id", node_id=node_id, missing_id=int(dep)) from None
        parents = sorted(set(parents))
        index = len(self._state)
        if index > _MASK:
            raise FeederError(self.path, "add_node: too many nodes")
        waiting = [p for p in parents if self._state[p] < FINISHED]
        for p in waiting:
            self._extra_children.setdefault(p, []).append(index)
        self._added_ids.append(node_id)
        self._ids_cache = None
        self._index[node_id] = index  # built by the lookup above
        self._added_parents[index] = parents
        key = (node_id << _SHIFT) | index
        if isinstance(self._key, array) and key >> 64:  # past the flat array's 64 bits
            self._key = self._key.tolist()
        self._key.append(key)
        self._pend.append(len(waiting))
        self._coff.append(self._coff[-1])  # no static children
        self._remaining += 1
        if waiting:
            self._state.append(WAITING)
        else:
            self._state.append(ISSUABLE)
            heappush(self._heap, self._key[index])
            self._n_issuable += 1
        return index

    def remove_node(self, index: int) -> None:
        """Drops a finished node's bookkeeping: its id is free again (lookup fails, add_node may
        reuse it); its index stays allocated, in state removed."""
        self._check_state(index, FINISHED, "remove_node")
        node_id = int(self.ids[index])
        if self._index is not None:
            del self._index[node_id]
        self._state[index] = REMOVED
        self._extra_children.pop(index, None)
        self._added_parents.pop(index, None)

    # ------------------------------------------------------------ progress and deadlock reports

    @property
    def remaining(self) -> int:
        """Number of nodes not finished (waiting, issuable or taken)."""
        return self._remaining

    def state(self, index: int) -> str:
        """'waiting', 'issuable', 'taken', 'finished' or 'removed'."""
        return STATE_NAMES[self._state[index]]

    def unfinished(self) -> list[int]:
        """Indices of the nodes not finished, ascending."""
        return np.flatnonzero(np.array(self._state, np.int8) < FINISHED).tolist()

    def parents(self, index: int) -> list[int]:
        """Indices of a node's parents (data and ctrl, each once), ascending index."""
        if index >= self._n0:
            return list(self._added_parents.get(index, ()))
        if self._parents_csr is None:
            (parent, child), self._edges = self._edges, None  # (kept for this CSR alone)
            off, tgt = csr(self._n0, child, parent)
            del parent, child
            self._parents_csr = (_flat(self._cidx.typecode, off), _flat(self._cidx.typecode, tgt))
        off, tgt = self._parents_csr
        return sorted(tgt[off[index]:off[index + 1]])

    def waiting_on(self, index: int) -> list[int]:
        """Ids of the node's parents that have not finished, ascending."""
        state, ids = self._state, self.ids
        return sorted(int(ids[p]) for p in self.parents(index) if state[p] < FINISHED)
