"""Timelines as Chrome Trace Event Format JSON (loads in Perfetto and chrome://tracing).

Three sources, one output shape:
- a simulation result (`timeline_from_simulation`): one process per NPU, a thread per engine
  track (cpu, compute, comm, memory);
- real traces as recorded, a job's converted rank files (`recorded_timeline`, by prefix) or
  .et files (`timeline_from_traces`): one process per rank, each node at the start time and
  duration its trace holds (duration_ns where kept), CPU operators by their `tid`, device
  kernels by `stream`, communication nodes on "communication" named with their kind and bytes;
  a "launch" flow from each kernel's launching operator to it (drawn before other flows);
- the reference timeline visualizer's issue/callback CSV log (`timeline_from_log`).

Output: {"traceEvents": [...], "displayTimeUnit": "ns", "otherData": {...}} with metadata
events ("ph": "M") naming every process and thread, complete events ("ph": "X") with ts and dur
in microseconds, and a capped number of flow events ("ph": "s"/"f") for dependencies that cross
tracks of one NPU. Perfetto rejects complete events on one thread that overlap without nesting,
so every track is split into lanes ("comm", "comm (2)", ...): an event goes to the first lane
where it either starts after everything open has ended or nests inside the innermost open event.
Times are kept as integer nanoseconds internally (Perfetto's own resolution), so the lanes are
computed on exactly the values written.
"""

from __future__ import annotations

import json
import math
import re
from collections import defaultdict, deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import pyarrow as pa

from chakra_core import limits
from chakra_core.format.columns import COMM_TYPES
from chakra_core.format.job import read_ranks, split_rank_url
from chakra_core.format.nodetypes import (
    COLL,
    COMM_NODE_TYPES,
    MEM_NODE_TYPES,
    NODE_TYPE_VALUES,
    RECV,
    SEND,
)
from chakra_core.inputs import bounded_lines, open_input
from chakra_core.outputs import open_output
from chakra_core.terminal import human_bytes

DEFAULT_MAX_FLOWS = 2000
COMM_KINDS = {SEND: "send", RECV: "recv", COLL: "collective"}
SIM_TRACK_ORDER = ("cpu", "compute", "comm", "memory")
LOG_TRACK_ORDER = ("local memory", "remote memory", "compute", "comm", "other")


@dataclass
class _Event:
    pid: int
    track: str  # the thread (before lane splitting)
    name: str
    start_ns: int
    end_ns: int
    args: dict
    key: object = None  # identifies the event for flows (node id)
    tid: int = 0  # filled by _layout
    sort: tuple = ()  # track sort key


@dataclass
class _Builder:
    """Collects events of one timeline and lays them out as a trace document."""

    process_label: str = "NPU"
    events: list[_Event] = field(default_factory=list)
    process_names: dict[int, str] = field(default_factory=dict)
    track_rank: dict[str, tuple] = field(default_factory=dict)  # track -> sort key
    nesting: set[str] = field(default_factory=set)  # tracks whose events may nest (call stacks); others: lanes

    def add(self, event: _Event) -> None:
        self.events.append(event)
        self.process_names.setdefault(event.pid, f"{self.process_label} {event.pid}")

    def document(self, flows: Iterable[tuple[int, object, object]] = (), max_flows: int = DEFAULT_MAX_FLOWS,
                 other: dict | None = None) -> dict:
        """flows: (pid, parent key, child key[, name]) tuples, drawn in order up to max_flows; only
        those crossing threads are drawn."""
        trace: list[dict] = []
        threads = _layout(self.events, self.track_rank, self.nesting)
        for pid in sorted(self.process_names):
            trace.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
                          "args": {"name": self.process_names[pid]}})
            trace.append({"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0,
                          "args": {"sort_index": pid}})
        for (pid, tid), name in sorted(threads.items()):
            trace.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}})
            trace.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid,
                          "args": {"sort_index": tid}})
        self.events.sort(key=lambda e: (e.pid, e.tid, e.start_ns, -e.end_ns))
        for e in self.events:
            trace.append({"name": e.name, "cat": e.track, "ph": "X", "ts": _us(e.start_ns),
                          "dur": _us(e.end_ns - e.start_ns), "pid": e.pid, "tid": e.tid, "args": e.args})
        drawn, dropped = self._flows(trace, flows, max_flows)
        summary = {"events": len(self.events), "npus": len(self.process_names), "threads": len(threads),
                   "flows": drawn, "flows_dropped": dropped}
        return {"traceEvents": trace, "displayTimeUnit": "ns", "otherData": {**summary, **(other or {})}}

    def _flows(self, trace: list[dict], flows: Iterable[tuple[int, object, object]], max_flows: int) -> tuple[int, int]:
        by_key = {(e.pid, e.key): e for e in self.events if e.key is not None}
        drawn = dropped = 0
        for pid, parent_key, child_key, *label in flows:
            parent, child = by_key.get((pid, parent_key)), by_key.get((pid, child_key))
            if parent is None or child is None or parent.track == child.track or child.start_ns < parent.start_ns:
                continue
            if drawn >= max_flows:
                dropped += 1
                continue
            drawn += 1
            name = label[0] if label else "dependency"
            common = {"name": name, "cat": name, "id": drawn, "pid": pid}
            trace.append({**common, "ph": "s", "ts": _us(parent.start_ns), "tid": parent.tid})
            trace.append({**common, "ph": "f", "bp": "e", "ts": _us(child.start_ns), "tid": child.tid})
        return drawn, dropped


def _us(ns: int) -> float | int:
    return ns // 1000 if ns % 1000 == 0 else ns / 1000


def _lanes(events: list[_Event], nest: bool) -> int:
    """Assigns each event a lane (stored in .tid, 0-based) so that events of a lane only nest
    (with `nest`; else never overlap: concurrent operations are not a call stack); returns the
    number of lanes. Greedy on events sorted by start (longest first)."""
    events.sort(key=lambda e: (e.start_ns, -e.end_ns))
    stacks: list[list[int]] = []  # per lane: ends of the open (enclosing) events, innermost last
    for e in events:
        for lane, stack in enumerate(stacks):
            while stack and stack[-1] <= e.start_ns:
                stack.pop()
            if not stack or (nest and stack[-1] >= e.end_ns):
                stack.append(e.end_ns)
                e.tid = lane
                break
        else:
            stacks.append([e.end_ns])
            e.tid = len(stacks) - 1
    return len(stacks)


def _layout(events: list[_Event], track_rank: dict[str, tuple], nesting: set[str]) -> dict[tuple[int, int], str]:
    """Gives every event its thread id (per process: tracks in order, each split into lanes);
    returns {(pid, tid): thread name}."""
    groups: dict[int, dict[str, list[_Event]]] = defaultdict(lambda: defaultdict(list))
    for e in events:
        groups[e.pid][e.track].append(e)
    names: dict[tuple[int, int], str] = {}
    for pid, tracks in groups.items():
        next_tid = 1
        for track in sorted(tracks, key=lambda t: (track_rank.get(t, (99,)), t)):
            members = tracks[track]
            count = _lanes(members, track in nesting)
            for e in members:
                e.tid += next_tid
            for lane in range(count):
                names[(pid, next_tid + lane)] = track if lane == 0 else f"{track} ({lane + 1})"
            next_tid += count
    return names


# ------------------------------------------------------------------ simulation results


def timeline_from_simulation(result, tables=None, max_flows: int = DEFAULT_MAX_FLOWS) -> dict:
    """A SimResult recorded with record_timeline=True. With `tables` (the workload's node tables,
    one per NPU), dependencies crossing tracks are drawn as flows."""
    if result.timeline is None:
        raise ValueError("no timeline was recorded: simulate with record_timeline=True")
    b = _Builder("NPU", track_rank={t: (i,) for i, t in enumerate(SIM_TRACK_ORDER)})
    for n in range(len(result.npus)):
        b.process_names[n] = f"NPU {n}"
    for t in result.timeline:
        b.add(_Event(t.npu, t.track, t.name or t.kind, t.start_ns, max(t.end_ns, t.start_ns),
                     {"node_id": t.node_id, "kind": t.kind, "bytes": t.bytes}, key=t.node_id))
    flows = []
    if tables is not None:
        for npu, table in enumerate(tables):
            flows.extend((npu, parent, child) for child, parent in _deps(table))
    other = {"source": "simulation", "mode": result.mode, "finish_ns": result.finish_ns, "notes": list(result.notes)}
    return b.document(flows, max_flows, other)


def timeline_from_jobs(result, placed: list) -> dict:
    """A run of several jobs on one network (sim/colocation.py's PlacedJobs, recorded with
    record_timeline): one process per job, one track per NPU and kind of work."""
    if result.timeline is None:
        raise ValueError("no timeline was recorded: simulate with record_timeline=True")
    job_of = {npu: (job, rank) for job, p in enumerate(placed) for rank, npu in enumerate(p.npus)}
    b = _Builder("job")
    for job, p in enumerate(placed):
        b.process_names[job] = f"job {job}: {p.workload}"
    for t in result.timeline:
        job, rank = job_of[t.npu]
        track = f"NPU {t.npu} (rank {rank}) {t.track}"
        b.track_rank.setdefault(track, (rank, SIM_TRACK_ORDER.index(t.track) if t.track in SIM_TRACK_ORDER else 99))
        b.add(_Event(job, track, t.name or t.kind, t.start_ns, max(t.end_ns, t.start_ns),
                     {"node_id": t.node_id, "kind": t.kind, "bytes": t.bytes, "npu": t.npu}, key=(t.npu, t.node_id)))
    other = {"source": "simulation of several jobs", "mode": result.mode, "finish_ns": result.finish_ns,
             "jobs": len(placed), "notes": list(result.notes)}
    return b.document((), 0, other)


def _deps(table) -> Iterable[tuple[int, int]]:
    """(child id, parent id) for every data and control dependency of a node table."""
    ids = table.column("id").to_pylist()
    for column in ("data_deps", "ctrl_deps"):
        if column not in table.column_names:
            continue
        for child, parents in zip(ids, table.column(column).to_pylist()):
            for parent in parents or ():
                yield child, parent


# ------------------------------------------------------------------ real traces, as recorded

# the node-table columns a recorded timeline reads
RECORDED_COLUMNS = ["id", "name", "type", "start_time_micros", "duration_micros", "duration_ns", "is_cpu_op",
                    "comm_size", "stream", "tid", "ctrl_deps", "data_deps", "comm_type", "tensor_size"]


def _rank_of(url: str, default: int) -> int:
    found = split_rank_url(url)
    return found[1] if found else default


def timeline_from_traces(urls: list[str], max_flows: int = DEFAULT_MAX_FLOWS, rebase: bool = True) -> dict:
    """One .et file per rank of one job (rank from `<prefix>.<rank>.et`, else file order), as
    timeline_from_tables draws it."""
    from chakra_core.format.etfile import read_table

    ranks: list[tuple[int, pa.Table]] = []
    used: set[int] = set()
    for k, url in enumerate(urls):
        rank = _rank_of(url, k)
        if rank in used:  # two files claiming one rank: keep both, apart
            rank = max(used) + 1
        used.add(rank)
        ranks.append((rank, read_table(url, RECORDED_COLUMNS)))
    return timeline_from_tables(ranks, {"files": list(urls)}, max_flows, rebase)


def recorded_timeline(prefix: str, npus: int | None = None, max_flows: int = DEFAULT_MAX_FLOWS) -> dict:
    """The job of the converted rank files `<prefix>.<R>.et[.gz]` (ranks 0..npus-1; all there are
    when None) as recorded: what `chakra timeline --recorded` and a report's job page write."""
    tables = read_ranks(prefix, npus, RECORDED_COLUMNS)
    return timeline_from_tables(list(enumerate(tables)), {"prefix": prefix}, max_flows)


def timeline_from_tables(ranks: list[tuple[int, pa.Table]], sources: dict, max_flows: int = DEFAULT_MAX_FLOWS,
                         rebase: bool = True) -> dict:
    """(rank, node table) pairs of one job, each node at its recorded time: from start_time_micros
    for duration_ns where the conversion kept it (device work timed by Kineto), else
    duration_micros (analysis.device_work.recorded_times, as stats reads them). Nodes without a
    start time are skipped and counted. With `rebase`, times start at the job's earliest node
    (ranks stay aligned); otherData.time_origin_us holds the offset."""
    from chakra_core.analysis.device_work import recorded_times

    timed = [(rank, table, *recorded_times(table)) for rank, table in ranks]
    starts = [int(start[start > 0].min()) for _, _, start, _ in timed if (start > 0).any()]
    origin = min(starts) if (rebase and starts) else 0
    b = _Builder("Rank", track_rank={})
    skipped = 0
    flows = []
    for rank, table, start, end in timed:
        b.process_names[rank] = f"Rank {rank}"
        rows = table.select([c for c in RECORDED_COLUMNS if c in table.column_names]).to_pylist()
        for r, begins, ends in zip(rows, start.tolist(), end.tolist()):
            if begins <= 0:
                skipped += 1
                continue
            b.add(_Event(rank, _recorded_track(b, r), _recorded_name(r), begins - origin, max(ends, begins) - origin,
                         _recorded_args(r), key=r["id"]))
        kernels = {r["id"] for r in rows if r.get("is_cpu_op") is False and r.get("stream") is not None}
        deps = list(_deps(table))
        launches = [(rank, parent, child, "launch") for child, parent in deps if child in kernels]
        flows.extend(launches)  # first, so that the cap keeps them: host operator -> the kernels it launched
        flows.extend((rank, parent, child) for child, parent in deps if child not in kernels)
    other = {"source": "traces", **sources, "skipped_zero_start": skipped, "time_origin_us": origin // 1000}
    return b.document(flows, max_flows, other)


def _recorded_track(b: _Builder, r: dict) -> str:
    """The node's track (registered with its sort key): a host thread, a device stream, or the
    communication or memory track."""
    node_type = r.get("type")
    if node_type in COMM_NODE_TYPES:
        b.track_rank.setdefault("communication", (2,))
        return "communication"
    if node_type in MEM_NODE_TYPES:
        b.track_rank.setdefault("memory", (3,))
        return "memory"
    if r.get("is_cpu_op") is False:
        stream = r.get("stream")
        track = f"stream {stream}" if stream is not None else "device"
        b.track_rank.setdefault(track, (1, stream if stream is not None else -1))
        return track
    tid = r.get("tid")
    track = f"CPU thread {tid}" if tid is not None else "CPU"
    b.track_rank.setdefault(track, (0, tid if tid is not None else -1))
    b.nesting.add(track)  # host operators nest: a call stack
    return track


def _recorded_kind(r: dict) -> str:
    node_type = r.get("type")
    if node_type in COMM_NODE_TYPES:
        return COMM_KINDS[node_type]
    return "memory" if node_type in MEM_NODE_TYPES else "kernel" if r.get("is_cpu_op") is False else "cpu"


def _recorded_name(r: dict) -> str:
    """The node's name; communication also says its kind and bytes (`c10d::allreduce_
    (all_reduce, 256.3 MiB)`), so that a collective reads as what it moved."""
    name = r.get("name") or f"node {r['id']}"
    if r.get("type") in COMM_NODE_TYPES and r.get("comm_size") is not None:
        kind = COMM_TYPES.get(r.get("comm_type"), "collective") if r["type"] == COLL else COMM_KINDS[r["type"]]
        return f"{name} ({kind.lower()}, {human_bytes(r['comm_size'])})"
    return name


def _recorded_args(r: dict) -> dict:
    args = {"node_id": r["id"], "kind": _recorded_kind(r)}
    for column, key in (("comm_size", "comm_size"), ("tensor_size", "bytes")):
        if r.get(column) is not None:
            args[key] = r[column]
    if r.get("comm_type") is not None and r.get("type") == COLL:
        args["comm_type"] = r["comm_type"]
    return args


# ------------------------------------------------------------------ reference visualizer logs

_LOG_TYPES = (  # node-type substrings -> track, as chakra_timeline_visualizer decides
    ("MEM_LOAD_NODE", "memory"), ("MEM_STORE_NODE", "memory"), ("COMP_NODE", "compute"),
    ("COMM_SEND_NODE", "comm"), ("COMM_RECV_NODE", "comm"), ("COMM_COLL_NODE", "comm"),
)
_NUMERIC_TYPES = {str(NODE_TYPE_VALUES[name]): track for name, track in _LOG_TYPES}  # "2" -> "memory", ...
_TOKEN = re.compile(r"\b(issue|callback)\s*,")
MAX_LOG_LINE = 64 << 10  # bytes of one log line kept; real ones are under 200


def _log_track(text: str) -> str | None:
    for needle, track in _LOG_TYPES:
        if needle in text:
            if track != "memory":
                return track
            if "LOCAL_MEMORY" in text:
                return "local memory"
            if "REMOTE_MEMORY" in text:
                return "remote memory"
    return None


def _classify(name: str, extra: list[str]) -> str:
    """Track from the node name (as the reference does); failing that from a later `...type=` field
    (ASTRA-sim prints node->type), else "other"."""
    track = _log_track(name)
    if track is not None:
        return track
    for item in extra:
        key, _, value = item.partition("=")
        if "type" in key:
            value = value.strip()
            track = _log_track(value) or _NUMERIC_TYPES.get(value)
            if track == "memory":
                track = "other"  # memory location unknown
            if track is not None:
                return track
    return "other"


def parse_log(lines: Iterable[str], path: str, unparsed: list[int]
              ) -> Iterator[tuple[str, int, int, int, str, list[str]]]:
    """(kind, npu, cycle, node id, name, extra fields) per issue/callback line, as they are read;
    unparsed[0] counts such lines that could not be parsed. More than the `log_lines` limit of
    them is refused."""
    most, seen = limits.value("log_lines"), 0
    for line in lines:
        m = _TOKEN.search(line)
        if m is None:
            continue
        seen += 1
        if seen > most:
            raise limits.LimitExceeded(path, "log_lines", f"more than {most:,} issue/callback lines")
        fields = [f.strip() for f in line[m.start():].rstrip("\r\n").split(",")]
        fields[0] = m.group(1)
        try:
            values = [f.partition("=")[2].strip() for f in fields[1:5]]
            if len(fields) < 5 or not all("=" in f for f in fields[1:5]):
                raise ValueError
            record = (fields[0], int(values[0]), int(float(values[1])), int(values[2]), values[3], fields[5:])
        except (ValueError, OverflowError):
            unparsed[0] += 1
            continue
        yield record


def timeline_from_log(path: str, npu_frequency_mhz: float) -> dict:
    """The issue/callback log that chakra_timeline_visualizer reads (plain, gzipped, or ASTRA-sim's
    with spdlog's `[time] [D] <workload>: ` prefix), read line by line (a line is cut at
    MAX_LOG_LINE bytes). ts/dur are cycles / MHz in microseconds."""
    if not (npu_frequency_mhz > 0 and math.isfinite(npu_frequency_mhz)):
        raise ValueError(f"NPU frequency {npu_frequency_mhz!r} MHz: expected a positive number")
    unparsed = [0]
    with open_input(path) as f:
        return _log_document(parse_log(bounded_lines(f, MAX_LOG_LINE), path, unparsed), path, npu_frequency_mhz,
                             unparsed)


def _log_document(records: Iterable[tuple], path: str, npu_frequency_mhz: float, unparsed: list[int]) -> dict:
    b = _Builder("NPU", track_rank={t: (i,) for i, t in enumerate(LOG_TRACK_ORDER)})
    pending: dict[tuple[int, int], deque] = defaultdict(deque)
    unmatched_callbacks = 0

    def ns(cycle: int) -> int:
        return round(cycle * 1000 / npu_frequency_mhz)

    for kind, npu, cycle, node_id, name, extra in records:
        if kind == "issue":
            pending[(npu, node_id)].append((cycle, name, extra))
            b.process_names.setdefault(npu, f"NPU {npu}")
            continue
        queue = pending.get((npu, node_id))
        if not queue:
            unmatched_callbacks += 1
            continue
        start, name, extra = queue.popleft()
        track = _classify(name, extra)
        b.add(_Event(npu, track, name, ns(start), max(ns(cycle), ns(start)),
                     {"node_id": node_id, "kind": track, "cycles": cycle - start}, key=node_id))
    other = {"source": "log", "file": path, "npu_frequency_mhz": npu_frequency_mhz,
             "unfinished_issues": sum(len(q) for q in pending.values()),
             "unmatched_callbacks": unmatched_callbacks, "unparsed_lines": unparsed[0]}
    return b.document((), 0, other)


# ------------------------------------------------------------------ validation and output

_REQUIRED = {"X": ("name", "ph", "ts", "dur", "pid", "tid"), "M": ("name", "ph", "pid"),
             "s": ("name", "ph", "ts", "pid", "tid", "id"), "f": ("name", "ph", "ts", "pid", "tid", "id"),
             "t": ("name", "ph", "ts", "pid", "tid", "id")}
_MAX_PROBLEMS = 100


def _ns(value) -> int:
    return round(value * 1000)  # Perfetto's JSON importer: microseconds to integer nanoseconds


def validate_trace_events(doc) -> list[str]:
    """Problems that would make Perfetto reject or misdraw the document; [] when none."""
    problems: list[str] = []
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        return ["the document is not an object with a traceEvents list"]
    processes, threads = set(), set()
    spans: dict[tuple, list[tuple[int, int, int]]] = defaultdict(list)
    used: dict[tuple, int] = {}
    for i, e in enumerate(doc["traceEvents"]):
        if not isinstance(e, dict):
            problems.append(f"event {i}: not an object")
            continue
        ph = e.get("ph")
        if ph is None:
            problems.append(f"event {i}: missing key 'ph'")
            continue
        missing = [k for k in _REQUIRED.get(ph, ("name", "ph")) if k not in e]
        if missing:
            problems.append(f"event {i} (ph {ph}): missing key(s) {', '.join(missing)}")
            continue
        for k in ("ts", "dur"):
            if k in e and not (isinstance(e[k], (int, float)) and not isinstance(e[k], bool)
                               and math.isfinite(e[k]) and e[k] >= 0):
                problems.append(f"event {i} (ph {ph}): {k} {e[k]!r} is not a non-negative number")
                missing.append(k)
        if ph == "M":
            if e["name"] in ("process_name", "thread_name"):
                name = (e.get("args") or {}).get("name") if isinstance(e.get("args"), dict) else None
                if name is None:
                    problems.append(f"event {i}: {e['name']} metadata without args.name")
                elif e["name"] == "process_name":
                    processes.add(e["pid"])
                elif "tid" not in e:
                    problems.append(f"event {i}: thread_name metadata without tid")
                else:
                    threads.add((e["pid"], e["tid"]))
        elif ph == "X" and not missing:
            start = _ns(e["ts"])
            spans[(e["pid"], e["tid"])].append((start, start + _ns(e["dur"]), i))
            used.setdefault((e["pid"], e["tid"]), i)
    for (pid, tid), first in sorted(used.items(), key=lambda kv: kv[1]):
        if pid not in processes:
            problems.append(f"pid {pid} (event {first}) has no process_name metadata")
            processes.add(pid)
        if (pid, tid) not in threads:
            problems.append(f"pid {pid} tid {tid} (event {first}) has no thread_name metadata")
    for (pid, tid), items in spans.items():
        items.sort(key=lambda s: (s[0], -s[1]))
        stack: list[tuple[int, int, int]] = []
        for start, end, i in items:
            while stack and stack[-1][1] <= start:
                stack.pop()
            if stack and stack[-1][1] < end:
                problems.append(f"pid {pid} tid {tid}: event {i} [{start}, {end}) ns partially overlaps "
                                f"event {stack[-1][2]} [{stack[-1][0]}, {stack[-1][1]}) ns")
                continue
            stack.append((start, end, i))
    if len(problems) > _MAX_PROBLEMS:
        problems = problems[:_MAX_PROBLEMS] + [f"... and {len(problems) - _MAX_PROBLEMS} more"]
    return problems


def write_timeline(doc: dict, url: str) -> None:
    """Writes the document as JSON to any fsspec URL (gzip when it ends in .gz)."""
    data = json.dumps(doc, separators=(",", ":")).encode()
    with open_output(url, "wb") as f:
        f.write(data)
