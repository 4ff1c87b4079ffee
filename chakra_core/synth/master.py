"""The master trace of a job: every rank's communication sequence, stored once per process group.

A job's ranks issue the same collectives, in the same order and with matching sizes, within
each process group; sends meet receives with the same source, destination, tag and size. The
master trace keeps exactly that shared structure once:

- one **group stream** per process group (pg_name): the k-th collective's type and size
  (per-member sizes only at the positions where members differ: uneven all_to_all);
- one **channel** per (source, destination, tag, pg_name) of point-to-point messages: the
  sizes of its messages in order (the k-th send is matched with the k-th receive);
- per rank, its **interleaving**: which of its streams each of its operations comes from,
  run-length coded over slots local to the rank (its streams in order of first use), so
  ranks with the same pattern (every rank of a data-parallel job; the two halves of a job
  with two sub-groups) share one interleaving.

Every rank's sequence (type, size, group members, pg_name, peer, tag, in id order) is
reconstructed exactly by `MasterTrace.sequence` (`tests/test_synthesize.py` checks it on the
real gloo runs). Building one checks the cross-rank constraints and raises
`CrossRankError` naming the job, the group or channel, the position and each rank's node.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from chakra_core.errors import ChakraError
from chakra_core.format.columns import COMM_TYPES
from chakra_core.format.depgraph import to_numpy
from chakra_core.format.nodetypes import COLL, RECV, SEND

# Operation kinds: a collective's comm_type (0..9), then the two point-to-point directions.
SEND_KIND, RECV_KIND = 10, 11
KIND_NAMES: dict[int, str] = {**{k: v.lower() for k, v in COMM_TYPES.items()}, SEND_KIND: "send", RECV_KIND: "recv"}
KINDS = tuple(sorted(KIND_NAMES))
ALL_TO_ALL = 6
WORLD_NAMES = (None, "", "0")  # pg_name values that mean all ranks (ASTRA-sim's default group)


class CrossRankError(ChakraError):
    """A job whose ranks do not agree on their communication (the message says where)."""


@dataclass
class CommSequence:
    """One rank's communication operations in id order, as columns."""

    node_id: np.ndarray  # uint64 (not part of the master trace; kept for error messages)
    kind: np.ndarray  # int64: comm_type 0..9, SEND_KIND, RECV_KIND
    size: np.ndarray  # int64 bytes
    pg_name: list  # str or None per operation, as in the trace
    peer: np.ndarray  # int64: send destination / receive source (global rank); -1 for collectives
    tag: np.ndarray  # int64; -1 for collectives

    def __len__(self) -> int:
        return len(self.kind)

    def rows(self, members_of) -> list[tuple]:
        """(kind name, size, group members, pg_name, peer, tag) per operation, for comparisons."""
        return [(KIND_NAMES[int(k)], int(s), tuple(members_of(p)), p, int(q) if q >= 0 else None,
                 int(t) if k in (SEND_KIND, RECV_KIND) else None)
                for k, s, p, q, t in zip(self.kind, self.size, self.pg_name, self.peer, self.tag)]


def _column(table: pa.Table, name: str, fill) -> np.ndarray:
    if name not in table.column_names:
        return np.full(table.num_rows, fill)
    return to_numpy(table.column(name), fill)


def comm_sequence(table: pa.Table, rank: int, where: str = "") -> CommSequence:
    """The communication operations of one rank's node table, in ascending node id."""
    types = _column(table, "type", 0)
    rows = np.flatnonzero(np.isin(types, (COLL, SEND, RECV)))
    ids = _column(table, "id", 0).astype(np.uint64)[rows]
    order = np.argsort(ids, kind="stable")
    rows, ids = rows[order], ids[order]
    types = types[rows]
    comm_type = _column(table, "comm_type", -1)[rows].astype(np.int64)
    size = _column(table, "comm_size", -1)[rows].astype(np.int64)
    src = _column(table, "comm_src", -1)[rows].astype(np.int64)
    dst = _column(table, "comm_dst", -1)[rows].astype(np.int64)
    tag = _column(table, "comm_tag", -1)[rows].astype(np.int64)
    pg = (table.column("pg_name").take(pa.array(rows)).to_pylist() if "pg_name" in table.column_names
          else [None] * len(rows))
    where = where or f"rank {rank}"
    coll = types == COLL
    bad = np.flatnonzero(coll & ~np.isin(comm_type, list(COMM_TYPES)))
    if bad.size:
        raise CrossRankError(f"{where}: collective node {ids[bad[0]]} has comm_type {comm_type[bad[0]]}, which is "
                             "not a CollectiveCommType")
    bad = np.flatnonzero(size < 0)
    if bad.size:
        raise CrossRankError(f"{where}: communication node {ids[bad[0]]} has no comm_size")
    is_send = types == SEND
    # a send's source is its own rank; older writers leave it out
    bad = np.flatnonzero(is_send & (src >= 0) & (src != rank))
    if bad.size:
        raise CrossRankError(f"{where}: send node {ids[bad[0]]} has comm_src {src[bad[0]]}, not its own rank {rank}")
    bad = np.flatnonzero(~is_send & ~coll & (dst >= 0) & (dst != rank))
    if bad.size:
        raise CrossRankError(f"{where}: receive node {ids[bad[0]]} has comm_dst {dst[bad[0]]}, not its own rank"
                             f" {rank}")
    peer = np.where(is_send, dst, np.where(coll, -1, src))
    bad = np.flatnonzero(~coll & ((peer < 0) | (tag < 0)))
    if bad.size:
        what = "send" if is_send[bad[0]] else "receive"
        raise CrossRankError(f"{where}: {what} node {ids[bad[0]]} lacks its peer rank or comm_tag")
    kind = np.where(coll, comm_type, np.where(is_send, SEND_KIND, RECV_KIND)).astype(np.int64)
    return CommSequence(ids, kind, size, pg, peer, np.where(coll, -1, tag))


@dataclass
class GroupStream:
    """The collectives of one process group, once for all its members."""

    pg_name: str | None
    members: tuple[int, ...]
    kinds: np.ndarray  # int64 per position
    sizes: np.ndarray  # int64 per position (the first member's where members differ)
    uneven_positions: np.ndarray  # positions where members' sizes differ
    uneven_sizes: np.ndarray  # (len(uneven_positions), len(members)) sizes, member order


@dataclass
class Channel:
    """Point-to-point messages from src to dst with one tag and pg_name, in order."""

    src: int
    dst: int
    tag: int
    pg_name: str | None
    sizes: np.ndarray


@dataclass
class Interleaving:
    """Runs of (local stream slot, length): a rank's operations in order."""

    slots: np.ndarray
    lengths: np.ndarray


@dataclass
class MasterTrace:
    job: str
    npus: int
    groups: list[GroupStream]
    channels: list[Channel]
    interleavings: list[Interleaving]
    rank_interleaving: np.ndarray  # rank -> index into interleavings
    rank_streams: list[np.ndarray]  # rank -> global stream id of each local slot (groups, then channels)

    def members(self, pg_name: str | None) -> tuple[int, ...]:
        for g in self.groups:
            if g.pg_name == pg_name:
                return g.members
        return tuple(range(self.npus))

    def stored_entries(self) -> int:
        """Numbers the master trace keeps for the communication (what it compresses to)."""
        return (sum(2 * len(g.kinds) + g.uneven_sizes.size for g in self.groups)
                + sum(len(c.sizes) for c in self.channels)
                + sum(2 * len(i.slots) for i in self.interleavings) + sum(len(s) for s in self.rank_streams))

    def positions(self, rank: int) -> tuple[np.ndarray, np.ndarray]:
        """(global stream id, position within that stream) of each of the rank's operations, in order."""
        runs = self.interleavings[int(self.rank_interleaving[rank])]
        slots = np.repeat(runs.slots, runs.lengths)
        n = len(slots)
        # position within the stream = how many earlier operations of the rank used the same slot
        order = np.argsort(slots, kind="stable")
        sorted_slots = slots[order]
        first = np.searchsorted(sorted_slots, sorted_slots)
        position = np.empty(n, np.int64)
        position[order] = np.arange(n) - first
        return self.rank_streams[rank][slots], position

    def sequence(self, rank: int) -> CommSequence:
        """Rank `rank`'s communication sequence, reconstructed exactly (node ids are not kept: -1)."""
        streams, position = self.positions(rank)
        n = len(streams)
        kind, size = np.empty(n, np.int64), np.empty(n, np.int64)
        peer, tag = np.full(n, -1, np.int64), np.full(n, -1, np.int64)
        pg: list = [None] * n
        for stream in np.unique(streams).tolist():
            at = np.flatnonzero(streams == stream)
            pos = position[at]
            if stream < len(self.groups):
                g = self.groups[stream]
                kind[at], size[at] = g.kinds[pos], g.sizes[pos]
                if len(g.uneven_positions):
                    member = g.members.index(rank)
                    hit = np.searchsorted(g.uneven_positions, pos)
                    ok = hit < len(g.uneven_positions)
                    ok[ok] = g.uneven_positions[hit[ok]] == pos[ok]
                    size[at[ok]] = g.uneven_sizes[hit[ok], member]
                name = g.pg_name
            else:
                c = self.channels[stream - len(self.groups)]
                sending = c.src == rank
                kind[at] = SEND_KIND if sending else RECV_KIND
                size[at] = c.sizes[pos]
                peer[at] = c.dst if sending else c.src
                tag[at] = c.tag
                name = c.pg_name
            for i in at.tolist():
                pg[i] = name
        return CommSequence(np.full(n, -1, np.int64), kind, size, pg, peer, tag)


def _group_members(pg: str | None, comm_groups: Mapping[int, Sequence[int]], npus: int) -> tuple[int, ...] | None:
    if pg in WORLD_NAMES:
        return tuple(range(npus))
    try:
        return tuple(int(m) for m in comm_groups[int(pg)])
    except (KeyError, ValueError):
        return None


def _describe(seq: CommSequence, i: int | None) -> str:
    if i is None:
        return "nothing"
    return f"{KIND_NAMES[int(seq.kind[i])]} of {int(seq.size[i]):,} B (node {int(seq.node_id[i])})"


def build_master(job: str, tables: Sequence[pa.Table], comm_groups: Mapping[int, Sequence[int]] | None = None,
                 sequences: Sequence[CommSequence] | None = None) -> MasterTrace:
    """The master trace of a job (one node table per rank, index = rank); CrossRankError when
    the ranks' communication does not match. `sequences`: the ranks' comm_sequence, when the
    caller has them already."""
    npus = len(tables)
    groups_in = comm_groups or {}
    seqs = list(sequences) if sequences is not None else [comm_sequence(t, r, f"job {job}: rank {r}")
                                                          for r, t in enumerate(tables)]
    group_index: dict[str | None, int] = {}
    group_ops: list[dict[int, np.ndarray]] = []  # per group: rank -> row indices of its ops in its sequence
    channel_index: dict[tuple, int] = {}
    channel_ops: list[dict[str, tuple[int, np.ndarray]]] = []  # per channel: "send"/"recv" -> (rank, rows)
    rank_keys: list[np.ndarray] = []  # per rank: global stream key index per op (before numbering channels)
    for r, seq in enumerate(seqs):
        keys = np.empty(len(seq), np.int64)
        is_p2p = (seq.kind == SEND_KIND) | (seq.kind == RECV_KIND)
        coll_rows = np.flatnonzero(~is_p2p)
        for pg in dict.fromkeys(seq.pg_name[i] for i in coll_rows.tolist()):
            members = _group_members(pg, groups_in, npus)
            rows = coll_rows[[seq.pg_name[i] == pg for i in coll_rows.tolist()]]
            if members is None:
                raise CrossRankError(f"job {job}: rank {r}: node {int(seq.node_id[rows[0]])} uses process group "
                                     f"{pg!r}, which the communicator-group file does not define")
            if r not in members:
                raise CrossRankError(f"job {job}: rank {r}: node {int(seq.node_id[rows[0]])} runs a collective of "
                                     f"process group {pg!r}, whose members are {list(members)}")
            g = group_index.setdefault(pg, len(group_index))
            if g == len(group_ops):
                group_ops.append({})
            group_ops[g][r] = rows
            keys[rows] = g
        p2p_rows = np.flatnonzero(is_p2p)
        channel_keys = [(r, int(seq.peer[i]), int(seq.tag[i]), seq.pg_name[i]) if seq.kind[i] == SEND_KIND
                        else (int(seq.peer[i]), r, int(seq.tag[i]), seq.pg_name[i]) for i in p2p_rows.tolist()]
        for i, key in zip(p2p_rows.tolist(), channel_keys):
            if not 0 <= seq.peer[i] < npus or seq.peer[i] == r:
                raise CrossRankError(f"job {job}: rank {r}: {_describe(seq, i)} names peer rank {int(seq.peer[i])}, "
                                     f"not another rank of the job's {npus}")
        for key in dict.fromkeys(channel_keys):
            rows = p2p_rows[[k == key for k in channel_keys]]
            c = channel_index.setdefault(key, len(channel_index))
            if c == len(channel_ops):
                channel_ops.append({})
            channel_ops[c]["send" if key[0] == r else "recv"] = (r, rows)
            keys[rows] = -1 - c  # channels numbered after the groups, below
        rank_keys.append(keys)

    groups = [_group_stream(job, pg, _group_members(pg, groups_in, npus), group_ops[g], seqs)
              for pg, g in group_index.items()]
    channels = [_channel(job, key, channel_ops[c], seqs) for key, c in channel_index.items()]

    interleavings: list[Interleaving] = []
    seen: dict[tuple[bytes, bytes], int] = {}
    rank_interleaving = np.zeros(npus, np.int64)
    rank_streams: list[np.ndarray] = []
    for r, keys in enumerate(rank_keys):
        streams = np.where(keys >= 0, keys, len(groups) - 1 - keys)
        local, first = np.unique(streams, return_index=True)
        by_first = local[np.argsort(first)]  # the rank's streams in order of first use
        slot_of = {int(s): i for i, s in enumerate(by_first.tolist())}
        slots = np.array([slot_of[int(s)] for s in streams.tolist()], np.int64)
        starts = np.flatnonzero(np.r_[True, slots[1:] != slots[:-1]]) if len(slots) else np.zeros(0, np.int64)
        runs = (slots[starts], np.diff(np.r_[starts, len(slots)]))
        key = (runs[0].tobytes(), runs[1].tobytes())
        if key not in seen:
            seen[key] = len(interleavings)
            interleavings.append(Interleaving(runs[0], runs[1]))
        rank_interleaving[r] = seen[key]
        rank_streams.append(by_first.astype(np.int64))
    return MasterTrace(job, npus, groups, channels, interleavings, rank_interleaving, rank_streams)


def _group_stream(job: str, pg: str | None, members: tuple[int, ...], ops: dict[int, np.ndarray],
                  seqs: list[CommSequence]) -> GroupStream:
    where = f"job {job}: process group {pg!r} (ranks {list(members)})"
    first = members[0]
    length = max(len(rows) for rows in ops.values())
    for m in members:
        if len(ops.get(m, ())) != length:
            # the first position where some member has nothing
            k = min(len(ops.get(m, ())), len(ops.get(first, ())))
            other = next(r for r in members if len(ops.get(r, ())) > k)
            lacking = next(r for r in members if len(ops.get(r, ())) == k)
            raise CrossRankError(f"{where}: collective #{k + 1}: rank {other} has "
                                 f"{_describe(seqs[other], int(ops[other][k]))}, rank {lacking} has nothing")
    kinds = np.stack([seqs[m].kind[ops[m]] for m in members])
    sizes = np.stack([seqs[m].size[ops[m]] for m in members])
    bad_kind = np.flatnonzero((kinds != kinds[0]).any(axis=0))
    differ = (sizes != sizes[0]).any(axis=0)
    bad_size = np.flatnonzero(differ & (kinds[0] != ALL_TO_ALL))  # only all_to_all may split unevenly
    bad = np.union1d(bad_kind, bad_size)
    if bad.size:
        k = int(bad[0])
        other = next(m for i, m in enumerate(members) if kinds[i, k] != kinds[0, k] or sizes[i, k] != sizes[0, k])
        raise CrossRankError(f"{where}: collective #{k + 1}: rank {first} has "
                             f"{_describe(seqs[first], int(ops[first][k]))}, rank {other} has "
                             f"{_describe(seqs[other], int(ops[other][k]))}")
    uneven = np.flatnonzero(differ)
    return GroupStream(pg, members, kinds[0].copy(), sizes[0].copy(), uneven, sizes[:, uneven].T.copy())


def _channel(job: str, key: tuple, ops: dict[str, tuple[int, np.ndarray]], seqs: list[CommSequence]) -> Channel:
    src, dst, tag, pg = key
    where = f"job {job}: point-to-point {src} -> {dst} tag {tag}"
    send_rows = ops["send"][1] if "send" in ops else np.zeros(0, np.int64)
    recv_rows = ops["recv"][1] if "recv" in ops else np.zeros(0, np.int64)
    sent, received = seqs[src].size[send_rows], seqs[dst].size[recv_rows]
    n = min(len(sent), len(received))
    bad = np.flatnonzero(sent[:n] != received[:n])
    if bad.size or len(sent) != len(received):
        k = int(bad[0]) if bad.size else n
        s = f"{int(sent[k]):,} B (node {int(seqs[src].node_id[send_rows[k]])})" if k < len(sent) else "nothing"
        r = f"{int(received[k]):,} B (node {int(seqs[dst].node_id[recv_rows[k]])})" if k < len(received) else "nothing"
        raise CrossRankError(f"{where}: message #{k + 1}: rank {src} sends {s}, rank {dst} receives {r}")
    return Channel(src, dst, tag, pg, sent.copy())
