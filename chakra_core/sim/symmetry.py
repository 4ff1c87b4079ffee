"""Which NPUs of a job run alike, so that one of each kind is simulated (docs/simulator.md,
'Shared simulation').

A job is invariant under moving every NPU one step along a network dimension (a translation
of the torus of dimensions) when every NPU's node table equals, row by row, the table of the
NPU it moves to, with its communicator groups and send/receive peers moved the same way, and
the NPUs' speeds move with them. Translations of the torus map the network onto itself in
both network models (hop counts and routes depend on coordinate differences only), so such a
job runs the same after the move: NPUs one step apart along that dimension take the same
times. The data-parallel replicas of a job lie along the outer dimensions, the members of a
tensor-parallel group along the inner ones.

`find_sharing` finds the dimensions the job is invariant under (each checked over whole
columns with numpy, never per node) and returns a `Sharing`: the representatives (the NPUs
at coordinate 0 in those dimensions), the one each NPU copies, and, for every group of a
representative, the NPUs outside the representatives that take part in the same collective
in a group holding a representative ("mirrors": they issue it when their representative
does). A dimension along which some send crosses is not shared (its two ends would lie in
different copies). The engine then simulates the representatives only; the collective
runner checks that every mirror ends each collective when its representative does, and a
run where it does not, or where two completions of one NPU fell in one tick after being
scheduled in one tick (their order would follow the events of other NPUs), is not used: the
job runs unshared (engine.simulate).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from chakra_core.sim.config import NetworkConfig
from chakra_core.sim.network.interface import Links
from chakra_core.sim.sharing import Sharing
from chakra_core.sim.workload.nodes import COLL, DEFAULT_GROUP_NAMES, RECV, SEND, NodeDecoder

# the columns the simulator reads (workload/feeder.py, workload/nodes.py), besides those moved with the NPUs
COMPARED = ("id", "data_deps", "ctrl_deps") + NodeDecoder.DURATION_COLUMNS + tuple(
    c for c in NodeDecoder.COLUMNS if c not in ("pg_name", "comm_src", "comm_dst"))
MOVED = ("pg_name", "comm_src", "comm_dst")


def find_sharing(tables: list[pa.Table], groups: dict[int, tuple[int, ...]], network: NetworkConfig,
                 npu_speed: list[float] | None = None, call_time_in_network: bool = False,
                 within: tuple[int, ...] | None = None) -> Sharing | None:
    """The job's Sharing (along the dimensions of `within` only, where given), or None where no
    dimension can be shared (or the tables cannot be compared: then the unshared run says what
    is wrong with them)."""
    if len(tables) != network.npus or len(tables) < 2 or (npu_speed is not None and len(npu_speed) != len(tables)):
        return None  # the unshared run says what is wrong
    job = _Columns.of(tables, groups, network.npus, call_time_in_network)
    if job is None:
        return None
    coords = np.array([network.coords(npu) for npu in range(network.npus)], np.int64)
    sizes = np.array([d.npus for d in network.dims], np.int64)
    speed = np.asarray(npu_speed if npu_speed is not None else [1.0] * network.npus)
    dims = tuple(k for k, size in enumerate(sizes) if size > 1 and (within is None or k in within)
                 and not job.crosses(coords[:, k]) and job.invariant(_moved(coords, sizes, k), speed))
    if not dims:
        return None
    rep_coords = coords.copy()
    rep_coords[:, list(dims)] = 0
    strides = np.concatenate([[1], np.cumprod(sizes)[:-1]])
    rep_of = (rep_coords * strides).sum(axis=1)
    reps = np.flatnonzero(rep_of == np.arange(network.npus)).tolist()
    own, peer = job.p2p
    return Sharing(network.npus, dims, reps, rep_of.tolist(), job.mirrors(reps, rep_of), job.groups,
                   set(zip(own.tolist(), peer.tolist())), bool((job.group_of_row[job.types == COLL] == 0).any()))


def links_apart(sharing: Sharing, fabric: Links) -> bool:
    """On a network whose messages share links (fabric names them): whether the links the
    shared run uses (the collectives of groups that hold a representative, the sends of
    representatives) carry nothing in the whole job that the shared run leaves out (the
    collectives of other groups, the other NPUs' sends); then what the shared run leaves out
    cannot delay what it runs. A ring's messages go to either neighbour; a collective over
    every NPU may use any link."""
    is_rep = [rep == npu for npu, rep in enumerate(sharing.rep_of)]
    used: tuple[set, set] = (set(), set())  # (left out, run)
    for group in sharing.groups[1:]:
        ring = list(zip(group, group[1:] + group[:1]))
        used[any(is_rep[m] for m in group)].update(
            link for a, b in ring for pair in ((a, b), (b, a)) for link, _ in fabric.route(*pair))
    for npu, peer in sharing.sends:
        used[is_rep[npu]].update(link for link, _ in fabric.route(npu, peer))
    if sharing.world:
        return not used[0]
    return not used[0] & used[1]


def _moved(coords: np.ndarray, sizes: np.ndarray, dim: int) -> np.ndarray:
    """Each NPU's id after one step along `dim`."""
    moved = coords.copy()
    moved[:, dim] = (moved[:, dim] + 1) % sizes[dim]
    strides = np.concatenate([[1], np.cumprod(sizes)[:-1]])
    return (moved * strides).sum(axis=1)


class _Columns:
    """The job's distinct node tables (ranks may share one table object), concatenated: the
    compared columns, each row's group (as a number: 0 for every NPU, else its group's index in
    `groups`) and peers; `table_of[npu]` is the NPU's table. Whether the job maps onto itself
    depends, NPU by NPU, on the pair (its table, the table of the NPU it moves to) only: each
    pair is checked once."""

    def __init__(self, table: pa.Table, offsets: np.ndarray, table_of: np.ndarray, group_of_row: np.ndarray,
                 peers: np.ndarray, groups: list[tuple[int, ...] | None]):
        self.table, self.offsets, self.table_of, self.group_of_row, self.peers, self.groups = (
            table, offsets, table_of, group_of_row, peers, groups)
        self.start = offsets[table_of]  # each NPU's first row
        self.lengths = np.diff(offsets)[table_of]
        self.types = types = table.column("type").to_numpy(zero_copy_only=False)
        own, peer = [], []
        for t in range(len(offsets) - 1):  # (NPU, peer) of every send and receive
            rows = np.arange(offsets[t], offsets[t + 1])
            rows = rows[(types[rows] == SEND) | (types[rows] == RECV)]
            npus = np.flatnonzero(table_of == t)
            own.append(np.repeat(npus, len(rows)))
            peer.append(np.tile(np.where(types[rows] == SEND, peers[rows, 1], peers[rows, 0]), len(npus)))
        self.p2p = (np.concatenate(own), np.concatenate(peer))
        self._key_of = {_canonical(g): i for i, g in enumerate(groups)}

    @classmethod
    def of(cls, tables: list[pa.Table], groups: dict[int, tuple[int, ...]], npus: int,
           call_time_in_network: bool) -> _Columns | None:
        distinct: dict[int, int] = {}
        table_of = np.array([distinct.setdefault(id(t), len(distinct)) for t in tables], np.int64)
        unique = list({id(t): t for t in tables}.values())
        names = set(unique[0].column_names)
        if not {"id", "type"} <= names:
            return None
        wanted = [c for c in COMPARED + (("name",) if call_time_in_network else ()) if c in names]
        moved = [c for c in MOVED if c in names]
        try:
            table = pa.concat_tables([t.select(wanted + moved) for t in unique]).combine_chunks()
        except (KeyError, pa.ArrowInvalid, pa.ArrowTypeError):  # columns or their types differ between ranks
            return None
        offsets = np.concatenate([[0], np.cumsum([t.num_rows for t in unique])])
        numbered = _numbered_groups(groups, npus)
        if numbered is None:
            return None
        group_list, number_of_name = numbered
        group_of_row = _group_of_row(table, number_of_name)
        if group_of_row is None or len({_canonical(g) for g in group_list}) != len(group_list):
            return None  # an unknown group name (the unshared run names it), or two groups alike
        peers = np.stack([_ints(table, c) for c in ("comm_src", "comm_dst")], axis=1)
        if ((peers < -1) | (peers >= npus)).any():
            return None
        types = table.column("type").to_numpy(zero_copy_only=False)
        if (((types == SEND) & (peers[:, 1] < 0)) | ((types == RECV) & (peers[:, 0] < 0))).any():
            return None  # a send or receive without its peer: the unshared run names it
        return cls(_relative_ids(table.select(wanted), offsets), offsets, table_of, group_of_row, peers, group_list)

    def crosses(self, coord: np.ndarray) -> bool:
        """Whether a send or receive joins NPUs at different coordinates of a dimension."""
        own, peer = self.p2p
        return bool((coord[own] != coord[peer]).any())

    def invariant(self, moved: np.ndarray, speed: np.ndarray) -> bool:
        """Whether the job is the same after every NPU moves to moved[npu]."""
        if (self.lengths[moved] != self.lengths).any() or (speed[moved] != speed).any():
            return False
        pairs = np.unique(np.stack([self.table_of, self.table_of[moved]], axis=1), axis=0)
        sizes = np.diff(self.offsets)[pairs[:, 0]]
        within = np.arange(sizes.sum()) - np.repeat(np.cumsum(sizes) - sizes, sizes)
        mine = np.repeat(self.offsets[pairs[:, 0]], sizes) + within  # row r of one table of a pair ...
        theirs = np.repeat(self.offsets[pairs[:, 1]], sizes) + within  # ... and of the other
        if (self._group_images(moved)[self.group_of_row[mine]] != self.group_of_row[theirs]).any():
            return False
        peers = self.peers[mine]
        if (np.where(peers >= 0, moved[np.maximum(peers, 0)], peers) != self.peers[theirs]).any():
            return False
        differ = pairs[:, 0] != pairs[:, 1]  # a table is itself
        mine, theirs = pa.array(mine[np.repeat(differ, sizes)]), pa.array(theirs[np.repeat(differ, sizes)])
        return all(column.take(mine).equals(column.take(theirs)) for column in self.table.columns)

    def _group_images(self, moved: np.ndarray) -> np.ndarray:
        """For each group number, the number of the group its members move to (-1: none)."""
        image = np.full(len(self.groups), -1, np.int64)
        for i, group in enumerate(self.groups):
            image[i] = 0 if group is None else self._key_of.get(_canonical(tuple(moved[list(group)].tolist())), -1)
        return image

    def mirrors(self, reps: list[int], rep_of: np.ndarray) -> dict[tuple, list]:
        """(representative, its group) -> [(group, its mirrors), ...] for every mirror in a
        group that holds a representative."""
        is_rep = np.zeros(len(rep_of), bool)
        is_rep[reps] = True
        live = [g is None or bool(is_rep[list(g)].any()) for g in self.groups]
        found: dict[tuple, list] = {}
        for rep in reps:
            start, end = self.start[rep], self.start[rep] + self.lengths[rep]
            collective = np.flatnonzero(self.types[start:end] == COLL)
            numbers, first = np.unique(self.group_of_row[start + collective], return_index=True)
            copies = np.flatnonzero((rep_of == rep) & ~is_rep)
            for number, row in zip(numbers.tolist(), collective[first].tolist()):
                by_group: dict[int, list[int]] = {}
                for m, g in zip(copies.tolist(), self.group_of_row[self.start[copies] + row].tolist()):
                    if live[g]:
                        by_group.setdefault(g, []).append(m)
                found[(rep, self.groups[number])] = [(self.groups[g], ms) for g, ms in by_group.items()]
        return found


def _numbered_groups(groups: dict[int, tuple[int, ...]], npus: int):
    """([None, group, ...], pg_name -> number): number 0 is every NPU, as a group of all NPUs is."""
    group_list: list[tuple[int, ...] | None] = [None]
    number_of_name = {name: 0 for name in DEFAULT_GROUP_NAMES}
    for gid, members in sorted(groups.items()):
        if any(not 0 <= m < npus for m in members):
            return None
        if len(members) == npus:
            number_of_name[str(gid)] = 0
            continue
        number_of_name[str(gid)] = len(group_list)
        group_list.append(tuple(members))
    return group_list, number_of_name


def _group_of_row(table: pa.Table, number_of_name: dict[str, int]) -> np.ndarray | None:
    """Each row's group number (rows without pg_name: every NPU); None for an unknown name."""
    if "pg_name" not in table.column_names:
        return np.zeros(table.num_rows, np.int64)
    encoded = pc.fill_null(table.column("pg_name"), "").dictionary_encode().combine_chunks()
    numbers = [number_of_name.get(name) for name in encoded.dictionary.to_pylist()]
    if None in numbers:
        return None
    return np.asarray(numbers, np.int64)[encoded.indices.to_numpy(zero_copy_only=False)] if numbers else \
        np.zeros(table.num_rows, np.int64)


def _relative_ids(table: pa.Table, offsets: np.ndarray) -> pa.Table:
    """Ids and dependencies counted from each table's smallest id: ranks that number their
    nodes from different starts (ASTRA-sim's microbenchmarks number each rank's node after the
    rank) issue them in the same order. (A dependency on an absent id may wrap round in uint64;
    the unshared run refuses it.)"""
    lengths = np.diff(offsets)
    ids = table.column("id").to_numpy(zero_copy_only=False).astype(np.uint64)
    filled = lengths > 0  # (reduceat would give an empty table its neighbour's row)
    shift = np.repeat(np.minimum.reduceat(ids, offsets[:-1][filled]), lengths[filled]) if len(ids) else ids
    table = table.set_column(table.schema.get_field_index("id"), "id", pa.array(ids - shift, pa.uint64()))
    for name in ("data_deps", "ctrl_deps"):
        if name in table.column_names:
            deps = table.column(name).combine_chunks()
            values = pc.list_flatten(deps).to_numpy(zero_copy_only=False).astype(np.uint64)
            parents = pc.list_parent_indices(deps).to_numpy(zero_copy_only=False)
            relative = pa.ListArray.from_arrays(_list_offsets(deps), pa.array(values - shift[parents], pa.uint64()),
                                                mask=deps.is_null())
            table = table.set_column(table.schema.get_field_index(name), name, relative)
    return table


def _list_offsets(deps: pa.Array) -> pa.Array:
    """The offsets of a list array's rows, from 0 (nulls as empty lists)."""
    lengths = pc.list_value_length(deps).fill_null(0).to_numpy(zero_copy_only=False)
    return pa.array(np.concatenate([[0], np.cumsum(lengths)]), pa.int32())


def _ints(table: pa.Table, name: str) -> np.ndarray:
    if name not in table.column_names:
        return np.full(table.num_rows, -1, np.int64)
    return np.asarray(pc.fill_null(table.column(name), -1).to_numpy(zero_copy_only=False), np.int64)


def _canonical(group: tuple[int, ...] | None) -> tuple[int, ...] | None:
    """A ring's members from its smallest: rings alike but for where they start are one ring."""
    if group is None:
        return None
    start = group.index(min(group))
    return group[start:] + group[:start]
