"""The C walks over a thread's spans (chakra_core/_native/threadspans.c, used by
kineto._exclusive_times, kineto.innermost_open and the Kineto-only host trace's nesting) against
the Python walks they replaced, kept here as the reference: the same exclusive times, idle gaps,
stretches, launchers and parents, to the bit."""

from __future__ import annotations

import math
import random
from collections import defaultdict

import numpy as np
import pytest

from datapaths import DATASETS

from chakra_core._native import _threadspans
from chakra_core.convert.pytorch.kineto import (
    CpuEvent,
    RuntimeEvent,
    _exclusive_times,
    column,
    innermost_open,
    read_kineto,
)

SHIPPED = sorted(DATASETS.glob("gpu-h200*/*/rank0.kineto.json.gz")) + \
    sorted(DATASETS.glob("pytorch-gloo/*-w2/rank0.kineto.json.gz"))


def reference_exclusive(events: list[CpuEvent]) -> tuple[list, list, list]:
    """(exclusive times, idle_before, stretches after children) as the Python walk computed them."""
    exclusive, idle = defaultdict(float), defaultdict(float)
    after = []
    by_thread = defaultdict(list)
    for e in events:
        by_thread[e.tid].append(e)
    for thread_events in by_thread.values():
        thread_events.sort(key=lambda e: (e.ts, -e.dur))
        stack, at, covered = [], 0.0, None
        for e in [*thread_events, None]:
            to = e.ts if e is not None else math.inf
            while stack and at < to:
                end, top = stack[-1]
                if end <= at:
                    stack.pop()
                    continue
                upto = min(to, end)
                exclusive[id(top)] += upto - at
                if at > top.ts:
                    after.append((top, at, upto))
                at = upto
            if e is not None:
                end = e.ts + e.dur
                stack.append((end, e))
                at = e.ts
                if covered is not None and e.ts > covered:
                    idle[id(e)] = e.ts - covered
                covered = end if covered is None or end > covered else covered
    return [exclusive[id(e)] for e in events], [idle[id(e)] for e in events], after


def reference_innermost(events: list[CpuEvent], calls: list[RuntimeEvent]) -> list:
    by_thread = defaultdict(list)
    for e in events:
        by_thread[e.tid].append((e.ts, 0, -e.dur, e))
    for k, r in enumerate(calls):
        by_thread[r.tid].append((r.ts, 1, k, r))
    found = [None] * len(calls)
    for items in by_thread.values():
        items.sort(key=lambda x: (x[0], x[1], x[2]))
        stack = []
        for ts, is_call, k, item in items:
            while stack and stack[-1].ts + stack[-1].dur < ts:
                stack.pop()
            if not is_call:
                stack.append(item)
            elif stack:
                found[k] = stack[-1]
    return found


def _check(events: list[CpuEvent], calls: list[RuntimeEvent]) -> None:
    exclusive, idle, after = reference_exclusive(events)
    got_after = _exclusive_times(events)
    assert [e.exclusive for e in events] == exclusive
    assert [e.idle_before for e in events] == idle
    assert [(id(e), a, b) for e, a, b in got_after] == [(id(e), a, b) for e, a, b in after]
    assert [id(e) for e in innermost_open(events, calls)] == [id(e) for e in reference_innermost(events, calls)]


def test_the_shipped_traces_walk_as_before():
    assert len(SHIPPED) >= 5
    for path in SHIPPED:
        trace = read_kineto(str(path))
        _check(trace.cpu, trace.runtime)


@pytest.mark.parametrize("seed", range(20))
def test_random_spans_walk_as_before(seed):
    """Ties, equal starts, zero durations, spans that overlap without nesting, string threads."""
    rng = random.Random(seed)
    threads = [1, 2, "gloo"]
    events = [CpuEvent(f"op{k}", rng.choice(threads), float(rng.randrange(50)) + rng.choice((0.0, 0.25, 0.5)),
                       float(rng.choice((0, 1, 2, 5, 10, 30))) + rng.choice((0.0, 0.125)), None, None)
              for k in range(rng.randrange(1, 60))]
    calls = [RuntimeEvent(rng.choice(threads), float(rng.randrange(60)) + rng.choice((0.0, 0.5)), k, None)
             for k in range(rng.randrange(0, 40))]
    _check(events, calls)


def test_no_events_or_no_calls():
    assert list(_exclusive_times([])) == [] and len(_exclusive_times([])) == 0
    assert innermost_open([], []) == []
    call = RuntimeEvent(1, 5.0, 1, None)
    assert innermost_open([], [call]) == [None]


def reference_enclosing(events: list[CpuEvent]) -> list[int]:
    """Per event (in list order), the innermost earlier event of its thread still open at its
    start, as the Kineto-only host trace's Python loop found parents (-1: none)."""
    open_on, found = defaultdict(list), []
    for k, e in enumerate(events):
        stack = open_on[e.tid]
        while stack and stack[-1][0] <= e.ts:
            stack.pop()
        found.append(stack[-1][1] if stack else -1)
        stack.append((e.ts + e.dur, k))
    return found


@pytest.mark.parametrize("seed", range(10))
def test_enclosing_finds_the_parents_the_python_loop_found(seed):
    rng = random.Random(seed)
    events = [CpuEvent("op", rng.choice([1, 2, "gloo"]), float(rng.randrange(40)) + rng.choice((0.0, 0.5)),
                       float(rng.choice((0, 1, 3, 10, 30))), None, None) for _ in range(rng.randrange(0, 80))]
    events.sort(key=lambda e: (e.ts, -e.dur))
    thread = column(events, "tid")
    ts, dur = column(events, "ts"), column(events, "dur")
    got = np.frombuffer(_threadspans.enclosing(np.argsort(thread, kind="stable"), thread, ts, ts + dur), np.int64)
    assert got.tolist() == reference_enclosing(events)
