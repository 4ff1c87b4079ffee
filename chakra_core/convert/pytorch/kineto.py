"""Read a Kineto trace (Chrome trace JSON from torch.profiler) and link it to a host trace.

Linking (docs/ingestion.md, 'Linking'):
- host node <-> Kineto CPU event (cat cpu_op / user_annotation): the ET `rf_id` equals the
  event's "Record function id" where the Kineto file carries it (torch >= 2.1); older files
  (the 1.0.1 era) carry only "External id", which then equals the ET rf_id; a pair whose names
  differ is not linked.
- device event (cat kernel / gpu_memcpy / gpu_memset) -> the CPU event that launched it: both
  carry the same "External id" (directly, or through the runtime launch event that shares the
  device event's "correlation").
- exclusive CPU time of an event = its duration minus the durations of the events directly
  nested in it on the same thread.
What cannot be linked is counted in LinkReport; conversion goes on without that detail.
An event whose time is not one (NaN, negative, beyond 2**62 µs) or whose name, tid or args
are of the wrong kind, or an element of traceEvents that is not an object, is refused rather
than skipped: it means the file is corrupt, and a
skipped event would silently take its kernels' durations with it. So is a Kineto trace of
another rank than its host trace.
"""

from __future__ import annotations

import math
from array import array
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from itertools import repeat

import numpy as np

from chakra_core._native import _kinetodigest, _threadspans
from chakra_core._native._kinetodigest import CpuEvent, DeviceEvent, RuntimeEvent
from chakra_core._native._kinetodigest import column as _event_column, set_column as _set_event_column
from chakra_core.convert.common.jsonstream import StreamedDocument, TraceJSONError, parse_json
from chakra_core.errors import ChakraFormatError

CPU_CATEGORIES = ("cpu_op", "user_annotation")
DEVICE_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
RUNTIME_CATEGORIES = ("cuda_runtime", "cuda_driver", "hip_runtime")
CATEGORIES = CPU_CATEGORIES + DEVICE_CATEGORIES + RUNTIME_CATEGORIES  # kinetodigest.c's category codes index this
ODD = 3  # kinetodigest.c's code of an event it leaves to add_event
MAX_MICROS = 2**62  # ts and dur become uint64 microseconds, and ts + dur must not overflow


# The events kept, millions in a long trace: C objects holding their fields as C values
# (kinetoevents.c), constructed, read and set as dataclasses with these fields:
# CpuEvent(name, tid, ts, dur, external_id, rf_id, exclusive=0.0, idle_before=0.0, args=None):
#   idle_before: the time its thread had no event open since the previous one ended (0: first
#   or nested); args: kept only where read_kineto's keep_args asks (a Kineto-only conversion).
# DeviceEvent(name, category, ts, dur, stream, external_id, correlation=None)
# RuntimeEvent(tid, ts, correlation, external_id, name="", dur=0.0): a launch on the host.


ID_FIELDS = ("external_id", "rf_id", "correlation", "stream")
OBJECT_FIELDS = ("name", "tid", "category")


def column(events: list, key: str, codes: dict | None = None) -> np.ndarray:
    """One field of every event as a numpy array (kinetoevents.c): float64 for times; for ids,
    int64 values and a bool array of which are there (an id beyond int64, which only a batch
    parsed by Python can hold, counts as absent: it links to nothing); for name, tid or
    category, int64 codes of the values by first appearance in `codes`."""
    data = _event_column(events, key, codes)
    if key in ID_FIELDS:
        n = len(events)
        return np.frombuffer(data, np.int64, n), np.frombuffer(data, np.bool_, n, 8 * n)
    return np.frombuffer(data, np.int64 if key in OBJECT_FIELDS else np.float64)


def streams(events: list[DeviceEvent]) -> np.ndarray:
    """Each device event's stream as an int64 column, -1 where it has none (streams are not
    negative), so that the events without one group together as they would by value."""
    stream, known = column(events, "stream")
    return np.where(known, stream, -1)


class Stretches:
    """Stretches of events' time, (event, start, end) as columns: `event` indexes `events`.
    Iterates as those tuples, made a slice at a time (half a million in a long trace: as tuples
    of floats they took ~110 bytes each, as columns 24)."""

    __slots__ = ("events", "event", "start", "end")
    SLICE = 65536

    def __init__(self, events: list[CpuEvent], event: np.ndarray, start: np.ndarray, end: np.ndarray):
        self.events, self.event, self.start, self.end = events, event, start, end

    @classmethod
    def none(cls, events: list[CpuEvent]) -> Stretches:
        return cls(events, np.zeros(0, np.int64), np.zeros(0), np.zeros(0))

    def __len__(self) -> int:
        return len(self.event)

    def __getitem__(self, k: int) -> tuple[CpuEvent, float, float]:
        return self.events[self.event[k]], float(self.start[k]), float(self.end[k])

    def __iter__(self):
        for k in range(0, len(self.event), self.SLICE):
            part = slice(k, k + self.SLICE)
            yield from zip(map(self.events.__getitem__, self.event[part].tolist()), self.start[part].tolist(),
                           self.end[part].tolist())


@dataclass
class KinetoTrace:
    path: str
    fields: dict
    cpu: list[CpuEvent] = field(default_factory=list)
    device: list[DeviceEvent] = field(default_factory=list)
    runtime: list[RuntimeEvent] = field(default_factory=list)
    has_rf_ids: bool = False
    has_profiler_steps: bool = False
    # (event, start, end): stretches of an event's exclusive time after one of its children
    after_children: Stretches = field(default_factory=lambda: Stretches.none([]))

    @property
    def distributed_info(self) -> dict:
        info = self.fields.get("distributedInfo")
        return info if isinstance(info, dict) else {}


def _json_kind(value) -> str:
    return {list: "array", str: "string", bool: "boolean", type(None): "null"}.get(type(value), "number")


def _int_or_none(value) -> int | None:
    return value if type(value) is int else None


def _fields(event: dict, index: int, path: str) -> tuple[str, int | str, float, float, dict]:
    """An event's name, thread, ts and dur (µs) and args, refused unless each is of its kind and
    both times are times the output can hold."""
    name, tid, args = event.get("name", ""), event.get("tid", 0), event.get("args") or {}
    try:
        ts, dur = float(event.get("ts", 0)), float(event.get("dur", 0))
    except (TypeError, ValueError, OverflowError):
        ts = dur = math.nan
    if not (0 <= ts < MAX_MICROS and 0 <= dur < MAX_MICROS):  # true for NaN
        problem = "ts and dur must be microseconds from 0 to 2**62"
    elif type(name) is not str or type(tid) not in (int, str) or type(args) is not dict:
        problem = "name must be a string, tid an integer or a string, args an object"
    else:
        return name, tid, ts, dur, args
    raise TraceJSONError(path, f"event {name!r} (ts {event.get('ts')!r}, dur {event.get('dur')!r}): {problem}",
                         element=index)


def read_kineto(url: str, progress: Callable[[int], None] | None = None,
                keep_args: Callable[[str], bool] | None = None) -> KinetoTrace:
    """The trace's events; the args of CPU events whose name keep_args accepts are kept (the
    Kineto-only source reads communication sizes and shapes from them)."""
    reader = _EventReader(url, keep_args)
    doc = StreamedDocument(url, "traceEvents", progress=progress, decode=reader.digest_batch, walk=reader.walk)
    reader.doc = doc
    reader.trace = trace = KinetoTrace(url, doc.fields)
    doc.digest_all()
    trace.after_children = _exclusive_times(trace.cpu)
    return trace


class _EventReader:
    """Reads each batch of events with the C digest (chakra_core/_native/kinetodigest.c), which
    hands back the kept events already made (kinetoevents.c); the events it leaves to Python (odd types, escapes,
    errors to word) and batches that are not strictly valid JSON are read by add_event."""

    def __init__(self, url: str, keep_args: Callable[[str], bool] | None):
        self.url = url
        self.keep_args = keep_args
        self.doc: StreamedDocument | None = None
        self.trace: KinetoTrace | None = None
        self.names: dict[str, str] = {}  # one str per distinct event name, across batches

    def walk(self, buf: bytearray, pos: int, end: int, max_items: int, max_depth: int,
             first_element: int) -> tuple[int, int, bool]:
        """Digest the events from pos on as the C walk finds them (StreamedDocument's `walk`)."""
        items, _, next_pos, closed, d = _kinetodigest.digest_elements(buf, pos, end, self.names, max_items,
                                                                      max_depth)
        if items:
            self._take(buf, d, first_element)
        return items, next_pos, closed

    def digest_batch(self, buf: bytearray, start: int, end: int, first_element: int) -> None:
        d = _kinetodigest.digest(buf, start, end, self.names)
        if d is None:  # not strictly valid JSON: parse_json accepts what JSON allows and refuses the rest
            batch = parse_json(memoryview(buf)[start:end], self.url, self.doc.stream_offset(start), first_element)
            for index, event in enumerate(batch, first_element):
                self.add_event(event, index)
            return
        self._take(buf, d, first_element)

    def _take(self, buf: bytearray, d: dict, first_element: int) -> None:
        """Append one digest's events (_kinetodigest's dict; its offsets index buf) to the trace."""
        trace = self.trace
        cpu, runtime, device = d["cpu"], d["runtime"], d["device"]
        trace.has_profiler_steps = trace.has_profiler_steps or d["steps"]
        trace.has_rf_ids = trace.has_rf_ids or d["rf_ids"] > 0
        if self.keep_args is not None:
            self._keep_args(buf, cpu, d["cpu_spans"])
        if not d["odd"]:
            trace.cpu.extend(cpu)
            trace.runtime.extend(runtime)
            trace.device.extend(device)
            return
        made, odd = (iter(cpu), iter(runtime), iter(device)), iter(d["odd"])
        targets = (trace.cpu, trace.runtime, trace.device)
        for kind in d["order"]:  # file order: the digested events with the odd ones between them
            if kind == ODD:
                index, a, b = next(odd)
                self.add_event(parse_json(memoryview(buf)[a:b], self.url, self.doc.stream_offset(a),
                                          first_element + index), first_element + index)
            else:
                targets[kind].append(next(made[kind]))

    def _keep_args(self, buf: bytearray, cpu: list, spans: bytes) -> None:
        """The args of the CPU events whose name keep_args accepts, parsed from their bytes."""
        view, bounds = memoryview(buf), np.frombuffer(spans, np.int64).reshape(-1, 2).tolist()
        for e, (a, b) in zip(cpu, bounds):
            if self.keep_args(e.name):
                e.args = parse_json(view[a:b]).get("args") or {}

    def add_event(self, event, index: int) -> None:
        """One event parsed whole: kept in its list, skipped, or refused (see the module docstring)."""
        if not isinstance(event, dict):  # (a list, a number, a string: not a trace event; the file is corrupt)
            raise ChakraFormatError(self.url, f"traceEvents[{index}] is a JSON {_json_kind(event)}, not a trace "
                                    "event (an object)")
        if event.get("ph") != "X":
            return
        category = event.get("cat")
        if category not in CATEGORIES:
            return
        trace, url = self.trace, self.url
        name, tid, ts, dur, args = _fields(event, index, url)
        if category in CPU_CATEGORIES:
            if name.startswith("ProfilerStep#"):
                trace.has_profiler_steps = True
            rf_id = _int_or_none(args.get("Record function id"))
            trace.has_rf_ids = trace.has_rf_ids or rf_id is not None
            trace.cpu.append(CpuEvent(name, tid, ts, dur, _int_or_none(args.get("External id")), rf_id,
                                      args=args if self.keep_args is not None and self.keep_args(name) else None))
        elif category in RUNTIME_CATEGORIES:
            correlation = _int_or_none(args.get("correlation"))
            if correlation is not None:
                trace.runtime.append(RuntimeEvent(tid, ts, correlation, _int_or_none(args.get("External id")),
                                                  name, dur))
        else:
            stream = args.get("stream", tid if type(tid) is int else 0)
            if type(stream) is not int or not 0 <= stream < 2**31:  # was silently stream 0
                raise TraceJSONError(url, f"event {name!r} (ts {event.get('ts')!r}): stream {stream!r}: "
                                     "expected a whole number from 0 to 2**31", element=index)
            trace.device.append(DeviceEvent(name, category, ts, dur, stream, _int_or_none(args.get("External id")),
                                            _int_or_none(args.get("correlation"))))


def rank_of(host_url: str, kineto: KinetoTrace | None, rank: int | None) -> int:
    """The rank to convert a host trace as: `rank` (from --rank or the file name) when given,
    else the Kineto trace's distributedInfo rank, else 0. A Kineto trace whose distributedInfo
    names another rank than `rank` is another rank's trace: linking it would give this rank
    another's durations, so it is refused."""
    recorded = kineto.distributed_info.get("rank") if kineto is not None else None
    recorded = recorded if type(recorded) is int else None
    if rank is None:
        return recorded if recorded is not None else 0
    if recorded is not None and recorded != rank:
        raise ChakraFormatError(kineto.path, f"a Kineto trace of rank {recorded} (its distributedInfo), given with"
                                             f" {host_url} of rank {rank}: they are traces of different ranks")
    return rank


def _exclusive_times(events: list[CpuEvent]) -> Stretches:
    """Sets each event's exclusive time and idle_before (see _thread_columns and threadspans.c:
    every stretch of a thread's time is given to the innermost event open then, the latest
    started; for nested events, an event's duration minus its children's; where spans overlap
    without nesting (gloo's send/recv spans run on past the op that started them), still a
    partition of the thread's time, so no instant is counted twice; idle_before: the time its
    thread had no event open before it). Returns the stretches (event, start, end) that follow
    one of the event's children (where a thread may wait in no operator: hosttime.py,
    threadwait.py), so that they are walked once."""
    if not events:
        return Stretches.none(events)
    thread, ts, dur = column(events, "tid"), column(events, "ts"), column(events, "dur")
    order = np.lexsort((-dur, ts, thread))  # stable, as the sort by thread then (ts, -dur) it replaces
    exclusive, idle, seg_event, seg_a, seg_b = _threadspans.exclusive(order, thread, ts, dur)
    _set_event_column(events, "exclusive", exclusive)
    _set_event_column(events, "idle_before", idle)
    return Stretches(events, np.frombuffer(seg_event, np.int64), np.frombuffer(seg_a), np.frombuffer(seg_b))


@dataclass
class LinkReport:
    matched_by: str = ""  # "Record function id" or "External id"
    host_nodes_with_rf_id: int = 0
    host_nodes_linked: int = 0
    name_mismatches: int = 0
    device_events: int = 0
    device_events_linked: int = 0
    device_events_colliding: int = 0  # their correlation id names more than one launch: not attached
    profiler_steps: bool = False

    def lines(self) -> list[str]:
        out = [f"linked {self.host_nodes_linked:,} of {self.host_nodes_with_rf_id:,} host nodes to Kineto CPU events"
               f" by {self.matched_by}"]
        if self.name_mismatches:
            out.append(f"{self.name_mismatches:,} id matches had different names and were not linked")
        if self.device_events_colliding:
            out.append(f"{self.device_events_colliding:,} device events have a correlation id that more than one "
                       "launch of the Kineto trace uses (colliding ids): not attached to any host node")
        if self.device_events:
            rest = " (the rest were launched outside the host trace's steps)" if (
                self.device_events_linked + self.device_events_colliding < self.device_events) else ""
            out.append(f"attached {self.device_events_linked:,} of {self.device_events:,} device events to host"
                       f" nodes{rest}")
        if not self.profiler_steps:
            out.append("the Kineto trace has no ProfilerStep annotations: linked by ids alone")
        return out


class LinkedCpu(Mapping):
    """Host node index -> its Kineto CPU event, over columns: the host nodes linked (in the
    order linking found them) and where each one's event is in the trace's CPU events. As a
    dict of 640 k entries it took 39 MiB; here 8 bytes a host node."""

    def __init__(self, n_host: int, hosts: np.ndarray, positions: np.ndarray, events: list[CpuEvent]):
        at = np.full(n_host, -1, np.int64)
        at[hosts] = positions
        self._at, self._hosts, self._events = array("q", at.tobytes()), hosts, events

    def __getitem__(self, index: int) -> CpuEvent:
        event = self.get(index)
        if event is None:
            raise KeyError(index)
        return event

    def get(self, index: int, default=None):
        at = self._at[index] if 0 <= index < len(self._at) else -1
        return self._events[at] if at >= 0 else default

    def __contains__(self, index) -> bool:
        return 0 <= index < len(self._at) and self._at[index] >= 0

    def __iter__(self) -> Iterator[int]:
        return iter(self._hosts.tolist())

    def __len__(self) -> int:
        return len(self._hosts)


@dataclass
class Linked:
    """Per host node index: its Kineto CPU event, and the device events it launched."""

    cpu: Mapping[int, CpuEvent]  # LinkedCpu
    device: dict[int, list[DeviceEvent]]
    report: LinkReport
    positions: np.ndarray  # where each of cpu's events is in the Kineto trace's CPU events, in cpu's order


ALIGN_LOOKAHEAD = 256
SEED_RUN = 8


def link(names: list[str], rf_ids, tids, ids, kineto: KinetoTrace) -> Linked:
    """Link host nodes (parallel lists: names, rf_ids, ET thread ids, node ids) to Kineto events."""
    report = LinkReport(matched_by="Record function id" if kineto.has_rf_ids else "External id and operator order",
                        profiler_steps=kineto.has_profiler_steps)
    host_rf = _int64_column(rf_ids)
    if kineto.has_rf_ids:
        hosts, events = _link_by_rf_id(names, host_rf, kineto.cpu, report)
    else:
        by_order = _link_by_order(names, rf_ids, tids, ids, kineto, report)
        position = {id(e): k for k, e in enumerate(kineto.cpu)}
        hosts = np.fromiter(by_order, np.int64, len(by_order))
        events = np.fromiter((position[id(e)] for e in by_order.values()), np.int64, len(by_order))
    cpu = LinkedCpu(len(names), hosts, events, kineto.cpu)
    report.host_nodes_with_rf_id = int(np.count_nonzero(host_rf))
    report.host_nodes_linked = len(cpu)
    host_of = np.full(len(kineto.cpu), -1, np.int64)  # Kineto CPU event -> the host node linked to it
    np.maximum.at(host_of, events, hosts)  # one event of two host nodes (a repeated rf_id): the later node's
    return Linked(cpu, _link_device(kineto, host_of, report), report, events)


def _int64_column(values) -> np.ndarray:
    """Host ids as int64 (0 where absent): an array('q') as it is, a list (tests) read."""
    if getattr(values, "typecode", None) == "q":
        return np.frombuffer(values, np.int64) if len(values) else np.zeros(0, np.int64)
    return np.fromiter((v or 0 for v in values), np.int64, len(values))


def _link_device(kineto: KinetoTrace, host_of: np.ndarray, report: LinkReport) -> dict[int, list[DeviceEvent]]:
    """Host node -> the device events it launched, in start order: each device event to the CPU
    operator whose code made its launch (the runtime event of its correlation), the innermost
    operator open on the launching thread at the launch (newer traces also share an External id,
    older ones reuse the correlation number as External id, so containment is the one rule for
    both); not where more than one launch has its correlation (which made it cannot be told)."""
    device, runtime = kineto.device, kineto.runtime
    report.device_events = len(device)
    if not device:
        return {}
    launcher = innermost_index(kineto.cpu, runtime)  # runtime event -> CPU event (-1: none)
    rc, rc_known = column(runtime, "correlation") if runtime else (np.zeros(0, np.int64), np.zeros(0, bool))
    runtime_at = np.flatnonzero(rc_known)
    by_correlation = runtime_at[np.argsort(rc[runtime_at], kind="stable")]
    sorted_rc = rc[by_correlation]
    dc, dc_known = column(device, "correlation")
    first = np.searchsorted(sorted_rc, dc)
    launches = np.searchsorted(sorted_rc, dc, side="right") - first  # runtime events of each one's correlation
    launches[~dc_known] = 0
    colliding = launches > 1
    report.device_events_colliding = int(np.count_nonzero(colliding))
    launch = by_correlation[np.minimum(first, len(sorted_rc) - 1)] if len(sorted_rc) else np.zeros(len(dc), np.int64)
    event = np.where(launches == 1, launcher[launch] if len(launcher) else -1, -1)
    host = np.where(event >= 0, host_of[event], -1)
    out: dict[int, list[DeviceEvent]] = {}
    order = np.argsort(column(device, "ts"), kind="stable")
    order = order[host[order] >= 0]
    for k, h in zip(order.tolist(), host[order].tolist()):
        out.setdefault(h, []).append(device[k])
    report.device_events_linked = len(order)
    return out


def innermost_open(events: list[CpuEvent], calls: list[RuntimeEvent]) -> list[CpuEvent | None]:
    """For each call, the innermost of `events` open on its thread when it was made (None: none):
    events and calls of a thread in order of (ts, events before calls, longer events first, calls
    in list order), the events that ended before each item popped from the top of the stack of
    open ones (threadspans.c)."""
    found = innermost_index(events, calls)
    return [events[k] if k >= 0 else None for k in found.tolist()]


def innermost_index(events: list[CpuEvent], calls: list[RuntimeEvent]) -> np.ndarray:
    """innermost_open as indices into events (-1: none)."""
    if not calls:
        return np.zeros(0, np.int64)
    codes: dict = {}  # threads numbered alike for events and calls
    thread = np.r_[column(events, "tid", codes), column(calls, "tid", codes)]
    ts = np.r_[column(events, "ts"), column(calls, "ts")]
    dur = column(events, "dur")
    is_call = np.r_[np.zeros(len(events), np.uint8), np.ones(len(calls), np.uint8)]
    third = np.r_[-dur, np.arange(len(calls), dtype=np.float64)]
    end = np.r_[ts[:len(events)] + dur, ts[len(events):]]
    order = np.lexsort((third, is_call, ts, thread))
    return np.frombuffer(_threadspans.innermost(order, thread, ts, end, is_call), np.int64)[len(events):]


def _link_by_rf_id(names, host_rf: np.ndarray, events: list[CpuEvent],
                   report: LinkReport) -> tuple[np.ndarray, np.ndarray]:
    """(host nodes, their events), in host order: each host node with an rf_id to the Kineto CPU
    event of that Record function id (the last in the file where several carry it), unless
    their names differ."""
    rf, known = column(events, "rf_id")
    carriers = np.flatnonzero(known)
    by_rf = carriers[np.argsort(rf[carriers], kind="stable")]
    sorted_rf = rf[by_rf]
    last = np.searchsorted(sorted_rf, host_rf, side="right") - 1
    hit = (host_rf != 0) & (last >= 0)
    hit &= sorted_rf[np.maximum(last, 0)] == host_rf if len(sorted_rf) else False
    hosts = np.flatnonzero(hit)
    found = by_rf[last[hosts]]
    codes: dict = {}
    event_name = column(events, "name", codes)[found]
    host_name = np.fromiter(map(codes.get, map(names.__getitem__, hosts.tolist()), repeat(-1)), np.int64, len(hosts))
    same = event_name == host_name
    report.name_mismatches += int(np.count_nonzero(~same))
    return hosts[same], found[same]


def _link_by_order(names, rf_ids, tids, ids, kineto: KinetoTrace, report: LinkReport) -> dict[int, CpuEvent]:
    """Older traces: the ET rf_id equals the Kineto External id only until the two recorders'
    counters drift apart, and the Kineto trace may span many more iterations than the ET.
    Each ET thread is aligned in order with the Kineto thread and start that match the most
    operators by name (Kineto may have extra events in between); the start is where the ids
    still agree, or else the start of the recorded steps."""
    by_external = {e.external_id: e for e in kineto.cpu if e.external_id is not None}
    kineto_threads: dict[int, list[CpuEvent]] = defaultdict(list)
    for e in sorted(kineto.cpu, key=lambda e: (e.ts, -e.dur)):
        kineto_threads[e.tid].append(e)
    position = {tid: {id(e): k for k, e in enumerate(events)} for tid, events in kineto_threads.items()}
    et_threads: dict[int, list[int]] = defaultdict(list)
    for index in sorted(range(len(names)), key=lambda i: ids[i]):
        if rf_ids[index]:
            et_threads[tids[index]].append(index)
    def id_match(i: int) -> CpuEvent | None:
        event = by_external.get(rf_ids[i])
        return event if event is not None and event.name == names[i] else None

    cpu: dict[int, CpuEvent] = {}
    seeds = {}
    for et_tid, indices in et_threads.items():
        seed = _seed(indices, id_match)
        if seed is not None:
            seeds[et_tid] = seed
    earliest = min((event.ts for _, event in seeds.values()), default=None)
    for et_tid, indices in et_threads.items():
        # candidates: from the seed where ids agree, and from the start of the steps on every thread
        candidates = []
        if et_tid in seeds:
            k0, event = seeds[et_tid]
            candidates.append(_align(names, indices[k0:], kineto_threads[event.tid], position[event.tid][id(event)]))
        for events in kineto_threads.values():
            start = next((k for k, e in enumerate(events) if earliest is None or e.ts >= earliest), len(events))
            candidates.append(_align(names, indices, events, start))
        cpu.update(max(candidates, key=len, default={}))
    return cpu


def _seed(indices: list[int], id_match) -> tuple[int, CpuEvent] | None:
    """Where ids still agree: the longest run of consecutive operators whose ids match events of
    the same names on one Kineto thread (short runs are coincidences of repeated op names)."""
    best_start, best_length, k = None, 0, 0
    while k < len(indices):
        first = id_match(indices[k])
        length = 0
        while first is not None and k + length < len(indices):
            event = id_match(indices[k + length])
            if event is None or event.tid != first.tid:
                break
            length += 1
        if length > best_length:
            best_start, best_length = k, length
        k += max(length, 1)
    if best_start is None or best_length < min(SEED_RUN, len(indices)):
        return None
    return best_start, id_match(indices[best_start])


def _align(names, indices, events: list[CpuEvent], pointer: int) -> dict[int, CpuEvent]:
    matched = {}
    for i in indices:
        for p in range(pointer, min(len(events), pointer + ALIGN_LOOKAHEAD)):
            if events[p].name == names[i]:
                matched[i] = events[p]
                pointer = p + 1
                break
    return matched
