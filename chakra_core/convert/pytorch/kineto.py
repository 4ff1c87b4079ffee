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
are of the wrong kind is refused rather than skipped: it means the file is corrupt, and a
skipped event would silently take its kernels' durations with it. So is a Kineto trace of
another rank than its host trace.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import repeat

import numpy as np

from chakra_core._native import _kinetodigest, _threadspans
from chakra_core.convert.common.jsonstream import StreamedDocument, TraceJSONError, parse_json
from chakra_core.errors import ChakraFormatError

CPU_CATEGORIES = ("cpu_op", "user_annotation")
DEVICE_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
RUNTIME_CATEGORIES = ("cuda_runtime", "cuda_driver", "hip_runtime")
CATEGORIES = CPU_CATEGORIES + DEVICE_CATEGORIES + RUNTIME_CATEGORIES  # kinetodigest.c's category codes index this
ODD = 3  # kinetodigest.c's code of an event it leaves to add_event
MAX_MICROS = 2**62  # ts and dur become uint64 microseconds, and ts + dur must not overflow


@dataclass(slots=True)  # millions of them in a long trace: no __dict__ each
class CpuEvent:
    name: str
    tid: int
    ts: float
    dur: float
    external_id: int | None
    rf_id: int | None
    exclusive: float = 0.0
    idle_before: float = 0.0  # time its thread had no event open since the previous one ended (0: first or nested)
    args: dict | None = None  # kept only where read_kineto's keep_args asks (a Kineto-only conversion)


@dataclass(slots=True)  # millions of them in a long trace: no __dict__ each
class DeviceEvent:
    name: str
    category: str
    ts: float
    dur: float
    stream: int
    external_id: int | None
    correlation: int | None = None


@dataclass(slots=True)  # millions of them in a long trace: no __dict__ each
class RuntimeEvent:
    """A launch on the host (cudaLaunchKernel, cudaMemcpyAsync, ...)."""

    tid: int
    ts: float
    correlation: int
    external_id: int | None
    name: str = ""
    dur: float = 0.0


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
    after_children: list[tuple[CpuEvent, float, float]] = field(default_factory=list)

    @property
    def distributed_info(self) -> dict:
        info = self.fields.get("distributedInfo")
        return info if isinstance(info, dict) else {}


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
    doc = StreamedDocument(url, "traceEvents", progress=progress, decode=reader.digest_batch)
    reader.doc = doc
    reader.trace = trace = KinetoTrace(url, doc.fields)
    doc.digest_all()
    trace.after_children = _exclusive_times(trace.cpu)
    return trace


class _EventReader:
    """Reads each batch of events with the C digest (chakra_core/_native/kinetodigest.c), which
    hands back the few fields kept per event; the events it leaves to Python (odd types, escapes,
    errors to word) and batches that are not strictly valid JSON are read by add_event."""

    def __init__(self, url: str, keep_args: Callable[[str], bool] | None):
        self.url = url
        self.keep_args = keep_args
        self.doc: StreamedDocument | None = None
        self.trace: KinetoTrace | None = None
        self.names: dict[str, str] = {}  # one str per distinct event name, across batches

    def digest_batch(self, buf: bytearray, start: int, end: int, first_element: int) -> None:
        d = _kinetodigest.digest(buf, start, end, self.names)
        if d is None:  # not strictly valid JSON: parse_json accepts what JSON allows and refuses the rest
            batch = parse_json(memoryview(buf)[start:end], self.url, self.doc.stream_offset(start), first_element)
            for index, event in enumerate(batch, first_element):
                self.add_event(event, index)
            return
        trace = self.trace
        cpu, runtime, device = self._cpu_events(buf, d["cpu"]), self._runtime_events(d["runtime"]), \
            self._device_events(d["device"])
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

    def _cpu_events(self, buf: bytearray, columns: tuple) -> list[CpuEvent]:
        names, tids, ts, dur, external_ids, rf_ids, starts, ends = columns
        if not names:
            return []
        trace = self.trace
        trace.has_profiler_steps = trace.has_profiler_steps or any(n.startswith("ProfilerStep#") for n in set(names))
        trace.has_rf_ids = trace.has_rf_ids or rf_ids.count(None) < len(rf_ids)
        args = repeat(None)
        if self.keep_args is not None:
            view = memoryview(buf)
            args = [(parse_json(view[a:b]).get("args") or {}) if self.keep_args(n) else None
                    for n, a, b in zip(names, starts, ends)]
        return list(map(CpuEvent, names, tids, ts, dur, external_ids, rf_ids, repeat(0.0), repeat(0.0), args))

    @staticmethod
    def _runtime_events(columns: tuple) -> list[RuntimeEvent]:
        names, tids, ts, dur, correlations, external_ids = columns
        return list(map(RuntimeEvent, tids, ts, correlations, external_ids, names, dur))

    @staticmethod
    def _device_events(columns: tuple) -> list[DeviceEvent]:
        names, categories, ts, dur, streams, external_ids, correlations = columns
        return list(map(DeviceEvent, names, map(CATEGORIES.__getitem__, categories), ts, dur, streams, external_ids,
                        correlations))

    def add_event(self, event, index: int) -> None:
        """One event parsed whole: kept in its list, skipped, or refused (see the module docstring)."""
        if not isinstance(event, dict) or event.get("ph") != "X":
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


def _exclusive_times(events: list[CpuEvent]) -> list[tuple[CpuEvent, float, float]]:
    """Sets each event's exclusive time and idle_before (see _thread_columns and threadspans.c:
    every stretch of a thread's time is given to the innermost event open then, the latest
    started; for nested events, an event's duration minus its children's; where spans overlap
    without nesting (gloo's send/recv spans run on past the op that started them), still a
    partition of the thread's time, so no instant is counted twice; idle_before: the time its
    thread had no event open before it). Returns the stretches (event, start, end) that follow
    one of the event's children (where a thread may wait in no operator: hosttime.py,
    threadwait.py), so that they are walked once."""
    if not events:
        return []
    codes: dict = {}  # thread -> its number, in order of first appearance
    thread = np.fromiter((codes.setdefault(e.tid, len(codes)) for e in events), np.int64, len(events))
    ts = np.fromiter((e.ts for e in events), np.float64, len(events))
    dur = np.fromiter((e.dur for e in events), np.float64, len(events))
    order = np.lexsort((-dur, ts, thread))  # stable, as the sort by thread then (ts, -dur) it replaces
    exclusive, idle, seg_event, seg_a, seg_b = _threadspans.exclusive(order, thread, ts, dur)
    for e, x, gap in zip(events, np.frombuffer(exclusive).tolist(), np.frombuffer(idle).tolist()):
        e.exclusive, e.idle_before = x, gap
    return list(zip(map(events.__getitem__, np.frombuffer(seg_event, np.int64).tolist()),
                    np.frombuffer(seg_a).tolist(), np.frombuffer(seg_b).tolist()))


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


@dataclass
class Linked:
    """Per host node index: its Kineto CPU event, and the device events it launched."""

    cpu: dict[int, CpuEvent]
    device: dict[int, list[DeviceEvent]]
    report: LinkReport


ALIGN_LOOKAHEAD = 256
SEED_RUN = 8


def link(names: list[str], rf_ids, tids, ids, kineto: KinetoTrace) -> Linked:
    """Link host nodes (parallel lists: names, rf_ids, ET thread ids, node ids) to Kineto events."""
    report = LinkReport(matched_by="Record function id" if kineto.has_rf_ids else "External id and operator order",
                        profiler_steps=kineto.has_profiler_steps)
    if kineto.has_rf_ids:
        cpu = _link_by_rf_id(names, rf_ids, kineto, report)
    else:
        cpu = _link_by_order(names, rf_ids, tids, ids, kineto, report)
    report.host_nodes_with_rf_id = sum(1 for r in rf_ids if r)
    report.host_nodes_linked = len(cpu)
    index_of_event = {id(e): i for i, e in cpu.items()}
    launchers = _launchers(kineto)
    launches = Counter(r.correlation for r in kineto.runtime)
    device: dict[int, list[DeviceEvent]] = defaultdict(list)
    report.device_events = len(kineto.device)
    for d in sorted(kineto.device, key=lambda d: d.ts):
        if launches[d.correlation] > 1:  # which launch made it cannot be told
            report.device_events_colliding += 1
            continue
        launcher = launchers.get(d.correlation) if d.correlation is not None else None
        index = index_of_event.get(id(launcher)) if launcher is not None else None
        if index is not None:
            device[index].append(d)
            report.device_events_linked += 1
    return Linked(cpu, dict(device), report)


def _launchers(kineto: KinetoTrace) -> dict[int, CpuEvent]:
    """correlation -> the CPU operator whose code made the launch: the innermost operator open
    on the launching thread at the launch (newer traces also share an External id, older ones
    reuse the correlation number as External id, so containment is the one rule for both)."""
    return {r.correlation: e for r, e in zip(kineto.runtime, innermost_open(kineto.cpu, kineto.runtime))
            if e is not None}


def innermost_open(events: list[CpuEvent], calls: list[RuntimeEvent]) -> list[CpuEvent | None]:
    """For each call, the innermost of `events` open on its thread when it was made (None: none):
    events and calls of a thread in order of (ts, events before calls, longer events first, calls
    in list order), the events that ended before each item popped from the top of the stack of
    open ones (threadspans.c)."""
    items = [*events, *calls]
    if not calls:
        return []
    codes: dict = {}
    thread = np.fromiter((codes.setdefault(x.tid, len(codes)) for x in items), np.int64, len(items))
    ts = np.fromiter((x.ts for x in items), np.float64, len(items))
    dur = np.fromiter((x.dur for x in events), np.float64, len(events))
    is_call = np.r_[np.zeros(len(events), np.uint8), np.ones(len(calls), np.uint8)]
    third = np.r_[-dur, np.arange(len(calls), dtype=np.float64)]
    end = np.r_[ts[:len(events)] + dur, ts[len(events):]]
    order = np.lexsort((third, is_call, ts, thread))
    found = np.frombuffer(_threadspans.innermost(order, thread, ts, end, is_call), np.int64)[len(events):]
    return [events[k] if k >= 0 else None for k in found.tolist()]


def _link_by_rf_id(names, rf_ids, kineto: KinetoTrace, report: LinkReport) -> dict[int, CpuEvent]:
    by_rf = {e.rf_id: e for e in kineto.cpu if e.rf_id is not None}
    cpu = {}
    for index, (name, rf_id) in enumerate(zip(names, rf_ids)):
        event = by_rf.get(rf_id) if rf_id else None
        if event is None:
            continue
        if event.name != name:
            report.name_mismatches += 1
            continue
        cpu[index] = event
    return cpu


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
