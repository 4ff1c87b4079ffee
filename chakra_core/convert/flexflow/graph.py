"""FlexFlow task graphs (graphviz dot) to Chakra: one graph per device (docs/other-sources.md).

A compute task (`COMP_NODE`) becomes a compute node on its device, timed by
`simulated_run_time`; a transfer (`COMM_SEND_RECV_NODE`) a send on its source device and a
receive on its destination, sharing a tag and its `comm_size`. An edge A -> B makes B depend
on A: on B's device, B waits for A (a compute on the same device) or for the receive of A
(a transfer to it); a send waits for its producers on its source device.

FlexFlow's simulator times tasks in milliseconds (its compute times are those of GPU kernels
in ms: tens of microseconds for an MNIST layer, about a millisecond for an AlexNet
convolution); `time_unit` reads graphs from builds that wrote another unit.
"""

from __future__ import annotations

import math
import re
from bisect import bisect_right
from collections import deque
from dataclasses import dataclass

from chakra_core import limits
from chakra_core.convert.common.source_file import Converted, SourceOptions, read_source
from chakra_core.errors import SourceFormatError
from chakra_core.format.job import Job
from chakra_core.generate.builder import RankGraph, check_send_recv

MICROSECONDS = {"s": 1e6, "ms": 1e3, "us": 1.0}
COMPUTE, TRANSFER = "COMP_NODE", "COMM_SEND_RECV_NODE"
MAX_TAG = (1 << 31) - 1
MAX_MICROS = 365 * 86400e6  # a task longer than a year is a broken number, not a task

_HEADER = re.compile(r"\s*(?:strict\s+)?digraph\b\s*(?:\w+|\"[^\"]*\")?\s*\{", re.IGNORECASE)
_QUOTED = r"\"[^\"\\]*(?:\\.[^\"\\]*)*\""  # "...", escapes kept (unrolled: one step per run of plain characters)
_ATTRS = r"\[[^\]\"]*(?:" + _QUOTED + r"[^\]\"]*)*\]"
_STATEMENT = re.compile(
    r"\s*(?:(?P<edge_a>\w+)\s*->\s*(?P<edge_b>\w+)\s*(?:" + _ATTRS + r")?"
    r"|(?P<default>graph|node|edge)\s*" + _ATTRS +
    r"|(?P<node>\w+)\s*(?P<attrs>" + _ATTRS + r")?"
    r"|\w+\s*=\s*(?:\w+|\"(?:[^\"\\]|\\.)*\"))\s*;?")
_SPACE = re.compile(r"\s*")
_END = re.compile(r"\s*\}\s*\Z")
_LABEL = re.compile(r"\blabel\s*=\s*\"([^\"\\]*(?:\\.[^\"\\]*)*)\"")


@dataclass
class Task:
    name: str            # the dot node, e.g. node79
    line: int
    kind: str            # COMPUTE or TRANSFER
    device: int          # compute: its device; transfer: the source device
    micros: float        # the graph's run time, in microseconds
    label: str           # compute: "<op> <phase>"; transfer: its description
    dst: int = -1        # transfer: destination device
    size: int = 0        # transfer: bytes


class _Lines:
    """Line numbers of offsets in a text, for error messages."""

    def __init__(self, text: str):
        self.starts = [m.end() for m in re.finditer("\n", text)]

    def of(self, offset: int) -> int:
        return bisect_right(self.starts, offset) + 1


def parse_graph(path: str, text: str, time_unit: str = "ms") -> tuple[dict[str, Task], list[tuple[str, str, int]]]:
    """The tasks (by dot node, in file order) and edges (a, b, line) of a task graph."""
    lines = _Lines(text)
    header = _HEADER.match(text)
    if not header:
        raise SourceFormatError(path, "not a FlexFlow task graph: expected 'digraph NAME {'", line=1)
    tasks: dict[str, Task] = {}
    edges: list[tuple[str, str, int]] = []
    most, pos = limits.value("nodes"), header.end()
    while not _END.match(text, pos):
        statement = _STATEMENT.match(text, pos)
        start = _SPACE.match(text, pos).end()  # where the statement (or what cannot be read) begins
        if not statement or statement.end() == pos:
            if start == len(text):
                raise SourceFormatError(path, "the graph ends without its closing '}'", line=lines.of(start))
            snippet = text[start:start + 40].splitlines()[0]
            raise SourceFormatError(path, f"cannot read {snippet!r}", line=lines.of(start))
        line = lines.of(start)
        if statement["edge_a"]:
            edges.append((statement["edge_a"], statement["edge_b"], line))
        elif statement["node"] and statement["attrs"] is not None:
            if statement["node"] in tasks:
                raise SourceFormatError(path, "declared twice", line=line, node=statement["node"])
            tasks[statement["node"]] = _task(path, statement["node"], line, statement["attrs"], time_unit)
        if len(tasks) + len(edges) > most:
            raise limits.LimitExceeded(path, "nodes", f"more than {most:,} tasks and edges")
        pos = statement.end()
    return tasks, edges


def _task(path: str, name: str, line: int, attrs: str, time_unit: str) -> Task:
    label = _LABEL.search(attrs)
    text = label.group(1) if label else ""
    if not (text.startswith("{") and text.endswith("}")):
        raise SourceFormatError(path, "expected a record label \"{device_id=...|...}\"", line=line, node=name)
    fields = [f.strip() for f in text[1:-1].split("|")]
    values = dict(f.split("=", 1) for f in fields if "=" in f)
    words = [f for f in fields if "=" not in f]
    kind = next((w for w in words if w in (COMPUTE, TRANSFER)), None)
    if kind is None:
        raise SourceFormatError(path, f"the label names neither {COMPUTE} nor {TRANSFER}", line=line, node=name)

    def number(key: str, parse=int):
        if key not in values:
            raise SourceFormatError(path, f"the label has no {key}=", line=line, node=name)
        try:
            value = parse(values[key])
        except ValueError:
            value = -1
        if not (math.isfinite(value) and 0 <= value <= (MAX_TAG if parse is int else 1e18)):
            raise SourceFormatError(path, f"{key}={values[key]!r} is not a number in range", line=line, node=name)
        return value

    def micros(key: str) -> float:
        value = number(key, float) * MICROSECONDS[time_unit]
        if value > MAX_MICROS:
            raise SourceFormatError(path, f"{key}={values[key]} {time_unit} is longer than a year", line=line,
                                    node=name)
        return value

    if kind == COMPUTE:
        return Task(name, line, kind, number("device_id"), micros("simulated_run_time"),
                    " ".join(w for w in words if w != kind))
    return Task(name, line, kind, number("src_device_id"), micros("run_time"), words[0] if words else "transfer",
                number("dst_device_id"), number("comm_size"))


def _order(path: str, tasks: dict[str, Task], edges: list[tuple[str, str, int]]) -> tuple[list[str], dict]:
    """Tasks in dependency order (file order among the ready ones) and each task's predecessors."""
    preds: dict[str, list[str]] = {name: [] for name in tasks}
    succs: dict[str, list[str]] = {name: [] for name in tasks}
    for a, b, line in edges:
        for end in (a, b):
            if end not in tasks:
                raise SourceFormatError(path, "an edge names a node the graph never declares", line=line, node=end)
        preds[b].append(a)
        succs[a].append(b)
    waiting = {name: len(p) for name, p in preds.items()}
    ready = deque(name for name in tasks if not waiting[name])
    order = []
    while ready:
        name = ready.popleft()
        order.append(name)
        for nxt in succs[name]:
            waiting[nxt] -= 1
            if not waiting[nxt]:
                ready.append(nxt)
    if len(order) < len(tasks):
        stuck = next(name for name in tasks if waiting[name])
        raise SourceFormatError(path, "the graph has a cycle through this node", line=tasks[stuck].line, node=stuck)
    return order, preds


IDLE_DEVICES_ALLOWED = 16  # ranks per device a graph's tasks use (plus as many), before the numbering is refused


def _npus(path: str, tasks: dict[str, Task]) -> int:
    devices = [t.device for t in tasks.values()] + [t.dst for t in tasks.values() if t.kind == TRANSFER]
    if not any(t.kind == COMPUTE for t in tasks.values()):
        raise SourceFormatError(path, "the graph has no compute task")
    npus = max(devices) + 1
    if npus > limits.value("npus"):
        raise limits.LimitExceeded(path, "npus", f"device id {npus - 1}")
    used = len(set(devices))
    if npus > IDLE_DEVICES_ALLOWED * used + IDLE_DEVICES_ALLOWED:  # 120 bytes naming device 65535: 65,536 rank files
        raise SourceFormatError(path, f"device id {npus - 1:,} makes {npus:,} ranks, but the graph's tasks use "
                                f"{used:,} device(s): over {IDLE_DEVICES_ALLOWED}x as many ranks would be idle")
    return npus


def build_graphs(path: str, tasks: dict[str, Task], edges: list[tuple[str, str, int]]
                 ) -> tuple[list[RankGraph], dict[str, int]]:
    """One RankGraph per device, and counts for the report (dependencies between devices that no
    transfer carries are left out, transfers within a device become plain dependencies)."""
    order, preds = _order(path, tasks, edges)
    npus = _npus(path, tasks)
    graphs = [RankGraph(rank, npus=npus) for rank in range(npus)]
    index = {name: k for k, name in enumerate(tasks)}
    done: dict[str, tuple[int, list[int]]] = {}  # task -> (device, the nodes there that finish it)
    counts = {"unmatched dependencies": 0, "transfers within a device": 0}

    def deps_on(device: int, name: str) -> list[int]:
        found = []
        for pred in preds[name]:
            where, ids = done[pred]
            if where == device:
                found.extend(ids)
            else:
                counts["unmatched dependencies"] += 1
        return found

    for name in order:
        task = tasks[name]
        if task.kind == COMPUTE:
            node = graphs[task.device].compute(task.label, deps_on(task.device, name), duration_us=round(task.micros))
            done[name] = (task.device, [node])
        elif task.dst == task.device:
            counts["transfers within a device"] += 1
            done[name] = (task.device, deps_on(task.device, name))
        else:
            what = f"{task.label} ({name})"
            graphs[task.device].send(what, task.dst, task.size, index[name], deps_on(task.device, name))
            done[name] = (task.dst, [graphs[task.dst].recv(what, task.device, task.size, index[name])])
    return graphs, counts


def devices(src: str, options: SourceOptions) -> int:
    """The registry's device count (convert/sources.py): the NPUs the graph at `src` converts to (it
    is read and checked)."""
    return _npus(src, parse_graph(src, read_source(src), options.time_unit)[0])


def convert_flexflow(src: str, out_dir: str, prefix: str, options: SourceOptions, progress, accounted):
    """The registry's entry (convert/sources.py): the graph at src, its run times in options.time_unit."""
    return convert_graph(src, options.time_unit).write(out_dir, prefix)


def convert_graph(path: str, time_unit: str = "ms") -> Converted:
    """The job a FlexFlow task graph describes, one NPU per device; times read in `time_unit`."""
    if time_unit not in MICROSECONDS:
        raise SourceFormatError(path, f"time unit {time_unit!r} is not one of {', '.join(MICROSECONDS)}")
    tasks, edges = parse_graph(path, read_source(path), time_unit)
    graphs, counts = build_graphs(path, tasks, edges)
    tables = [g.table() for g in graphs]
    transfers = [t for t in tasks.values() if t.kind == TRANSFER]
    source = {
        "format": "FlexFlow task graph", "file": path, "time_unit": time_unit,
        "time": f"run times in {time_unit} x {MICROSECONDS[time_unit]:g} = microseconds, rounded",
        "devices": len(graphs), "tasks": len(tasks) - len(transfers), "transfers": len(transfers),
        "edges": len(edges), "transfer_bytes": sum(t.size for t in transfers),
        "transfer_time_us": round(sum(t.micros for t in transfers), 3),
        "notes": [f"{n} {what} (left to plain order on the device)" if what.startswith("unmatched") else
                  f"{n} {what} (kept as dependencies, no message)" for what, n in counts.items() if n],
    }
    source["notes"].append("transfer times are the simulator's to work out from the network; the graph's own "
                           "estimate is transfer_time_us")
    return Converted(Job(tables, {}, "flexflow"), source, check_send_recv(tables))
