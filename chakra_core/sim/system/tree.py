"""doubleBinaryTree all-reduce (docs/simulator.md, 'doubleBinaryTree'): the trees and a rank's packet machine.

Two trees over the N ranks: a top node with a single child, over a
complete binary subtree numbered in order. RootMax puts the top at rank N-1 (its child the
middle of ranks 0..N-2); RootMin puts it at rank 0 (over ranks 1..N-1). Even chunks use
RootMax, odd chunks RootMin. Every message carries the whole chunk D.

Per chunk and rank: a leaf sends up after the endpoint delay e and ends e after its
parent's data arrives; an inner rank reduces each child's data on arrival (e + p, never
waiting for another reduction), sends up after the second reduction, and when its parent's
data arrives takes e + p, sends to both children at once and ends; the top reduces its
child's data (e + p), sends it back down and ends. Each rank runs its chunks through its own
queues (system/packets.py), so ranks start later chunks at different ticks and finish at different
times; data that reaches a rank before it has started that chunk waits for the start.

ASTRA-sim builds these trees for powers of two only (it crashes otherwise); the in-order
construction here is defined for any N and is used as the natural extension.
"""

from __future__ import annotations

from collections import defaultdict
from functools import lru_cache

from chakra_core.sim.errors import SimulationError


def tree(n: int, root_max: bool) -> tuple[dict[int, int], dict[int, list[int]]]:
    """(parent of each rank, children of each rank) of one of the two trees."""
    if n < 2:
        raise SimulationError(f"doubleBinaryTree needs at least 2 ranks, not {n}")
    parent: dict[int, int] = {}
    children: dict[int, list[int]] = defaultdict(list)

    def build(lo: int, hi: int, up: int) -> None:  # the in-order complete subtree over ranks lo..hi
        if lo > hi:
            return
        mid = (lo + hi) // 2
        parent[mid] = up
        children[up].append(mid)
        build(lo, mid - 1, mid)
        build(mid + 1, hi, mid)

    top = n - 1 if root_max else 0
    build(0 if root_max else 1, n - 2 if root_max else n - 1, top)
    return parent, children


class TreeAlgorithm:
    """Per phase: the two trees over the phase's N ranks, e, and p of the whole chunk."""

    __slots__ = ("d", "e", "p", "trees")

    def __init__(self, phase, e: int, p):
        self.d, self.e, self.p = phase.bytes_in, e, p(phase.bytes_in)
        self.trees = _trees(phase.ranks)

    def machine(self, inst, npu: int, chunk: int, phase: int, rank: int, peers) -> TreeMachine:
        return TreeMachine(inst, self, npu, chunk, phase, rank, peers)

    def peers(self, rank: int, directions: set[int]) -> set[int]:
        """The ranks `rank` sends to: its parent and children in either tree (whatever the ring
        directions)."""
        ends = ((parent.get(rank), *children.get(rank, ())) for parent, children in self.trees)
        return {r for rank_ends in ends for r in rank_ends if r is not None}


@lru_cache(maxsize=None)
def _trees(n: int) -> tuple[tuple[dict[int, int], dict[int, list[int]]], ...]:
    return tree(n, root_max=True), tree(n, root_max=False)


class TreeMachine:
    """One rank's part of one chunk's all-reduce on its tree (the rules above)."""

    __slots__ = ("inst", "algo", "npu", "chunk", "phase", "rank", "peers", "parent", "kids", "started", "held",
                 "reduced")

    def __init__(self, inst, algo: TreeAlgorithm, npu: int, chunk: int, phase: int, rank: int, peers):
        self.inst, self.algo, self.npu, self.chunk, self.phase = inst, algo, npu, chunk, phase
        self.rank, self.peers = rank, peers
        parent, children = algo.trees[chunk % 2]  # even chunks on RootMax, odd on RootMin
        self.parent = parent.get(rank)  # None at the top
        self.kids = children.get(rank, [])
        self.started = False
        self.held: list[int] = []  # senders of data that arrived before the start
        self.reduced: list[int] = []  # ticks the children's reductions end

    def start(self, now: int) -> None:
        self.started = True
        call = self.inst.call
        if not self.kids:  # a leaf sends its data up after e
            call(now + self.algo.e, self._send, self.parent)
        for src in self.held:
            call(now, self.arrive, src)
        self.held = []

    def arrive(self, now: int, src: int) -> None:
        if not self.started:
            self.held.append(src)
            return
        algo, call = self.algo, self.inst.call
        if src in self.kids:  # a child's data: reduce it (reductions never wait for one another)
            self.reduced.append(now + algo.e + algo.p)
            if len(self.reduced) == len(self.kids):
                ready = max(self.reduced)
                if self.parent is not None:  # an inner rank sends the reduced data up
                    call(ready, self._send, self.parent)
                else:  # the top sends the result back down and is done
                    for kid in self.kids:
                        call(ready, self._send, kid)
                    call(ready, self._end)
        elif self.kids:  # the result from the parent: reduce, pass it down to both children, done
            ready = now + algo.e + algo.p
            for kid in self.kids:
                call(ready, self._send, kid)
            call(ready, self._end)
        else:  # a leaf gets the result
            call(now + algo.e, self._end)

    def _send(self, now: int, dst: int) -> None:
        self.inst.send(now, self, dst, self.algo.d)

    def _end(self, now: int) -> None:
        self.inst.phase_done(now, self)
