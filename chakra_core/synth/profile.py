"""What the synthesizer learns from one job: its communication as tokens and the compute around it.

`profile_job` builds the job's master trace (which checks the cross-rank constraints) and,
per rank, in the order of its communication sequence:

- each operation's kind, size, **group label** and whether it is an uneven all_to_all. A
  label describes the group relative to the world, so that it can be mapped to another NPU
  count: `world`; `block<i>` (contiguous ranks; the job's i-th block size, smallest first);
  `strided<i>` (every s-th rank); point-to-point by peer offset: `p2p:+1`, `p2p:-2`, ...
  or `p2p:half` (the rank N/2 away), with the blocks of consecutive ranks its messages stay
  in (a pipeline of `block` ranks repeated N / block times: rank r uses the label exactly
  when r + offset is in its block; `block` = N when no block size explains which ranks use
  it) and whether it wraps around (rank N-1 -> 0, as in a ring);
- its **overlap**: how many later operations the rank issues before the first compute node
  that depends on it (0 = the next compute waits for it; -1 = no compute ever does);
- the **gaps**: the compute nodes between consecutive operations (by node id; gap i is
  before operation i, the last gap after the last operation): count, µs, µs on the CPU;
- the operator-class counts of its compute nodes (`chakra_core.analysis.stats.op_class`) and the
  replay durations of its broadcasts (the simulator replays broadcasts by duration).

Memory and metadata nodes are not modelled (they are neither compute nor communication).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from chakra_core.analysis.stats import OP_CLASS_NAMES, op_class
from chakra_core.format.columns import NODE_TYPE_VALUES
from chakra_core.format.depgraph import flat_list, lookup, to_numpy
from chakra_core.synth.master import (
    CommSequence,
    MasterTrace,
    build_master,
    comm_sequence,
)

COMP = NODE_TYPE_VALUES["COMP_NODE"]
BROADCAST = 5
NEVER = -1  # overlap of an operation no compute depends on


@dataclass(frozen=True)
class GroupLabel:
    """A group (or point-to-point peer) described relative to the world of `npus` ranks."""

    name: str  # world, block<i>, strided<i>, p2p:<offset>, p2p:half
    kind: str  # world, block, strided, p2p
    members: int = 0  # ranks per group (block, strided)
    offset: int = 0  # p2p: peer - self (wrapped to -N/2 .. N/2)
    wrap: bool = False  # p2p: some message crosses the ends (rank N-1 -> 0)
    block: int = 0  # p2p: consecutive ranks its messages stay within (N: the whole job)


@dataclass
class RankProfile:
    kind: np.ndarray  # per operation: comm_type 0..9, SEND_KIND, RECV_KIND
    size: np.ndarray
    label: np.ndarray  # index into JobProfile.labels
    uneven: np.ndarray  # bool
    overlap: np.ndarray  # later operations issued before the first dependent compute; NEVER
    gap_count: np.ndarray  # len(kind) + 1 compute node counts
    gap_us: np.ndarray  # their summed duration_micros
    cpu_us: float
    class_counts: np.ndarray  # compute nodes per OP_CLASS_NAMES entry
    class_us: np.ndarray  # their summed duration_micros
    broadcast_us: np.ndarray  # duration_micros of its broadcasts

    @property
    def compute_us(self) -> float:
        return float(self.gap_us.sum())


@dataclass
class JobProfile:
    job: str
    npus: int
    labels: list[GroupLabel]
    ranks: list[RankProfile]
    split_ratios: np.ndarray = field(default_factory=lambda: np.zeros(0))  # uneven all_to_all sizes / their mean


def _classify(members: tuple[int, ...], npus: int) -> tuple[str, int]:
    m = np.array(sorted(members))
    if len(m) == npus:
        return "world", npus
    steps = np.diff(m)
    if len(m) > 1 and (steps == steps[0]).all() and steps[0] > 1:
        return "strided", len(m)
    return "block", len(m)  # contiguous, or an irregular set treated as a block of its size


def _p2p_offset(raw: int, npus: int) -> tuple[int, bool]:
    wrapped = raw % npus
    if wrapped > npus / 2:
        wrapped -= npus
    return wrapped, wrapped != raw


def _labels(master: MasterTrace) -> tuple[list[GroupLabel], list[int]]:
    """A label per process group (index = group stream) plus the p2p labels, found later."""
    n = master.npus
    found = [_classify(g.members, n) for g in master.groups]
    labels: list[GroupLabel] = []
    for kind in ("world", "block", "strided"):
        sizes = sorted({size for k, size in found if k == kind})
        for i, size in enumerate(sizes):
            labels.append(GroupLabel("world" if kind == "world" else f"{kind}{i}", kind, size))
    names = {(lab.kind, lab.members): j for j, lab in enumerate(labels)}
    return labels, [names[f] for f in found]


def p2p_label_name(offset: int, npus: int) -> str:
    return "p2p:half" if npus % 2 == 0 and abs(offset) == npus // 2 else f"p2p:{offset:+d}"


def p2p_block(offset: int, users: set[int], npus: int) -> int:
    """The smallest block size B (a divisor of npus) such that exactly the ranks whose peer
    r + offset lies in their own block of B consecutive ranks use the label; npus if none."""
    ranks = np.arange(npus)
    for block in range(abs(offset) + 1, npus + 1):
        if npus % block:
            continue
        peer = ranks + offset
        inside = (peer >= 0) & (peer < npus) & (peer // block == ranks // block)
        if set(ranks[inside].tolist()) == users:
            return block
    return npus


def _edges(table: pa.Table, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(parent row, child row) of every ctrl and data dependency whose parent is in the table."""
    n = table.num_rows
    order = np.argsort(ids, kind="stable")
    sorted_ids = ids[order]
    parent_rows, child_rows = [], []
    for column in ("ctrl_deps", "data_deps"):
        if column not in table.column_names:
            continue
        parents, child = flat_list(table.column(column), n)
        at = lookup(sorted_ids, parents)
        ok = at >= 0
        parent_rows.append(order[at[ok]])
        child_rows.append(child[ok])
    src = np.concatenate(parent_rows) if parent_rows else np.zeros(0, np.int64)
    dst = np.concatenate(child_rows) if child_rows else np.zeros(0, np.int64)
    return src.astype(np.int64, copy=False), dst.astype(np.int64, copy=False)


_NONE = np.iinfo(np.uint64).max


def _first_compute_descendant(table: pa.Table, comm_rows: np.ndarray) -> np.ndarray:
    """Per communication row: the smallest node id among the compute nodes that depend on it
    (through ctrl or data dependencies, transitively); -1 where none does.

    Whole columns at a time: first[p] = min over p's children c of (c's id if c is a compute
    node, first[c]), starting from the compute children alone and passing each improvement
    up to the parents of the nodes it improved, until nothing changes. Each round touches
    only the edges into the nodes the last round changed, and there are as many rounds as
    the longest chain of improvements (a run of communication nodes depending on each
    other, typically); cycles need no special case (a value only ever decreases)."""
    n = table.num_rows
    ids = to_numpy(table.column("id")).astype(np.uint64)
    src, dst = _edges(table, ids)
    types = to_numpy(table.column("type"), 0)
    first = np.full(n, _NONE, np.uint64)
    if len(src):
        np.minimum.at(first, src, np.where(types[dst] == COMP, ids[dst], _NONE))
        # first round over every edge at once; in traces whose ids follow the dependencies (a
        # parent's id below its children's) a compute child is its own smallest descendant and
        # nothing improves: one pass
        better = first[dst] < first[src]
        changed = np.zeros(0, np.int64)
        if better.any():
            np.minimum.at(first, src[better], first[dst[better]])
            changed = np.unique(src[better])
            # edges grouped by child: the parents of row c are parents_of[offsets[c]:offsets[c + 1]]
            parents_of = src[np.argsort(dst, kind="stable")]
            offsets = np.zeros(n + 1, np.int64)
            np.cumsum(np.bincount(dst, minlength=n), out=offsets[1:])
        while changed.size:
            counts = offsets[changed + 1] - offsets[changed]
            total = int(counts.sum())
            if not total:
                break
            # the edge positions of every changed child, concatenated
            starts = np.repeat(offsets[changed] - np.cumsum(counts) + counts, counts)
            edge = starts + np.arange(total)
            parent = parents_of[edge]
            value = first[np.repeat(changed, counts)]
            better = value < first[parent]
            if not better.any():
                break
            parent, value = parent[better], value[better]
            np.minimum.at(first, parent, value)
            changed = np.unique(parent)
    out = first[comm_rows]
    return np.where(out == _NONE, -1, out.astype(np.int64))


def _op_class_indices(names: pa.Array) -> np.ndarray:
    """OP_CLASS_NAMES index of op_class(name) for each name (null: ""), each distinct name
    classified once (stats.op_class: the kernel families, then the keywords)."""
    if not len(names):
        return np.zeros(0, np.int64)
    encoded = pc.fill_null(names, "").dictionary_encode()
    classes = np.array([OP_CLASS_NAMES.index(op_class(n)) for n in encoded.dictionary.to_pylist()], np.int64)
    return classes[encoded.indices.to_numpy(zero_copy_only=False)]


def _rank_profile(table: pa.Table, seq: CommSequence, labels_of_ops: np.ndarray, uneven: np.ndarray) -> RankProfile:
    ids = to_numpy(table.column("id")).astype(np.int64)
    types = to_numpy(table.column("type"), 0)
    durations = to_numpy(table.column("duration_micros"), 0).astype(np.float64)
    cpu = to_numpy(table.column("is_cpu_op"), False).astype(bool) if "is_cpu_op" in table.column_names \
        else np.zeros(table.num_rows, bool)
    comm_ids = seq.node_id.astype(np.int64)
    # rows of the communication operations, in sequence order
    row_of_id = np.argsort(ids, kind="stable")
    comm_rows = row_of_id[np.searchsorted(ids[row_of_id], comm_ids)]
    first = _first_compute_descendant(table, comm_rows)
    issued_before = np.searchsorted(comm_ids, first) - np.arange(len(comm_ids)) - 1
    overlap = np.where(first >= 0, np.maximum(issued_before, 0), NEVER)
    comp = np.flatnonzero(types == COMP)
    gap = np.searchsorted(comm_ids, ids[comp])  # operations issued before each compute node
    slots = len(comm_ids) + 1
    names = table.column("name").take(pa.array(comp)).combine_chunks().dictionary_encode() \
        if "name" in table.column_names else None
    node_class = np.full(len(comp), OP_CLASS_NAMES.index("other"))
    if names is not None and len(names):
        node_class = _op_class_indices(names.dictionary)[to_numpy(names.indices)]
    broadcast = seq.kind == BROADCAST
    return RankProfile(
        kind=seq.kind, size=seq.size, label=labels_of_ops, uneven=uneven, overlap=overlap.astype(np.int64),
        gap_count=np.bincount(gap, minlength=slots).astype(np.int64),
        gap_us=np.bincount(gap, weights=durations[comp], minlength=slots),
        cpu_us=float(durations[comp][cpu[comp]].sum()),
        class_counts=np.bincount(node_class, minlength=len(OP_CLASS_NAMES)),
        class_us=np.bincount(node_class, weights=durations[comp], minlength=len(OP_CLASS_NAMES)),
        broadcast_us=durations[comm_rows[broadcast]])


def profile_job(job: str, tables: Sequence[pa.Table], comm_groups: Mapping[int, Sequence[int]] | None = None
                ) -> tuple[MasterTrace, JobProfile]:
    """The job's master trace (CrossRankError if its ranks disagree) and its profile."""
    seqs = [comm_sequence(t, r, f"job {job}: rank {r}") for r, t in enumerate(tables)]
    master = build_master(job, tables, comm_groups, sequences=seqs)
    labels, label_of_group = _labels(master)
    p2p_index: dict[str, int] = {}
    p2p_users: dict[str, set[int]] = {}
    n_groups = len(master.groups)
    ranks = []
    for r, (table, seq) in enumerate(zip(tables, seqs)):
        streams, position = master.positions(r)
        label = np.empty(len(seq), np.int64)
        uneven = np.zeros(len(seq), bool)
        in_group = streams < n_groups
        label[in_group] = np.array(label_of_group, np.int64)[streams[in_group]] if n_groups else 0
        for g in np.unique(streams[in_group]).tolist():
            stream = master.groups[g]
            if len(stream.uneven_positions):
                at = np.flatnonzero(streams == g)
                uneven[at] = np.isin(position[at], stream.uneven_positions)
        for i in np.flatnonzero(~in_group).tolist():
            offset, wrapped = _p2p_offset(int(seq.peer[i]) - r, master.npus)
            name = p2p_label_name(offset, master.npus)
            if name not in p2p_index:
                p2p_index[name] = len(labels)
                labels.append(GroupLabel(name, "p2p", 2, offset, wrapped))
            elif wrapped and not labels[p2p_index[name]].wrap:
                labels[p2p_index[name]] = GroupLabel(name, "p2p", 2, offset, True)
            p2p_users.setdefault(name, set()).add(r)
            label[i] = p2p_index[name]
        ranks.append(_rank_profile(table, seq, label, uneven))
    for name, j in p2p_index.items():
        lab = labels[j]
        block = master.npus if lab.wrap else p2p_block(lab.offset, p2p_users[name], master.npus)
        labels[j] = GroupLabel(lab.name, lab.kind, lab.members, lab.offset, lab.wrap, block)
    ratios = [g.uneven_sizes / np.maximum(g.uneven_sizes.mean(axis=1, keepdims=True), 1) for g in master.groups
              if len(g.uneven_positions)]
    split_ratios = np.concatenate([r.ravel() for r in ratios]) if ratios else np.zeros(0)
    return master, JobProfile(job, master.npus, labels, ranks, split_ratios)

