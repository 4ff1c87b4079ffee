"""The SPMD program of a synthetic job: one program (tokens with sizes, compute gaps and
overlaps, from model.py's generators), drawn from a cluster of the model for N NPUs, that every
rank of the job runs (sample.py maps it to each rank's node table), so that the cross-rank
constraints hold by construction:

- collectives: the same kinds, sizes and order on every member of each group;
- groups at N NPUs: world, contiguous pairs, or evenly spread ("strided") groups; larger
  blocks are laid out evenly spread too, because a one-dimensional Ring (the reference
  system) can only time groups whose members are equally far apart (an assumption: group
  sizes and counts are kept, their placement is not);
- point-to-point: a send to rank r + d is matched with a receive from r - d, in pairs of
  equal count, size and tag, within blocks of consecutive ranks (a pipeline's stages) or
  around them when the label wraps; a rank whose peer lies outside its block skips the
  operation and the compute before it (that compute belongs to the other stages); if a
  receive would wait on a send its rank cannot reach (a deadlock), it is moved after that
  send (found by an abstract execution of the program on every rank).

Compute is scaled so that a rank runs the job's drawn compute time on average; each rank
gets its own broadcast replay times.
"""

from __future__ import annotations

import math
from collections import defaultdict, deque
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from chakra_core.synth.master import KIND_NAMES, RECV_KIND, SEND_KIND
from chakra_core.synth.model import END, Cluster, SynthModel
from chakra_core.synth.profile import OP_CLASS_NAMES

BROADCAST, BARRIER = 5, 9
SNAP_LOG2 = 0.03  # a sampled size within 2% of a recurring size (at a seen NPU count) becomes that size
TAG_STRIDE = 1 << 24  # tags: (point-to-point class << 24) | message index


class SamplingError(ValueError):
    pass


@dataclass
class Program:
    """The SPMD program: per operation, and per gap (the compute before each operation, then
    after the last: one more than operations). A rank that lacks an operation (a
    point-to-point peer outside its block) skips the gap before it too: that compute belongs
    to the ranks that have it (the other stages of a pipeline)."""

    kind: np.ndarray
    label: np.ndarray
    size: np.ndarray
    overlap: np.ndarray
    uneven: np.ndarray
    gap: np.ndarray  # the gap before each operation: (chain index, component of its gap mixture)
    end_gap: tuple[int, int]  # the gap after the last one
    gap_count: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    node_us: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    node_cpu: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    node_class: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    op_us: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), np.int64))  # ops x ranks broadcast replays
    tag: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    offset: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # p2p peer offset at N
    block: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # p2p: ranks per block at N
    wrap: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))

    OP_FIELDS = ("kind", "label", "size", "overlap", "uneven", "gap", "op_us", "tag", "offset", "block", "wrap")

    def take(self, order: np.ndarray) -> None:
        """Reorders (or, with a shorter index, drops) operations with the gaps before them
        (before the gaps are drawn)."""
        for name in self.OP_FIELDS:
            setattr(self, name, getattr(self, name)[order])


# ------------------------------------------------------------------ interpolation over NPU counts


def count_weights(seen: Sequence[int], npus: int) -> dict[int, float]:
    """Weights of the seen NPU counts for a target: itself when seen; else the two that bracket
    it, linearly in log2; else the nearest."""
    seen = sorted(set(seen))
    if npus in seen:
        return {npus: 1.0}
    x = math.log2(npus)
    lower = [n for n in seen if n < npus]
    upper = [n for n in seen if n > npus]
    if not lower or not upper:
        return {min(seen, key=lambda n: abs(math.log2(n) - x)): 1.0}
    lo, hi = lower[-1], upper[0]
    t = (x - math.log2(lo)) / (math.log2(hi) - math.log2(lo))
    return {lo: 1.0 - t, hi: t}


def cluster_weights(model: SynthModel, npus: int) -> np.ndarray:
    """How often each cluster is drawn at `npus`: its share of the training jobs at that count
    (interpolated between the counts seen, as count_weights)."""
    weights = count_weights(model.training_npus, npus)
    w = np.array([sum(weights.get(n, 0.0) * jobs for n, jobs in c.jobs_by_npus) for c in model.clusters])
    if not w.sum():
        raise SamplingError(f"no cluster has training jobs near {npus} NPUs")
    return w / w.sum()


class _Chain:
    """The token chain of one cluster mixed for a target NPU count."""

    def __init__(self, cluster: Cluster, npus: int):
        weights = count_weights([c.npus for c in cluster.chains], npus)
        self.n = len(cluster.tokens)
        self.is_end = np.array([t[0] == END for t in cluster.tokens])
        rows: dict[int, np.ndarray] = {}
        start = np.zeros(self.n)
        # per token: the gap sources it emitted, (chain index, component) -> weight
        emit: dict[int, dict[tuple[int, int], float]] = {}
        for j, chain in enumerate(cluster.chains):
            w = weights.get(chain.npus, 0.0)
            if not w:
                continue
            totals: dict[int, int] = defaultdict(int)
            for token, _, count in chain.gaps:
                totals[token] += count
            for token, g, count in chain.gaps:
                emit.setdefault(token, {})[(j, g)] = w * count / totals[token]
            s = np.zeros(self.n)
            for token, count in chain.start:
                s[token] += count
            start += w * s / s.sum()
            out: dict[int, np.ndarray] = {}
            for a, b, count in chain.transitions:
                out.setdefault(a, np.zeros(self.n))[b] += count
            for a, row in out.items():
                rows.setdefault(a, np.zeros(self.n))
                rows[a] += w * row / row.sum()
        self.start = start
        self.rows = rows
        self.emit = emit

    def gaps(self, tokens: list[int], rng: np.random.Generator) -> np.ndarray:
        """The gap before each token as (chain index, component) pairs (n x 2), drawn from what
        the token emitted in training at the counts mixed."""
        out = np.zeros((len(tokens), 2), np.int64)
        tokens = np.asarray(tokens)
        for token in np.unique(tokens).tolist():
            at = np.flatnonzero(tokens == token)
            sources = list(self.emit[token])
            p = np.array([self.emit[token][k] for k in sources])
            out[at] = np.array(sources)[rng.choice(len(sources), size=len(at), p=p / p.sum())]
        return out

    def _pick(self, p: np.ndarray, u: float) -> int | None:
        total = p.sum()
        if total <= 0:
            return None
        return int(min(np.searchsorted(np.cumsum(p), u * total, side="right"), self.n - 1))

    def walk(self, length: int, rng: np.random.Generator) -> tuple[list[int], int]:
        """`length` operation tokens and the END token that follows them. Where the chain ends
        (or has never been seen to continue) before `length`, it starts over from a first
        token: a long job repeats whole training-like sequences rather than looping in one
        token of their tail."""
        start = np.cumsum(self.start * ~self.is_end)
        if length and start[-1] <= 0:
            raise SamplingError("the cluster has no sequence with an operation to start from")
        u = rng.random(length + 1)
        tokens: list[int] = []
        cache: dict[int, np.ndarray] = {}
        current = None
        for i in range(length):
            row = None
            if current is not None:
                row = cache.get(current)
                if row is None:
                    row = cache[current] = np.cumsum(self.rows.get(current, np.zeros(self.n)))
            if row is None or row[-1] <= 0:
                row = start
            current = int(min(np.searchsorted(row, u[i] * row[-1], side="right"), self.n - 1))
            if self.is_end[current]:  # the sequence ended early: start again
                current = int(min(np.searchsorted(start, rng.random() * start[-1], side="right"), self.n - 1))
            tokens.append(current)
        ends = (self.rows.get(current, np.zeros(self.n)) if current is not None else self.start) * self.is_end
        if not ends.sum():
            ends = self.is_end * (sum(self.rows.values(), np.zeros(self.n)) + self.start)
        end = self._pick(ends, u[-1])
        return tokens, end if end is not None else int(np.flatnonzero(self.is_end)[0])


# ------------------------------------------------------------------ the program


def _sizes(cluster: Cluster, npus: int, kind: np.ndarray, comp: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    x = math.log2(npus)
    out = np.zeros(len(kind), np.int64)
    seen = {n for n, _ in cluster.jobs_by_npus}
    for k in np.unique(kind).tolist():
        at = np.flatnonzero(kind == k)
        name = KIND_NAMES[k]
        mixture = cluster.sizes[name]
        values = np.empty(len(at))
        for c in np.unique(comp[at]).tolist():
            sel = at[comp[at] == c]
            values[np.searchsorted(at, sel)] = mixture.sample(x, rng, len(sel), c)[:, 0]
        if npus in seen:  # real jobs reuse a few exact sizes: keep them exact
            atoms = np.array(sorted({math.log2(1 + s) for n, s in cluster.atoms.get(name, []) if n == npus}))
            if len(atoms):
                right = np.minimum(np.searchsorted(atoms, values), len(atoms) - 1)
                left = np.maximum(right - 1, 0)
                nearest = np.where(np.abs(values - atoms[left]) <= np.abs(values - atoms[right]), atoms[left],
                                   atoms[right])
                values = np.where(np.abs(values - nearest) <= SNAP_LOG2, nearest, values)
        out[at] = np.maximum(np.round(np.exp2(values) - 1), 0).astype(np.int64)
    out[kind == BARRIER] = 0
    return out


def _pair_point_to_point(prog: Program, npus: int) -> None:
    """Keeps sends and receives in matching pairs per peer offset; receives get their send's
    size; both get a tag. Unmatched operations are dropped."""
    p2p = np.flatnonzero((prog.kind == SEND_KIND) | (prog.kind == RECV_KIND))
    keep = np.ones(len(prog.kind), bool)
    classes: dict[int, tuple[list[int], list[int]]] = defaultdict(lambda: ([], []))
    for i in p2p.tolist():
        # a send to r + d pairs with a receive from r - d; offsets only compare modulo the block
        # when both wrap (otherwise +1 and -1 in a block of 2 reach the same peer from different ranks)
        d, block, wrap = int(prog.offset[i]), int(prog.block[i]), bool(prog.wrap[i])
        d = d if prog.kind[i] == SEND_KIND else -d
        key = (d % block if wrap else d, block, wrap)
        classes[key][0 if prog.kind[i] == SEND_KIND else 1].append(i)
    for number, (sends, recvs) in enumerate(classes[key] for key in sorted(classes)):
        n = min(len(sends), len(recvs))
        keep[sends[n:]] = False
        keep[recvs[n:]] = False
        s, r = np.array(sends[:n], np.int64), np.array(recvs[:n], np.int64)
        prog.size[r] = prog.size[s]
        prog.tag[s] = prog.tag[r] = number * TAG_STRIDE + np.arange(n)
    if not keep.all():  # their compute goes with them; the job's compute time is set afterwards
        prog.take(np.flatnonzero(keep))


def peer_ranks(prog: Program, npus: int) -> tuple[np.ndarray, np.ndarray]:
    """(peer of each p2p operation for every rank (ops x ranks), present (ops x ranks)): the
    rank `offset` away (offset = peer - self, for sends and receives) within the rank's block
    of `block` consecutive ranks; around the block's ends when the operation wraps, else
    absent there."""
    ranks = np.arange(npus)[None, :]
    block = np.maximum(prog.block, 1)[:, None]
    base = ranks // block * block
    raw = ranks + prog.offset[:, None]
    inside = (raw >= base) & (raw < base + block)
    wrapped = base + (ranks - base + prog.offset[:, None]) % block
    wrap = prog.wrap[:, None]
    return np.where(wrap, wrapped, raw % npus), inside | wrap


def _deadlock_free(prog: Program, groups: np.ndarray, npus: int) -> tuple[int, int] | None:
    """Runs the program abstractly on every rank (sends complete at once, a receive when its
    send was issued, a collective when every member reached it). None if every rank finishes;
    else (the blocked receive's position, its send's position)."""
    peers = peer_ranks(prog, npus)[0]
    present = ranks_present(prog, npus)
    # the position of each (send rank, tag) and which sends have been issued
    send_at: dict[tuple[int, int], int] = {}
    for i in np.flatnonzero(prog.kind == SEND_KIND).tolist():
        for r in np.flatnonzero(present[i]).tolist():
            send_at[(r, int(prog.tag[i]))] = i
    lists = [np.flatnonzero(present[:, r]) for r in range(npus)]
    pointer = [0] * npus
    issued: set[tuple[int, int]] = set()
    waiting_send: dict[tuple[int, int], list[int]] = defaultdict(list)
    arrived: dict[tuple[int, int], list[int]] = defaultdict(list)
    ready = deque(range(npus))
    blocked: dict[int, tuple[int, int]] = {}
    while ready:
        r = ready.popleft()
        ops = lists[r]
        while pointer[r] < len(ops):
            i = int(ops[pointer[r]])
            kind = prog.kind[i]
            if kind == SEND_KIND:
                key = (r, int(prog.tag[i]))
                issued.add(key)
                ready.extend(waiting_send.pop(key, []))
            elif kind == RECV_KIND:
                key = (int(peers[i, r]), int(prog.tag[i]))
                if key not in issued:
                    waiting_send[key].append(r)
                    blocked[r] = (i, send_at.get(key, -1))
                    break
            else:
                group = int(groups[i, r])
                members = arrived[(i, group)]
                members.append(r)
                size = int((groups[i] == group).sum())
                if len(members) < size:
                    break
                for m in members:
                    if m != r:
                        pointer[m] += 1
                        ready.append(m)
            blocked.pop(r, None)
            pointer[r] += 1
    stuck = [r for r in range(npus) if pointer[r] < len(lists[r])]
    if not stuck:
        return None
    for r in stuck:
        if r in blocked and blocked[r][1] > blocked[r][0]:
            return blocked[r]
    raise SamplingError("the sampled program cannot finish and no receive can be moved after its send")


def _gaps(cluster: Cluster, prog: Program, present: np.ndarray, compute_us: float, rng: np.random.Generator
          ) -> None:
    """Draws every gap's node count and time, scaled so that a rank's compute (the gaps it
    runs: those before its operations, and the last) is `compute_us` on average."""
    npus = present.shape[1]
    x = math.log2(npus)
    sources = np.vstack([prog.gap.reshape(-1, 2), np.array(prog.end_gap).reshape(1, 2)])
    values = np.empty((len(sources), 2))
    for j, c in np.unique(sources, axis=0).tolist():
        at = np.flatnonzero((sources[:, 0] == j) & (sources[:, 1] == c))
        values[at] = cluster.chains[j].gap_mixture.sample(x, rng, len(at), c)
    us = np.maximum(np.exp2(values[:, 0]) - 1, 0)
    count = np.maximum(np.round(np.exp2(values[:, 1]) - 1), 0).astype(np.int64)
    count[(us >= 0.5) & (count == 0)] = 1
    us[count == 0] = 0
    per_rank = (us[:-1, None] * present).sum(axis=0) + us[-1]
    if per_rank.mean() > 0:
        us *= compute_us / per_rank.mean()  # the job's compute time, drawn with its sequence length
    prog.gap_count = count
    # each gap's time split over its nodes (Dirichlet(1) shares), rounded so that the totals stay
    weights = rng.exponential(size=int(count.sum()))
    gap_of = np.repeat(np.arange(len(count)), count)
    share = weights / np.bincount(gap_of, weights=weights, minlength=len(count))[gap_of]
    exact = np.cumsum(share * us[gap_of])
    prog.node_us = np.diff(np.round(exact), prepend=0.0).astype(np.int64).clip(0)
    prog.node_cpu = rng.random(len(weights)) < cluster.cpu_share
    classes = np.array([OP_CLASS_NAMES.index(name) for name in cluster.op_classes] or
                       [OP_CLASS_NAMES.index("other")])
    counts = np.array(list(cluster.op_classes.values()) or [1], float)
    prog.node_class = classes[rng.choice(len(classes), size=len(weights), p=counts / counts.sum())]


def _groups(cluster: Cluster, prog: Program, npus: int, rng: np.random.Generator
            ) -> tuple[np.ndarray, dict[int, tuple[int, ...]]]:
    """Per operation and rank, the id of the rank's group (0 = world; -1 for point-to-point),
    and the communicator groups {id: members}."""
    ranks = np.arange(npus)
    x = math.log2(npus)
    groups: dict[int, tuple[int, ...]] = {}
    gid_of: dict[tuple[int, ...], int] = {}  # labels laid out alike share their groups
    pg_of_label: dict[int, np.ndarray] = {}
    divisors = [m for m in range(2, npus + 1) if npus % m == 0]
    for label in np.unique(prog.label[(prog.kind != SEND_KIND) & (prog.kind != RECV_KIND)]).tolist():
        spec = cluster.labels[label]
        members = npus
        if spec.kind in ("block", "strided"):
            want = float(np.exp2(spec.members.sample(x, rng)[0, 0]))
            members = min(divisors, key=lambda m: (abs(math.log2(m) - math.log2(max(want, 1))), m))
        if members == npus:
            pg_of_label[label] = np.zeros(npus, np.int64)
            continue
        if members == 2 and spec.kind == "block":
            index = ranks // 2  # contiguous pairs: neighbours on the ring
        else:
            index = ranks % (npus // members)  # evenly spread: every (npus / members)-th rank
        ids = np.zeros(npus, np.int64)
        for g in np.unique(index).tolist():
            members_of_g = tuple(ranks[index == g].tolist())
            gid = gid_of.setdefault(members_of_g, len(gid_of) + 1)
            groups[gid] = members_of_g
            ids[index == g] = gid
        pg_of_label[label] = ids
    out = np.full((len(prog.kind), npus), -1, np.int64)
    for label, ids in pg_of_label.items():
        at = np.flatnonzero((prog.label == label) & (prog.kind != SEND_KIND) & (prog.kind != RECV_KIND))
        out[at] = ids[None, :]
    return out, groups


def draw_program(model: SynthModel, cluster_index: int, npus: int, rng: np.random.Generator, length: int | None
                 ) -> tuple[Program, np.ndarray, dict[int, tuple[int, ...]]]:
    cluster = model.clusters[cluster_index]
    x = math.log2(npus)
    log_length, log_compute = cluster.job.sample(x, rng)[0]
    if not any(t[0] != END for t in cluster.tokens):
        length = 0  # the cluster's jobs never communicate: compute only
    elif length is None:
        length = max(1, int(round(float(np.exp2(log_length)))))
    compute_us = float(max(np.exp2(log_compute) - 1, 0))
    chain = _Chain(cluster, npus)
    tokens, end = chain.walk(length, rng)
    fields = np.array([cluster.tokens[t] for t in tokens] or np.zeros((0, 7)), np.int64).reshape(-1, 7)
    gaps = chain.gaps(tokens + [end], rng)
    prog = Program(kind=fields[:, 0], label=fields[:, 1], size=np.zeros(len(fields), np.int64),
                    overlap=fields[:, 3], uneven=fields[:, 4].astype(bool), gap=gaps[:-1],
                    end_gap=(int(gaps[-1, 0]), int(gaps[-1, 1])))
    prog.size = _sizes(cluster, npus, prog.kind, fields[:, 2], rng)
    # broadcasts are replayed by their duration, each rank its own (as measured: they differ per rank)
    prog.op_us = np.zeros((len(fields), npus), np.int64)
    broadcasts = np.flatnonzero(prog.kind == BROADCAST)
    if len(broadcasts) and cluster.broadcast is not None:
        drawn = cluster.broadcast.sample(x, rng, len(broadcasts) * npus)[:, 0].reshape(len(broadcasts), npus)
        prog.op_us[broadcasts] = np.maximum(np.round(np.exp2(drawn) - 1), 0)
    prog.tag = np.zeros(len(fields), np.int64)
    prog.offset = np.zeros(len(fields), np.int64)
    prog.block = np.zeros(len(fields), np.int64)
    prog.wrap = np.zeros(len(fields), bool)
    divisors = [m for m in range(1, npus + 1) if npus % m == 0]
    for label in np.unique(prog.label[(prog.kind == SEND_KIND) | (prog.kind == RECV_KIND)]).tolist():
        spec = cluster.labels[label]
        offset = npus // 2 if spec.half else int(np.sign(spec.offset)) * min(abs(spec.offset), npus - 1)
        offset = offset or 1
        block = npus
        if not spec.wrap:  # the block its messages stay in, | N, a divisor of N beyond the offset
            want = math.log2(max(float(np.exp2(spec.block.sample(x, rng)[0, 0])), 1.0))
            block = min((m for m in divisors if m > abs(offset)), key=lambda m: (abs(math.log2(m) - want), m))
        at = (prog.label == label) & ((prog.kind == SEND_KIND) | (prog.kind == RECV_KIND))
        prog.offset[at] = offset
        prog.block[at] = block
        prog.wrap[at] = spec.wrap
    _pair_point_to_point(prog, npus)
    groups, comm_groups = _groups(cluster, prog, npus, rng)
    for _ in range(len(prog.kind) + 1):
        found = _deadlock_free(prog, groups, npus) if ((prog.kind == SEND_KIND) | (prog.kind == RECV_KIND)).any() \
            else None
        if found is None:
            break
        recv, send = found  # move the receive just after its send (every rank runs the same program)
        order = np.r_[np.arange(recv), np.arange(recv + 1, send + 1), recv, np.arange(send + 1, len(prog.kind))]
        prog.take(order)
        groups = groups[order]
    else:
        raise SamplingError("the sampled program still cannot finish after moving every receive")
    _gaps(cluster, prog, ranks_present(prog, npus), compute_us, rng)
    return prog, groups, comm_groups


def ranks_present(prog: Program, npus: int) -> np.ndarray:
    """Which rank runs which operation (ops x ranks): all collectives; point-to-point where the peer exists."""
    is_p2p = (prog.kind == SEND_KIND) | (prog.kind == RECV_KIND)
    return np.where(is_p2p[:, None], peer_ranks(prog, npus)[1], True)
