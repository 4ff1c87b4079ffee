"""One rank's recorded (or simulated) time as the cross-rank critical path reads it: a sequence of
events on the rank's host thread.

- `("step", s)` / `("end", s)`: step s begins / ends (`ProfilerStep#N`; a trace without them is
  one step);
- `("work", ns, parts)`: time the rank spent on its own, `parts` saying on what: `compute:<class>`
  (the innermost operator running, by class, analysis/stats.op_class), `communication` (the own time a
  converter kept on a blocking call's CPU node, `gloo:...`), `input` (data loading) and `host`
  (no operator running: a stall, Python between operators; and a JAX profile's host gaps,
  `launch <op>` and `host after step N`);
- `("issue", key)`: the rank arrives at a communication (collective, send or receive), `key`
  naming it the same way on every rank of its group;
- `("wait", key)`: the host sat idle until that communication completed (a gap between operators
  in which it completed), and went on after it.

Communications are matched across ranks by their process group and their order in it (a
collective) or by their pair of ranks, tag and order (a send with its receive): the converted
ETs carry no collective sequence number on the node, and every member issues a group's
collectives in the same order. Each communication's recorded arrival (its start) and completion
(its end) are kept (`Communication`), from which the engine splits a member's time in it into its
wait for the last member and its own transfer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from chakra_core.analysis import intervals
from chakra_core.analysis.device_work import host_steps, recorded_times, step_marks
from chakra_core.analysis.stats import op_class
from chakra_core.format.depgraph import to_numpy
from chakra_core.format.nodenames import as_strings
from chakra_core.format.nodetypes import CALL_OWN_TIME_PREFIXES, COLL, COMP, HOST_GAP_PREFIXES, RECV, SEND
from chakra_core.format.normalize import normalize_table

COLUMNS = ("name", "type", "is_cpu_op", "start_time_micros", "duration_micros", "duration_ns", "tid",
           "pg_name", "comm_src", "comm_dst", "comm_tag")
INPUT_PREFIXES = ("enumerate(DataLoader", "DataLoader")  # data loading, the `input` cause


@dataclass
class Communication:
    arrival: int  # ns, when the rank issued it
    completion: int  # ns, when it completed on the rank (-1: not recorded)


@dataclass
class RankTimeline:
    rank: int
    start: int = 0  # ns, the first step's start
    events: list = field(default_factory=list)
    comms: dict = field(default_factory=dict)  # key -> Communication
    operators: dict = field(default_factory=dict)  # operator name -> ns it was the innermost running
    steps: list = field(default_factory=list)  # step names in order
    windows: list = field(default_factory=list)  # (start, end) ns of each step as recorded


def label_of(name: str) -> str:
    if name.startswith(CALL_OWN_TIME_PREFIXES):
        return "communication"
    if name.startswith(INPUT_PREFIXES):
        return "input"
    if name.startswith(HOST_GAP_PREFIXES):  # a JAX profile's host time around the device's work
        return "host"
    return "compute:" + op_class(name)


class _Coverage:
    """Time a disjoint interval set covers inside any window, from cumulative sums."""

    def __init__(self, spans: intervals.Intervals):
        self.starts, self.ends = spans
        self.before = np.r_[0, np.cumsum(self.ends - self.starts)]

    def upto(self, t: int) -> int:
        k = int(np.searchsorted(self.starts, t, side="right"))
        if k == 0:
            return 0
        return int(self.before[k - 1] + min(t, self.ends[k - 1]) - self.starts[k - 1])

    def within(self, a: int, b: int) -> int:
        return self.upto(b) - self.upto(a) if b > a else 0


def _main_thread(tids: np.ndarray, host: np.ndarray, marks: np.ndarray) -> np.ndarray:
    """Rows on the thread that runs the steps (the steps' own, else the busiest host thread)."""
    if tids is None or not host.any():
        return host
    on = tids[host & marks] if (host & marks).any() else tids[host]
    values, counts = np.unique(on, return_counts=True)
    return host & (tids == values[np.argmax(counts)])


def _innermost(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Nested intervals of one thread cut at every boundary: (piece starts, piece ends, the
    innermost interval open in each piece, -1 for none). The innermost is the latest started
    (ties: the shortest): painted in start order, an inner interval overwrites its parent."""
    order = np.lexsort((-(end - start), start))
    points = np.unique(np.concatenate([start, end]))
    first = np.searchsorted(points, start[order])
    count = np.searchsorted(points, end[order]) - first
    pieces = np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count, count) + np.repeat(first, count)
    owner = np.full(max(len(points) - 1, 0), -1, np.int64)
    owner[pieces] = np.repeat(order, count)  # repeated pieces keep the last assigned: the innermost
    return points[:-1], points[1:], owner


def _labels(names: list[str], pieces) -> tuple[dict[str, _Coverage], dict[str, int]]:
    """Per label, the time its operators are innermost; and per operator name, that time."""
    starts, ends, owner = pieces
    held = owner >= 0
    self_ns = np.bincount(owner[held], weights=(ends - starts)[held], minlength=len(names))
    operators: dict[str, int] = {}
    for name, ns in zip(names, self_ns.tolist()):
        operators[name] = operators.get(name, 0) + int(ns)
    label_ids = {}
    op_label = np.array([label_ids.setdefault(label_of(n), len(label_ids)) for n in names], np.int64)
    piece_label = np.where(held, op_label[np.maximum(owner, 0)], -1)
    labels = {label: _Coverage(intervals.union(starts[piece_label == i], ends[piece_label == i]))
              for label, i in label_ids.items()}
    return labels, operators


def _comm_keys(table: pa.Table, rows: np.ndarray, rank: int) -> list[tuple]:
    """Each communication row's key, the same on every member (module docstring)."""
    types = to_numpy(table.column("type"))[rows]
    pg = table.column("pg_name").take(pa.array(rows)).to_pylist()
    src = to_numpy(table.column("comm_src"), -1)[rows]
    dst = to_numpy(table.column("comm_dst"), -1)[rows]
    tag = to_numpy(table.column("comm_tag"), 0)[rows]
    seen: dict[tuple, int] = {}
    keys = []
    for t, g, a, b, c in zip(types.tolist(), pg, src.tolist(), dst.tolist(), tag.tolist()):
        if t == COLL:
            group = ("collective", g or "")
        else:  # a send names its receiver, a receive its sender; the other end is this rank
            peer = b if t == SEND else a
            group = ("p2p", min(rank, peer), max(rank, peer), c, "send" if (t == SEND) == (rank < peer) else "back")
        seen[group] = seen.get(group, -1) + 1
        keys.append(group + (seen[group],))
    return keys


def rank_timeline(table: pa.Table, rank: int, times: tuple[np.ndarray, np.ndarray] | None = None) -> RankTimeline:
    """The rank's events; `times` (start, end) in ns replace the recorded ones (a simulation's)."""
    table = normalize_table(table, COLUMNS)
    start, end = times if times is not None else recorded_times(table)
    names_column = as_strings(table.column("name"))
    types = to_numpy(table.column("type"))
    timed = start >= 0
    cpu = to_numpy(table.column("is_cpu_op"), True).astype(bool)
    marks = step_marks(names_column)
    tids = to_numpy(table.column("tid"), -1) if table.column("tid").null_count < table.num_rows else None
    # the rank's lane: its host thread, and its device work where the trace has some (a JAX
    # device's ops, a GPU's kernels), each stretch labelled by the latest-started op running
    device = (types == COMP) & ~cpu & timed & (end > start)
    host = _main_thread(tids, (types == COMP) & cpu & timed & (end > start), marks) | device
    step, step_names = host_steps(table, host | ((types == COMP) & cpu & marks), names_column)
    ops = np.flatnonzero(host & ~marks & (step >= 0))
    comm_rows = np.flatnonzero(np.isin(types, (COLL, SEND, RECV)))
    timeline = RankTimeline(rank, steps=step_names)
    windows = _step_windows(step, start, end, host | marks, len(step_names))
    if not len(windows[0]):
        return timeline
    names = names_column.take(pa.array(ops)).to_pylist()
    busy = _Coverage(intervals.union(start[ops], end[ops]))
    labels, timeline.operators = _labels(names, _innermost(start[ops], end[ops]))
    comms = _communications(table, comm_rows, rank, start, end, ops, windows)
    timeline.comms, timeline.start = comms, int(windows[0][0])
    timeline.windows = list(zip(windows[0].tolist(), windows[1].tolist()))
    timeline.events = _events(windows, comms, busy, labels)
    return timeline


def _step_windows(step, start, end, rows, steps: int) -> tuple[np.ndarray, np.ndarray]:
    """Step k from its first row's start to step k+1's; the last to its last end."""
    firsts, lasts = np.full(steps, -1, np.int64), np.full(steps, -1, np.int64)
    for k in range(steps):
        inside = rows & (step == k)
        if inside.any():
            firsts[k], lasts[k] = start[inside].min(), end[inside].max()
    ok = firsts >= 0
    firsts, lasts = firsts[ok], lasts[ok]
    ends = np.maximum(np.r_[firsts[1:], lasts[-1:]], firsts) if len(firsts) else firsts
    return firsts, ends


def _communications(table, rows, rank, start, end, ops, windows) -> dict:
    """key -> Communication for the rank's communications inside its steps. One without a recorded
    start arrives when the last operator before it in the trace ended."""
    keys = _comm_keys(table, rows, rank)
    out = {}
    for key, row in zip(keys, rows.tolist()):
        arrival, completion = int(start[row]), int(end[row])
        if arrival < 0:
            before = ops[ops < row]
            if not len(before):
                continue
            arrival, completion = int(end[before[-1]]), -1
        if windows[0][0] <= arrival < windows[1][-1]:
            out[key] = Communication(arrival, completion)
    return out


def _waits(comms: dict, busy: _Coverage) -> list[tuple[int, int, tuple]]:
    """(idle from, resumed at, key): gaps between operators in which a communication completed,
    the host taken to wait for the last to complete in each."""
    gap_starts, gap_ends = busy.ends[:-1], busy.starts[1:]
    latest: dict[int, tuple[int, tuple]] = {}
    for key, c in comms.items():
        if c.completion < 0:
            continue
        k = int(np.searchsorted(gap_starts, c.completion, side="right")) - 1
        if k >= 0 and c.completion <= gap_ends[k]:
            if k not in latest or c.completion > latest[k][0]:
                latest[k] = (c.completion, key)
    # the host issues communications in a gap too (their nodes are not operators): it waits after them
    arrivals = np.sort(np.array([c.arrival for c in comms.values()], np.int64))
    out = []
    for k, (done, key) in sorted(latest.items()):
        j = int(np.searchsorted(arrivals, done, side="right")) - 1
        idle = max(int(gap_starts[k]), int(arrivals[j]) if j >= 0 else 0)
        out.append((idle, int(gap_ends[k]), key))
    return out


def _events(windows, comms: dict, busy: _Coverage, labels: dict[str, _Coverage]) -> list:
    """The event list (module docstring) from the marks in time order and the work between them."""
    marks = [(int(s), 0, ("step", k)) for k, s in enumerate(windows[0])]
    marks += [(int(e), -1, ("end", k)) for k, e in enumerate(windows[1])]  # before the next step's start
    marks += [(c.arrival, 1, ("issue", key)) for key, c in comms.items()]
    waits = _waits(comms, busy)
    marks += [(idle, 2, ("wait", key)) for idle, _, key in waits]
    resumed = {key: (comms[key].completion, back) for _, back, key in waits}
    marks.sort(key=lambda m: (m[0], m[1]))
    events, at = [], None
    for t, _, event in marks:
        if at is not None and t > at:
            events.append(("work", t - at, _parts(at, t, busy, labels)))
        events.append(event)
        at = t
        if event[0] == "wait":  # the blocked part is the communication's, not the rank's work
            at = max(t, min(resumed[event[1]][0], resumed[event[1]][1]))
    return events


def _parts(a: int, b: int, busy: _Coverage, labels: dict[str, _Coverage]) -> dict[str, int]:
    parts = {label: cov.within(a, b) for label, cov in labels.items()}
    parts = {label: ns for label, ns in parts.items() if ns}
    inside = busy.within(a, b)
    if b - a - inside > 0:  # no operator running (added to the host gaps a JAX profile names)
        parts["host"] = parts.get("host", 0) + b - a - inside
    return parts
