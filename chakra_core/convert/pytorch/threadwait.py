"""A host thread that waits for another thread's work (docs/ingestion.md, 'Threads and streams').

On a GPU, `loss.backward()` hands the backward pass to the autograd engine's device thread and
the calling thread waits, in no operator, until that thread is done. Kineto shows the wait only
as a gap in the caller's operators: without this module it is the enclosing operator's own time
(`ProfilerStep#N`'s), so the simulator would run it as host work beside the backward thread's
operators, which hold the same time again.

A stretch of a kept operator's exclusive time that follows one of its children (an operator's
own body, before its first child, is never cut) is a wait for another thread when that thread's
operators run in it and the waiting thread goes on within RESUMED_AFTER_THREAD_US of the last of
them ending. The stretch loses the time those operators cover, and the first operator the
waiting thread starts afterwards depends on the last operator the other thread started before
it resumed, so the simulator makes the wait from the dependency.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from chakra_core.convert.pytorch.hosttime import CpuColumns, covered_length
from chakra_core.convert.pytorch.kineto import CpuEvent, Stretches

# a thread that goes on within this long after another thread's operators ended was waiting for them
RESUMED_AFTER_THREAD_US = 1000.0


@dataclass(frozen=True)
class ThreadWait:
    """Thread `tid` waited until `resumed_at` for `waited_for`, an operator of another thread."""

    tid: int
    resumed_at: float
    waited_for: CpuEvent


class _ThreadActivity:
    """One thread's kept operators: the merged spans of its top-level ones, and every start."""

    def __init__(self, operators: CpuColumns, positions: np.ndarray):
        starts = operators.ts[positions]
        ends = starts + operators.dur[positions]
        order = np.lexsort((starts - ends, starts))  # by start, the longer (enclosing) first
        starts, ends = starts[order], ends[order]
        self._events, self._positions, self.starts = operators.events, positions[order], starts
        reach = np.maximum.accumulate(ends)  # an operator starting past every earlier end opens a span
        opens = np.flatnonzero(np.r_[True, starts[1:] > reach[:-1]]) if len(starts) else np.zeros(0, np.int64)
        self.ends_array = np.maximum.reduceat(ends, opens) if len(opens) else np.zeros(0)
        self.span_starts = starts[opens]

    def last_end_in(self, a: float, b: float) -> float | None:
        """The end of the last span that ends in (a, b]."""
        k = int(np.searchsorted(self.ends_array, b, "right")) - 1
        return float(self.ends_array[k]) if k >= 0 and self.ends_array[k] > a else None

    def spans_in(self, a: float, b: float) -> list[tuple[float, float]]:
        """This thread's spans that meet [a, b)."""
        first = np.searchsorted(self.ends_array, a, "right")
        after = np.searchsorted(self.span_starts, b, "left")  # spans are disjoint and in order
        return list(zip(self.span_starts[first:after].tolist(), self.ends_array[first:after].tolist()))

    def last_started_by(self, t: float) -> CpuEvent | None:
        k = int(np.searchsorted(self.starts, t, "right")) - 1
        return self._events[self._positions[k]] if k >= 0 else None


def _activity_by_thread(operators: CpuColumns) -> dict[int, _ThreadActivity]:
    """Each thread's activity, the threads in the order they first appear among `operators`."""
    order = np.argsort(operators.thread, kind="stable")
    bounds = np.searchsorted(operators.thread[order], np.arange(len(operators.codes) + 1)).tolist()
    firsts = {order[bounds[code]]: (tid, code) for tid, code in operators.codes.items() if bounds[code] < bounds[code + 1]}
    return {tid: _ThreadActivity(operators, order[bounds[code]:bounds[code + 1]])
            for _, (tid, code) in sorted(firsts.items())}


def remove_waiting_for_threads(stretches: Stretches, operators: CpuColumns, skip, totals: dict[str, float]
                               ) -> list[ThreadWait]:
    """Cut each wait for another thread out of the exclusive time of the kept operators
    (`operators`), looking at the stretches of exclusive time after a child (KinetoTrace.
    after_children); `skip`: stretches (id(event), start) already cut as waits for communication.
    Returns the waits, for the dependencies of the operators that resumed."""
    activity = _activity_by_thread(operators)
    if len(activity) < 2:
        return []
    waits = []
    for k in _resumed_soon_after_others(stretches, operators, activity).tolist():
        event, a, b = stretches[k]
        if (id(event), a) in skip:
            continue
        found = _wait_in(activity, event.tid, a, b)
        if found is None:
            continue
        waited_for, covered = found
        event.exclusive -= covered
        totals["waiting for other threads"] += covered
        waits.append(ThreadWait(event.tid, b, waited_for))
    return waits


def _resumed_soon_after_others(stretches: Stretches, operators: CpuColumns, activity: dict[int, _ThreadActivity]
                               ) -> np.ndarray:
    """The stretches of the operators' time in which another thread's span ends within
    RESUMED_AFTER_THREAD_US of the stretch's end: the only ones that can be waits (found for all
    at once on the stretches' columns, the rest skipped), as indices into `stretches`."""
    number = {tid: k for k, tid in enumerate(activity)}
    by_code = np.full(len(operators.codes), -1, np.int64)
    by_code[list(operators.codes.values())] = [number.get(tid, -1) for tid in operators.codes]
    thread_of = np.full(len(stretches.events), -1, np.int64)  # each trace event's thread in activity; -1: no operator
    thread_of[operators.position] = by_code[operators.thread]
    candidates = np.flatnonzero(thread_of[stretches.event] >= 0)
    a, b = stretches.start[candidates], stretches.end[candidates]
    threads_of = thread_of[stretches.event[candidates]]
    last = np.full(len(candidates), -np.inf)
    for tid, threads in activity.items():
        ends = threads.ends_array
        if not len(ends):
            continue
        k = np.searchsorted(ends, b, side="right") - 1
        end = np.where(k >= 0, ends[np.maximum(k, 0)], -np.inf)
        last = np.where((threads_of != number[tid]) & (end > a) & (end > last), end, last)
    return candidates[b - last <= RESUMED_AFTER_THREAD_US]


def _wait_in(activity: dict[int, _ThreadActivity], tid: int, a: float, b: float) -> tuple[CpuEvent, float] | None:
    """(the operator waited for, µs covered) when [a, b) on thread `tid` waits for other threads."""
    last_end, last_thread = None, None
    for other, threads in activity.items():
        if other == tid:
            continue
        end = threads.last_end_in(a, b)
        if end is not None and (last_end is None or end > last_end):
            last_end, last_thread = end, threads
    if last_end is None or b - last_end > RESUMED_AFTER_THREAD_US:
        return None
    covered = covered_length(a, b, [s for other, threads in activity.items() if other != tid
                                    for s in threads.spans_in(a, b)])
    waited_for = last_thread.last_started_by(last_end)
    return (waited_for, covered) if waited_for is not None and covered > 0 else None


def waits_after_communication(cut: dict, operators: CpuColumns, work: list[tuple[CpuEvent, CpuEvent]]
                              ) -> list[ThreadWait]:
    """Where the trace records no tensors (a Kineto trace alone), nothing else ties the operators
    that go on after communication to it:
    - `work`: (a span of a communication op's work on its worker thread, the op): the operator
      that starts next on that thread after the span began (the op's completion callback, which
      may start just before the span is closed) waits for the op;
    - `cut`: the stretches hosttime cut as waits for communication, (id(event), start) ->
      (thread, end, the op whose work ended last in it): the thread waits for the operator another
      thread ended last before it went on (that callback) when one did, else for the op itself;
    - a thread idle between two of its operators that goes on right after other threads'
      operators ended (the autograd thread finishing DDP's buckets) waits for the last of them.
    The time is cut already (or was idle); these are only the dependencies."""
    waits = [ThreadWait(span.tid, span.ts, op) for span, op in work]
    activity = _activity_by_thread(operators)
    for (_, start), (tid, end, op) in cut.items():
        found = _wait_in(activity, tid, start, end)
        waits.append(ThreadWait(tid, end, found[0] if found is not None else op))
    for e in operators.events:
        found = _wait_in(activity, e.tid, e.ts - e.idle_before, e.ts) if e.idle_before > 0 else None
        if found is not None:
            waits.append(ThreadWait(e.tid, e.ts, found[0]))
    return waits
