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

import functools
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from chakra_core.analysis import intervals
from chakra_core.analysis.device_work import recorded_times, step_marks, steps_by_start
from chakra_core.analysis.stats import op_class
from chakra_core.format.depgraph import to_numpy
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


@functools.lru_cache(maxsize=65536)  # the ranks of a job share their operators' names
def label_of(name: str) -> str:
    if name.startswith(CALL_OWN_TIME_PREFIXES):
        return "communication"
    if name.startswith(INPUT_PREFIXES):
        return "input"
    if name.startswith(HOST_GAP_PREFIXES):  # a JAX profile's host time around the device's work
        return "host"
    return "compute:" + op_class(name)


def _main_thread(tids: np.ndarray, host: np.ndarray, marks: np.ndarray) -> np.ndarray:
    """Rows on the thread that runs the steps (the steps' own, else the busiest host thread)."""
    if tids is None or not host.any():
        return host
    on = tids[host & marks] if (host & marks).any() else tids[host]
    values, counts = np.unique(on, return_counts=True)
    return host & (tids == values[np.argmax(counts)])


def _innermost(start: np.ndarray, end: np.ndarray, cuts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Nested intervals of one thread cut at every boundary and at `cuts` (sorted): (piece starts,
    piece ends, the innermost interval open in each piece, -1 for none). The innermost is the
    latest started (ties: the shortest): painted in start order, an inner interval overwrites its
    parent."""
    # stable sorts: a trace is mostly in start order already, which timsort takes in one pass
    order = np.argsort(start, kind="stable")
    s, length = start[order], (end - start)[order]
    if ((s[1:] == s[:-1]) & (length[1:] > length[:-1])).any():  # a tie whose longer (outer) op is not first
        order = np.lexsort((-(end - start), start))
    points = np.sort(np.concatenate([start[order], np.sort(end, kind="stable"), cuts]), kind="stable")
    points = points[np.r_[True, points[1:] != points[:-1]]] if len(points) else points
    first = np.searchsorted(points, start[order])
    count = np.searchsorted(points, end[order]) - first
    pieces = np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count, count) + np.repeat(first, count)
    owner = np.full(max(len(points) - 1, 0), -1, np.int64)
    owner[pieces] = np.repeat(order, count)  # repeated pieces keep the last assigned: the innermost
    return points[:-1], points[1:], owner


def _labels(names: pa.Array, pieces) -> tuple[np.ndarray, list[str], dict[str, int]]:
    """Each piece's label (an index into the label names; -1: no operator), the label names, and
    per operator name the time it was innermost. Each distinct name is classified once."""
    starts, ends, owner = pieces
    encoded = names if pa.types.is_dictionary(names.type) else pc.dictionary_encode(names)
    distinct = encoded.dictionary.to_pylist()
    name_of = to_numpy(encoded.indices).astype(np.int64)
    held = owner >= 0
    self_ns = np.bincount(name_of[owner[held]], weights=(ends - starts)[held], minlength=len(distinct))
    operators = {name: int(ns) for name, ns in zip(distinct, self_ns.tolist()) if ns}
    label_ids: dict[str, int] = {}
    label_of_name = np.array([label_ids.setdefault(label_of(n), len(label_ids)) for n in distinct], np.int64)
    op_label = label_of_name[name_of] if len(name_of) else name_of
    piece_label = np.where(held, op_label[np.maximum(owner, 0)], -1) if len(op_label) else owner
    return piece_label, list(label_ids), operators


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
    names_column = table.column("name")  # dictionary-encoded as a big trace is read: kept so
    types = to_numpy(table.column("type"))
    timed = start >= 0
    cpu = to_numpy(table.column("is_cpu_op"), True).astype(bool)
    marks = step_marks(names_column)
    tids = to_numpy(table.column("tid"), -1) if table.column("tid").null_count < table.num_rows else None
    # the rank's lane: its host thread, and its device work where the trace has some (a JAX
    # device's ops, a GPU's kernels), each stretch labelled by the latest-started op running
    device = (types == COMP) & ~cpu & timed & (end > start)
    host = _main_thread(tids, (types == COMP) & cpu & timed & (end > start), marks) | device
    step, step_names = steps_by_start(start, np.flatnonzero((types == COMP) & cpu & marks & timed), names_column)
    ops = np.flatnonzero(host & ~marks & (step >= 0))
    comm_rows = np.flatnonzero(np.isin(types, (COLL, SEND, RECV)))
    timeline = RankTimeline(rank, steps=step_names)
    windows = _step_windows(step, start, end, host | marks, len(step_names))
    if not len(windows[0]):
        return timeline
    names = names_column.combine_chunks().take(pa.array(ops)) if isinstance(names_column, pa.ChunkedArray) \
        else names_column.take(pa.array(ops))
    busy = intervals.union(start[ops], end[ops])
    comms = _communications(table, comm_rows, rank, start, end, ops, windows)
    timeline.comms, timeline.start = comms, int(windows[0][0])
    timeline.windows = list(zip(windows[0].tolist(), windows[1].tolist()))
    events, places, a, b = _events(windows, comms, busy)
    pieces = _innermost(start[ops], end[ops], np.sort(np.r_[a, b]))
    piece_label, label_names, timeline.operators = _labels(names, pieces)
    for place, parts in zip(places.tolist(), _parts(a, b, pieces[0], pieces[1], piece_label, label_names)):
        events[place] = ("work", sum(parts.values()), parts)
    timeline.events = events
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


def _waits(comms: dict, busy: intervals.Intervals) -> list[tuple[int, int, tuple]]:
    """(idle from, resumed at, key): gaps between operators in which a communication completed,
    the host taken to wait for the last to complete in each (a tie: the last issued)."""
    if not comms:
        return []
    keys = list(comms)
    arrival = np.array([comms[k].arrival for k in keys], np.int64)
    done = np.array([comms[k].completion for k in keys], np.int64)
    gap_starts, gap_ends = busy[1][:-1], busy[0][1:]
    gap = np.searchsorted(gap_starts, done, side="right") - 1
    inside = (done >= 0) & (gap >= 0)
    inside[inside] = done[inside] <= gap_ends[gap[inside]]
    chosen = np.flatnonzero(inside)
    chosen = chosen[np.lexsort((arrival[chosen], done[chosen], gap[chosen]))]
    last = chosen[np.r_[gap[chosen][1:] != gap[chosen][:-1], True]] if len(chosen) else chosen
    # the host issues communications in a gap too (their nodes are not operators): it waits after them
    arrivals = np.sort(arrival)
    issued = np.searchsorted(arrivals, done[last], side="right") - 1
    idle = np.maximum(gap_starts[gap[last]], np.where(issued >= 0, arrivals[np.maximum(issued, 0)], 0))
    return [(int(i), int(gap_ends[g]), keys[c]) for i, g, c in zip(idle, gap[last], last)]


def _events(windows, comms: dict, busy: intervals.Intervals) -> tuple[list, np.ndarray, np.ndarray, np.ndarray]:
    """The event list (module docstring) from the marks in time order, the work between them left
    as None at `places`, each the work of the window [a, b)."""
    marks = [(int(s), 0, ("step", k)) for k, s in enumerate(windows[0])]
    marks += [(int(e), -1, ("end", k)) for k, e in enumerate(windows[1])]  # before the next step's start
    marks += [(c.arrival, 1, ("issue", key)) for key, c in comms.items()]
    waits = _waits(comms, busy)
    marks += [(idle, 2, ("wait", key)) for idle, _, key in waits]
    resumed = {key: (comms[key].completion, back) for _, back, key in waits}
    marks.sort(key=lambda m: (m[0], m[1]))
    events, at, windows_of_work = [], None, []
    for t, _, event in marks:
        if at is not None and t > at:
            windows_of_work.append((len(events), at, t))
            events.append(None)  # the work's place, filled with all parts computed at once
        events.append(event)
        at = t
        if event[0] == "wait":  # the blocked part is the communication's, not the rank's work
            at = max(t, min(resumed[event[1]][0], resumed[event[1]][1]))
    if not windows_of_work:
        return events, *(np.zeros(0, np.int64),) * 3
    places, a, b = (np.array(column, np.int64) for column in zip(*windows_of_work))
    return events, places, a, b


def _parts(a, b, starts, ends, label, names: list[str]) -> list[dict[str, int]]:
    """For each window [a, b) (disjoint, in order; the pieces are cut at their bounds), its time
    by label: one weighted count over the pieces. Time no operator covers is `host` (added to the
    host gaps a JAX profile names)."""
    window = np.searchsorted(a, starts, side="right") - 1
    inside = (window >= 0) & (label >= 0)
    inside[inside] = starts[inside] < b[window[inside]]
    width = len(names)
    sums = np.bincount(window[inside] * width + label[inside], weights=(ends - starts)[inside],
                       minlength=len(a) * width).reshape(len(a), width).astype(np.int64)
    idle = (b - a) - sums.sum(axis=1)
    rows = []
    for ns, free in zip(sums.tolist(), idle.tolist()):
        parts = {name: v for name, v in zip(names, ns) if v > 0}
        if free > 0:
            parts["host"] = parts.get("host", 0) + free
        rows.append(parts)
    return rows
