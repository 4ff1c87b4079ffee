"""Where a rank's recorded time inside collapsed nodes goes (docs/ingestion.md, 'Time of
communication calls').

A communication call on the host is a nest of nodes: the recorder's `chakra::pg=` annotation
(the whole Python call of `torch.distributed.<fn>`), the `c10d::*` dispatcher op with the
wrappers and tensor ops inside it, and, with gloo, `gloo:*` spans (on a gloo worker thread for
collectives, on the calling thread for send/recv). All but the anchor are collapsed into one
communication node. Their recorded CPU time is of two kinds:

- host time: Python before the dispatcher op, the dispatcher op itself (argument checks,
  output allocation, enqueueing the work), and Python after the work completed. The calling
  thread runs it whatever the network; it is kept, on the annotation node (which stays as a
  CPU node where the call was) or, without one, on the nearest kept ancestor on the same
  thread;
- blocked time: the calling thread inside the call while the call's gloo work runs (the
  overlap of the collapsed nodes' own time with the span of that work: the wait of a blocking
  call), and the `gloo:send` / `gloo:recv` spans on the calling thread, which last until the
  thread's wait() for them returns. It is reported per communication node (`blocked`), for the
  job converter to split into the call's own duration (kept as a CPU node: job.keep_own_time)
  and the waiting for peers that came later (left to the simulator, which makes it from the
  ranks' own times).

Own time of a collapsed node = its span minus the spans of the CPU events that start inside it
on the same thread (the innermost-event rule; exact for properly nested events, and a partition
of the thread's time when gloo's spans overlap their neighbours).
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import compress

import numpy as np

from chakra_core.convert.pytorch.kineto import CpuEvent, Linked, Stretches, column

MAX_ANCESTOR_WALK = 64
# a thread that goes on within this long after communication work ended was waiting for it
RESUMED_AFTER_WORK_US = 1000.0


@dataclass
class CallTime:
    host: dict[int, float] = field(default_factory=dict)  # kept host index -> µs of collapsed host time it takes
    blocked: dict[int, float] = field(default_factory=dict)  # anchor -> µs its calling thread was blocked on it
    target_of: dict[int, int] = field(default_factory=dict)  # anchor -> kept host index holding its host time
    resumes: dict[int, float] = field(default_factory=dict)  # anchor -> when its gloo span on the caller's thread ended
    totals: dict[str, float] = field(default_factory=lambda: defaultdict(float))  # µs by kind, for the report


def _subtract(intervals: list[tuple[float, float]], cut: tuple[float, float]) -> tuple[list, float]:
    """intervals minus one interval, and the length removed."""
    out, removed = [], 0.0
    s, e = cut
    for a, b in intervals:
        if b <= s or a >= e:
            out.append((a, b))
            continue
        removed += min(b, e) - max(a, s)
        if a < s:
            out.append((a, s))
        if b > e:
            out.append((e, b))
    return out, removed


def account(cpu: Mapping[int, CpuEvent], linked: CpuColumns, collapsed: dict[int, str], anchor_of: list[int],
            parent: Sequence[int], kept_cpu, work: dict[int, tuple[float, float]]) -> CallTime:
    """Split the own time of collapsed nodes into host time and blocked time.

    cpu: host index -> its Kineto CPU event; linked: those as columns (with every Kineto CPU
    event, CpuColumns.trace_events); collapsed: host
    index -> "annotation" (kept as a CPU node), "anchor", "wrapped" or "gloo"; kept_cpu(i): True
    for a host node that becomes a CPU node; work: anchor -> (start, end) of its gloo work."""
    result = CallTime()
    if not collapsed:
        return result
    by_thread, place = _thread_order(linked.trace_events, {cpu[i].tid for i in collapsed if i in cpu})
    event_at = np.full(len(parent), -1, np.int64)  # host index -> its event's place in the trace
    event_at[linked.index] = linked.position
    anchor_index = {id(cpu[a]): a for a in work if a in cpu}

    def nearest_kept(i: int, tid) -> int | None:
        p, steps = parent[i], 0
        while p >= 0 and steps < MAX_ANCESTOR_WALK:
            if kept_cpu(p):
                event = cpu.get(p)
                return p if event is not None and event.tid == tid else None
            p, steps = parent[p], steps + 1
        return None

    for i, kind in collapsed.items():
        e = cpu.get(i)
        if e is None:
            continue
        end = e.ts + e.dur
        own, enclosed = _own_spans(e, by_thread[e.tid], int(place[event_at[i]]), anchor_index)
        anchor = anchor_of[i] if kind != "annotation" else -1
        if anchor >= 0:
            caller = cpu.get(anchor)
            if caller is None or caller.tid != e.tid:  # the work's own thread (gloo's), not the caller's time
                continue
        if kind == "gloo":  # gloo's span on the calling thread is the communication itself, up to its wait()
            result.resumes[anchor] = max(result.resumes.get(anchor, 0.0), end)
            length = sum(b - a for a, b in own)
            result.blocked[anchor] = result.blocked.get(anchor, 0.0) + length
            result.totals["blocked"] += length
            continue
        for a in ([anchor] if anchor >= 0 else enclosed):
            if a in work:
                own, removed = _subtract(own, work[a])
                if removed:
                    result.blocked[a] = result.blocked.get(a, 0.0) + removed
                    result.totals["blocked"] += removed
        length = sum(b - a for a, b in own)
        if kind == "annotation":
            target = i
            result.host[i] = result.host.get(i, 0.0) + length
        else:
            target = nearest_kept(anchor, e.tid)
            if target is None:
                result.totals["host time with no kept node on its thread"] += length
                continue
            result.target_of.setdefault(anchor, target)
            result.host[target] = result.host.get(target, 0.0) + length
        result.totals[f"host time of {kind}s"] += length
    for a in work:  # where the own duration of each communication call is to be kept
        if a not in result.target_of and a in cpu:
            target = nearest_kept(a, cpu[a].tid)
            if target is not None:
                result.target_of[a] = target
    return result


def _thread_order(events: list[CpuEvent], threads: set) -> tuple[dict, np.ndarray]:
    """The events of the given threads, per thread in start order (the longer first at a tie),
    and each event's place in its thread's list, by its place in `events` (-1: another thread)."""
    codes: dict = {}
    thread = column(events, "tid", codes)
    wanted = [codes[tid] for tid in threads if tid in codes]
    on = np.flatnonzero(np.isin(thread, wanted))
    order = on[np.lexsort((-column(events, "dur")[on], column(events, "ts")[on], thread[on]))]  # stable, as the sort
    sorted_thread = thread[order]
    place = np.full(len(events), -1, np.int64)
    by_thread = {}
    for tid in threads:
        code = codes.get(tid)
        if code is None:
            continue
        lo, hi = np.searchsorted(sorted_thread, code, "left"), np.searchsorted(sorted_thread, code, "right")
        by_thread[tid] = list(map(events.__getitem__, order[lo:hi].tolist()))
        place[order[lo:hi]] = np.arange(hi - lo)
    return by_thread, place


def _own_spans(e: CpuEvent, thread_events: list[CpuEvent], k0: int,
               anchor_index: dict[int, int]) -> tuple[list[tuple[float, float]], list[int]]:
    """The spans of event e (at k0 in its thread's events) that no inner event covers, and the
    communication calls (anchor indices) among its inner events."""
    end = e.ts + e.dur
    inner, enclosed = [], []
    for k in range(k0 + 1, len(thread_events)):
        x = thread_events[k]
        if x.ts >= end:
            break
        inner.append((x.ts, min(x.ts + x.dur, end)))
        if id(x) in anchor_index:
            enclosed.append(anchor_index[id(x)])
    own, cursor = [], e.ts
    for a, b in sorted(inner):
        if a > cursor:
            own.append((cursor, a))
        cursor = max(cursor, b)
    if end > cursor:
        own.append((cursor, end))
    return own, enclosed


def remove_waiting_between_ops(result: CallTime, stretches: Stretches, work: dict[int, tuple[float, float]],
                               operators: np.ndarray) -> dict[tuple[int, float], tuple[int, float, int]]:
    """A thread in no operator while communication runs, which goes on as soon as that
    communication ends, was waiting for it: DDP at the end of backward, waiting for its bucket
    all-reduces, is in no operator, so the wait would be the enclosing ProfilerStep's own time
    and count twice, once as compute and once where the simulator (or a replay) waits on the
    all-reduce the next operators depend on. Such a stretch of an event's exclusive time (one
    after one of its operators ended, in which communication work ends, the thread going on
    within RESUMED_AFTER_WORK_US) loses the part that work spans; the simulator makes the
    wait from the dependency. Only operators (`operators`: a mask over the stretches' events;
    kept as CPU nodes with their exclusive time) are looked at: a communication call's own
    nodes have their blocked time accounted already. The stretches (KinetoTrace.after_children)
    follow one of the event's children: an operator's own body, Python before its first child,
    is never cut. Returns the stretches cut, (id(event), start) -> (its thread, where it ends,
    the communication op whose work ended last in it)."""
    ops = sorted(work, key=lambda op: work[op][1])
    spans = [work[op] for op in ops]
    cut: dict[tuple[int, float], tuple[int, float, int]] = {}
    if not spans:
        return cut
    ends = np.array([end for _, end in spans], np.float64)
    # the work that ends in each stretch, found for all at once on the columns
    first, last = np.searchsorted(ends, stretches.start, "right"), np.searchsorted(ends, stretches.end, "right")
    ends_in = (first < last) & operators[stretches.event]
    ends_in[ends_in] = stretches.end[ends_in] - ends[last[ends_in] - 1] <= RESUMED_AFTER_WORK_US
    for k in np.flatnonzero(ends_in).tolist():
        event, a, b = stretches[k]
        waited = covered_length(a, b, spans[first[k]:last[k]])
        event.exclusive -= waited
        result.totals["waiting for communication between operators"] += waited
        cut[(id(event), a)] = (event.tid, b, ops[last[k] - 1])
    return cut


def covered_length(a: float, b: float, spans: list[tuple[float, float]]) -> float:
    """Length of [a, b) that the union of spans covers."""
    length, cursor = 0.0, a
    for start, end in sorted(spans):
        start, end = max(start, cursor), min(end, b)
        if end > start:
            length += end - start
            cursor = end
    return length


def keep_gaps_between_steps(result: CallTime, linked: CpuColumns, is_op: np.ndarray) -> None:
    """The training loop's thread (the one with ProfilerStep#N) runs Python between its
    top-level operators (between the recorded steps): that time is the thread's too, kept on the
    top-level operator that follows it (is_op: which linked events' host nodes are operators)."""
    events, names = linked.trace_events, {}
    name = column(events, "name", names)
    steps = [code for text, code in names.items() if text.startswith("ProfilerStep#")]
    loop_threads = {events[k].tid for k in np.flatnonzero(np.isin(name, steps)).tolist()}
    if not loop_threads:
        return
    idle = column(events, "idle_before")[linked.position]
    on_loop = np.isin(linked.thread, [linked.code(tid) for tid in loop_threads])
    chosen = np.flatnonzero((idle > 0) & on_loop & is_op)
    for i, gap in zip(linked.index[chosen].tolist(), idle[chosen].tolist()):
        result.host[i] = result.host.get(i, 0.0) + gap
        result.totals["host time between steps"] += gap


def own_time_nodes(anchors: list[int], gloo_nodes: dict[int, list[int]], kept: list[int], ids, tids,
                   cpu: dict[int, CpuEvent]) -> dict[int, int]:
    """gloo node -> anchor: for each blocking call whose own duration is kept, its first gloo:*
    node recorded after its c10d op and before the next kept node of its thread (ids are entry
    order, `kept` in that order), which becomes the CPU node holding it, on the calling thread
    just after the communication node. A call without one keeps it on its annotation."""
    by_thread: dict[int, list[int]] = {}
    for i in kept:
        by_thread.setdefault(tids[i], []).append(ids[i])
    chosen = {}
    for anchor in anchors:
        later = by_thread.get(tids[anchor], [])
        k = bisect.bisect_right(later, ids[anchor])
        before = later[k] if k < len(later) else None
        after = [g for g in gloo_nodes.get(anchor, ()) if ids[g] > ids[anchor] and g in cpu
                 and (before is None or ids[g] < before)]
        if after:
            chosen[min(after, key=lambda g: ids[g])] = anchor
    return chosen


def resumed_after(waits: list[tuple[int, float, int]], threads: np.ndarray, starts: np.ndarray, rows: np.ndarray
                  ) -> list[int | None]:
    """For each wait (thread, when it ended, a row the waiter must come after; -1: none), the row
    of the first node that thread started once the wait had ended, or None; the nodes that may
    be it (not communication nodes) are given as columns: thread codes (CpuColumns.thread), starts
    and rows.
    gloo's send/recv span on the calling thread ends when the thread's wait() for it returns,
    so the first node the thread starts then waited for that communication, wherever the
    (untraced) wait() was called; likewise after a wait for another thread or for the device."""
    order = np.lexsort((rows, starts, threads))  # by thread, then start, then row
    threads, starts, rows = threads[order], starts[order], rows[order]  # kept as arrays: a row each
    found: list[int | None] = [None] * len(waits)
    waiting = np.fromiter((code for code, _, _ in waits), np.int64, len(waits))
    ends = np.fromiter((end for _, end, _ in waits), np.float64, len(waits))
    for code in np.unique(waiting).tolist():
        lo, hi = np.searchsorted(threads, code, "left"), np.searchsorted(threads, code, "right")
        which = np.flatnonzero(waiting == code)
        firsts = lo + np.searchsorted(starts[lo:hi], ends[which] - 1.0, "left")  # started at end - 1 µs or later
        for j, k in zip(which.tolist(), firsts.tolist()):
            after_row = waits[j][2]
            while k < hi and rows[k] <= after_row:
                k += 1
            found[j] = int(rows[k]) if k < hi else None
    return found


class CpuColumns:
    """CPU events as columns, in the order given: for the per-event work of an analysis (waits,
    durations) done on arrays. Each pass over the events (one object each, all over memory) costs
    as much as the work on its column: the columns are taken once, for the conversion's linked
    events, by C passes over the Kineto trace's events, and subsets selected from them."""

    def __init__(self, events: list[CpuEvent], index: np.ndarray, thread: np.ndarray, ts: np.ndarray,
                 dur: np.ndarray, codes: dict, position: np.ndarray, trace_events: list[CpuEvent]):
        self.events = events
        self.index = index  # host index
        self.thread = thread  # the event's thread as a code of `codes`
        self.ts, self.dur, self.codes = ts, dur, codes
        self.position, self.trace_events = position, trace_events  # where each event is in the trace's CPU events

    @classmethod
    def of(cls, linked: Linked, trace_events: list[CpuEvent]) -> CpuColumns:
        """Columns of linked events (Linked.cpu: host index -> CpuEvent; trace_events: the Kineto
        trace's CPU events, which Linked.positions index)."""
        cpu, position = linked.cpu, linked.positions
        trace_codes: dict = {}
        thread = column(trace_events, "tid", trace_codes)[position]
        # numbered by first appearance among the linked events
        present, first = np.unique(thread, return_index=True)
        by_first = present[np.argsort(first)]
        renumber = np.zeros(len(trace_codes), np.int64)
        renumber[by_first] = np.arange(len(by_first))
        tids = list(trace_codes)
        codes = {tids[c]: k for k, c in enumerate(by_first.tolist())}
        events = list(map(trace_events.__getitem__, position.tolist()))  # cpu's values, in its order
        return cls(events, np.fromiter(cpu, np.int64, len(cpu)), renumber[thread],
                   column(trace_events, "ts")[position], column(trace_events, "dur")[position], codes, position,
                   trace_events)

    def select(self, mask: np.ndarray) -> CpuColumns:
        """The events where mask is true, in the same order."""
        return CpuColumns(list(compress(self.events, mask.tolist())), self.index[mask], self.thread[mask],
                          self.ts[mask], self.dur[mask], self.codes, self.position[mask], self.trace_events)

    def exclusive(self) -> np.ndarray:
        """Each event's exclusive time now (the analysis cuts waits out of it)."""
        return column(self.trace_events, "exclusive")[self.position]

    def in_trace(self) -> np.ndarray:
        """Which of the trace's CPU events are these, as a mask over them."""
        mask = np.zeros(len(self.trace_events), bool)
        mask[self.position] = True
        return mask

    def index_of(self, events: list[CpuEvent]) -> np.ndarray:
        """The host index of each of these events (each one of the columns')."""
        ids = np.fromiter(map(id, self.events), np.int64, len(self.events))
        at = np.argsort(ids)
        found = np.searchsorted(ids[at], np.fromiter(map(id, events), np.int64, len(events)))
        return self.index[at[found]]

    def code(self, tid) -> int:
        """The code of a thread; -1 for one with no event here."""
        return self.codes.get(tid, -1)


def summary(result: CallTime, own: float) -> tuple[dict[str, int], str | None]:
    """The report's time_us and a note: where the recorded time of communication calls went
    (own: the µs of the calls' own duration the job converter kept)."""
    totals, time_us = result.totals, {}
    host = sum(v for k, v in totals.items() if k.startswith("host time of "))
    between, blocked = totals.get("host time between steps", 0.0), totals.get("blocked", 0.0)
    if between:
        time_us["host time between steps"] = round(between)
    left = [(what, totals.get(what, 0.0)) for what in ("waiting for communication between operators",
                                                         "waiting for other threads", "waiting for the device")]
    for what, us in left:
        if us:
            time_us[f"{what}, left to the simulator"] = round(us)
    between_ops = "".join(f"; {us / 1e3:,.3f} ms {what}, left to the simulator" for what, us in left if us)
    if not host and not blocked:
        return time_us, between_ops[2:] or None
    time_us.update({"host time of communication calls": round(host), "blocked on communication": round(blocked),
                    "own duration of communication calls kept": round(own),
                    "waiting for peers, left to the simulator": round(max(0.0, blocked - own))})
    parts = ", ".join(f"{k[len('host time of '):]} {v / 1e3:,.3f}" for k, v in sorted(totals.items())
                      if k.startswith("host time of "))
    note = (f"communication calls: {host / 1e3:,.3f} ms of host time kept on CPU nodes ({parts});"
            f" {blocked / 1e3:,.3f} ms blocked on communication, of which {own / 1e3:,.3f} ms kept as CPU nodes"
            " (each call's own duration: the shortest wait among its ranks), the rest waiting for peers,"
            " left to the simulator")
    lost = totals.get("host time with no kept node on its thread", 0.0)
    if lost:
        note += f"; {lost / 1e3:,.3f} ms of host time had no kept node on its thread and is not kept"
    return time_us, note + between_ops
