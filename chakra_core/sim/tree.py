"""doubleBinaryTree all-reduce (ASTRA_SIM_MODEL_FACTS.md section 3.4), replayed message by message.

Two trees over the N ranks: a top node with a single child, over a
complete binary subtree numbered in order. RootMax puts the top at rank N-1 (its child the
middle of ranks 0..N-2); RootMin puts it at rank 0 (over ranks 1..N-1). Even chunks use
RootMax, odd chunks RootMin. Every message carries the whole chunk D.

Per chunk and rank: a leaf sends up after the endpoint delay e and ends e after its
parent's data arrives; an inner rank reduces each child's data on arrival (e + p, never
waiting for another reduction), sends up after the second reduction, and when its parent's
data arrives takes e + p, sends to both children at once and ends; the top reduces its
child's data (e + p), sends it back down and ends. Each rank runs its chunks through its own
queue, so ranks start later chunks at different ticks and finish at different times; data
that reaches a rank before it has started that chunk waits for the start.

ASTRA-sim builds these trees for powers of two only (it crashes otherwise); the in-order
construction here is defined for any N and is used as the natural extension.
"""

from __future__ import annotations

from collections import defaultdict

from chakra_core.sim.errors import SimulationError
from chakra_core.sim.events import EventQueue, insert_by_priority


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


def replay(n: int, chunks: int, chunk_bytes: int, e: int, p: int, delay, slots: int,
           priorities: list[int]) -> tuple[int, ...]:
    """Each rank's finish tick for one all-reduce; delay(src, dst, bytes) -> ns of a message."""
    trees = [tree(n, True), tree(n, False)]
    events = EventQueue()
    at = events.at

    started: dict[tuple[int, int], int] = {}  # (rank, chunk) -> start tick
    held: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)  # data waiting for a start
    reduced: dict[tuple[int, int], list[int]] = defaultdict(list)  # ticks the children's reductions end
    running = [0] * n
    waiting: list[list[int]] = [[] for _ in range(n)]
    left = [chunks] * n
    finish = [0] * n

    def send(src: int, dst: int, chunk: int, now: int) -> None:
        at(now + delay(src, dst, chunk_bytes), "data", dst, chunk, src)

    def start_waiters(rank: int, now: int) -> None:
        while waiting[rank] and running[rank] < slots:
            chunk = waiting[rank].pop(0)
            running[rank] += 1
            started[(rank, chunk)] = now
            parent, children = trees[chunk % 2]
            if not children.get(rank):  # a leaf sends its data up after e
                send(rank, parent[rank], chunk, now + e)
            for src, tick in held.pop((rank, chunk), []):
                at(max(tick, now), "data", rank, chunk, src)

    def end(rank: int, now: int) -> None:
        running[rank] -= 1
        left[rank] -= 1
        if not left[rank]:
            finish[rank] = now
        start_waiters(rank, now)

    for rank in range(n):
        for chunk in range(chunks):
            insert_by_priority(waiting[rank], chunk, priorities.__getitem__)
            start_waiters(rank, 0)

    while events:
        now, kind, rank, chunk, *rest = events.pop()
        if kind == "end":
            end(rank, now)
            continue
        (src,) = rest
        if (rank, chunk) not in started:
            held[(rank, chunk)].append((src, now))
            continue
        parent, children = trees[chunk % 2]
        kids = children.get(rank, [])
        if src in kids:  # a child's data: reduce it
            done = reduced[(rank, chunk)]
            done.append(now + e + p)
            if len(done) == len(kids):
                ready = max(done)
                if rank in parent:  # an inner rank sends the reduced data up
                    send(rank, parent[rank], chunk, ready)
                else:  # the top sends the result back down and is done
                    for kid in kids:
                        send(rank, kid, chunk, ready)
                    at(ready, "end", rank, chunk)
        else:  # the result from the parent
            if kids:
                ready = now + e + p
                for kid in kids:
                    send(rank, kid, chunk, ready)
                at(ready, "end", rank, chunk)
            else:
                at(now + e, "end", rank, chunk)
    return tuple(finish)
