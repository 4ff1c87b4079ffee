"""The analysis half of one rank's PyTorch conversion (convert/pytorch.py emits what it finds):
the role of every host node (operator, thread root, process-group annotation or init, a
communication op and the wrappers and gloo:* nodes inside it), each communication op's size,
peer and process group (CommRecord), and, with Kineto, the links to the recorded events, the
host and blocked time of communication calls and the waits between threads and on the device
(hosttime, threadwait, devicesync). The report of the conversion (ConversionReport) starts here.
"""

from __future__ import annotations

import bisect
from array import array
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from chakra_core.convert.pytorch import comms, devicesync, hosttime, threadwait
from chakra_core.convert.pytorch.devicetiming import device_timing
from chakra_core.convert.pytorch.groups import WORLD, ProcessGroups, parse_pg_init
from chakra_core.convert.pytorch.kineto import DeviceEvent, KinetoTrace, Linked, link
from chakra_core.convert.pytorch.et import (
    PG_INIT_NAME,
    ROOT_NAME,
    HostTrace,
    tensor_nbytes,
    tensors_in,
)
from chakra_core.errors import ChakraFormatError

PG_ANNOTATION_PREFIX = "chakra::pg="  # chakra_core.convert.collect.PG_ANNOTATION_PREFIX (no torch import here)

# node roles
OP, ROOT, ANNOTATION, META, ANCHOR, WRAPPED, GLOO = range(7)
MAX_ANCESTOR_WALK = 64
MAX_COMM_SIZE = 2**63 - 1  # comm_size is an int64 attribute


@dataclass
class CommRecord:
    """One communication node of a rank, for cross-rank checks and group inference."""

    index: int  # host node index of the anchor
    node_id: int
    kind: int | str
    size: int
    pg_name: str | None  # PyTorch name; None: the trace does not say
    pg_source: str  # "record_param_comms", "annotation", "only group", "inferred", "assumed world"
    peer: int | None
    tag: int


@dataclass
class ConversionReport:
    path: str
    rank: int
    schema: str
    host_nodes: int = 0
    counts: Counter = field(default_factory=Counter)  # what each host node became
    notes: list[str] = field(default_factory=list)
    time_us: dict[str, int] = field(default_factory=dict)  # where the time of communication calls went (Kineto)
    device_timing: dict = field(default_factory=dict)  # launch latency and gaps between kernels (devicetiming.py)

    def to_dict(self) -> dict:
        return {"path": self.path, "rank": self.rank, "schema": self.schema, "host_nodes": self.host_nodes,
                "counts": dict(self.counts), "notes": list(self.notes), "time_us": dict(self.time_us),
                **({"device_timing": dict(self.device_timing)} if self.device_timing else {})}


class RankAnalysis:
    """Analyse a rank's host trace: roles, communication ops, Kineto links (RankConversion emits it)."""

    def __init__(self, host: HostTrace, kineto: KinetoTrace | None, rank: int):
        self.host = host  # the Kineto trace is not kept: what a conversion needs of it is linked below
        self.rank = rank
        self.report = ConversionReport(host.path, rank, host.schema, len(host))
        self.report.notes.extend(host.notes)
        n = len(host)
        ids = np.frombuffer(host.ids, dtype=np.int64) if n else np.zeros(0, np.int64)
        self.order = np.argsort(ids, kind="stable")
        self.parent = self._parents(ids)
        self.role = [OP] * n
        self.anchor_of = [-1] * n
        self.comm: dict[int, comms.CommOp] = {}
        self.gloo_of: dict[int, list[int]] = {}
        self.wrapped_gloo: dict[int, list[int]] = {}  # anchor -> gloo:* nodes the trace nests inside it
        self.waits: dict[int, int] = {}  # wait node index -> sequence number
        self.groups = ProcessGroups()
        self.pg_init_index: int | None = None
        self._classify()
        self.linked: Linked | None = None
        self.cpu_columns: hosttime.CpuColumns | None = None  # the linked CPU events as columns
        self.launchers_in_comm: dict[int, list[int]] = {}  # anchor -> host nodes whose device work it owns
        self.call_time = hosttime.CallTime()  # host and blocked time of communication calls (hosttime.py)
        self.own_time: dict[int, float] = {}  # anchor -> µs of the collective's own duration kept as host time
        self.blocking: set[int] = set()  # anchors whose call returned only once their (measured) work had ended
        self.work: dict[int, tuple[float, float]] = {}  # anchor -> (start, end) of its gloo work
        self.thread_waits: list[threadwait.ThreadWait] = []  # a thread waiting for another's operators
        self.device_waits: list[devicesync.DeviceWait] = []  # a thread waiting for device work
        self.comm_waits: dict[int, DeviceEvent] = {}  # anchor -> device work its device-side work waits for
        self.device_work: list[tuple[int, DeviceEvent]] = []  # (launcher index, event) of the device nodes
        if kineto is not None:
            self.linked = link(host.names, host.attr_columns["rf_id"], host.attr_columns["tid"], host.ids, kineto)
            self.report.notes.extend(self.linked.report.lines())
            for k in self.linked.device:  # device work launched inside a communication op is its duration
                if self.anchor_of[k] >= 0:
                    self.launchers_in_comm.setdefault(self.anchor_of[k], []).append(k)
            self.cpu_columns = hosttime.CpuColumns.of(self.linked, kineto.cpu)
            self.call_time = self._account_call_time()
            is_op = np.asarray(self.role, np.int8)[self.cpu_columns.index] == OP
            operators = self.cpu_columns.select(is_op)
            cut = hosttime.remove_waiting_between_ops(self.call_time, kineto.after_children, self.work,
                                                      operators.in_trace())
            self.thread_waits = threadwait.remove_waiting_for_threads(kineto.after_children, operators, cut,
                                                                      self.call_time.totals)
            if not host.has_data_deps:  # no tensor ties what goes on after communication to it
                self.thread_waits += threadwait.waits_after_communication(
                    {k: (tid, end, self.linked.cpu[op]) for k, (tid, end, op) in cut.items() if op in self.linked.cpu},
                    operators, [(self.linked.cpu[g], self.linked.cpu[a]) for a in self.comm if a in self.linked.cpu
                                for g in self._gloo_nodes(a) if g in self.linked.cpu])
            self.device_work = self._device_work()
            eligible = [d for _, d in self.device_work]
            self.device_waits = devicesync.remove_waiting_for_device(kineto.runtime, operators.events, eligible,
                                                                     self.call_time.totals)
            in_comm = {a: self.linked.cpu[a] for a in self.launchers_in_comm if a in self.linked.cpu}
            self.comm_waits = devicesync.communication_waits(in_comm, kineto.runtime, eligible)
            hosttime.keep_gaps_between_steps(self.call_time, self.cpu_columns, is_op)
            self.report.device_timing = device_timing(kineto.device, kineto.runtime)
        else:
            self.report.notes.append("no Kineto trace: durations are 0 and device kernels are absent")
        self.records = self._comm_records()

    # ---------------------------------------------------------------- structure
    def _parents(self, ids: np.ndarray) -> array:
        """Host index of each node's parent (-1: none), found with one sorted search; an int64
        array rather than a list, whose int objects took 36 bytes a node."""
        parents = np.frombuffer(self.host.parents, np.int64) if len(ids) else np.zeros(0, np.int64)
        has_parent = (parents >= 0) & (parents != ids)  # the process root names itself as its parent
        sorted_ids = ids[self.order]
        at = np.clip(np.searchsorted(sorted_ids, parents), 0, max(len(ids) - 1, 0))
        found = has_parent & (sorted_ids[at] == parents) if len(ids) else has_parent
        index = np.where(found, self.order[at] if len(ids) else at, -1)
        dangling = int(np.count_nonzero(has_parent & ~found))
        if dangling:
            self.report.notes.append(f"{dangling:,} nodes name a parent (ctrl_deps) that is not in the trace;"
                                     " they are treated as top-level")
        # any other node naming itself is a cycle of one, already cut by has_parent
        own_parent = [i for i in np.flatnonzero(parents == ids).tolist() if not ROOT_NAME.match(self.host.names[i])]
        if own_parent:
            self._report_cut(own_parent, "name themselves as their parent (ctrl_deps)")
        parent = array("q", index.astype(np.int64).tobytes())
        # parents are entered before their children, so a cycle needs a parent with a larger id
        if np.any(found & (parents > ids)):
            cut = _cut_parent_cycles(parent)
            if cut:
                self._report_cut(cut, "close cycles of parent (ctrl_deps) links")
        return parent

    def _report_cut(self, cut: list[int], why: str) -> None:
        """Parent links cut, as a count and a note naming the first few nodes."""
        cut_ids = ", ".join(str(self.host.ids[i]) for i in cut[:5]) + (", ..." if len(cut) > 5 else "")
        self.report.counts["parent cycle cut"] += len(cut)
        self.report.notes.append(f"{len(cut)} node(s) {why}; their parent link is cut: node(s) {cut_ids}")

    def _classify(self) -> None:
        host, role, anchor_of, parent = self.host, self.role, self.anchor_of, self.parent
        gloo_nodes = []
        kind_of_name: dict[str, int] = {}  # names repeat: classify each distinct name once
        for name in set(host.names):
            if ROOT_NAME.match(name):
                kind_of_name[name] = ROOT
            elif name.startswith(PG_ANNOTATION_PREFIX):
                kind_of_name[name] = ANNOTATION
            elif name == PG_INIT_NAME:
                kind_of_name[name] = META
            elif name.startswith("gloo:"):
                kind_of_name[name] = GLOO
            elif name.startswith(("c10d::", "nccl:", "record_param_comms")):
                kind_of_name[name] = ANCHOR  # a candidate: _describe decides
        names = host.names
        for i in self.order.tolist():
            p = parent[i]
            inherited = anchor_of[p] if p >= 0 else -1
            kind = kind_of_name.get(names[i], OP)
            if kind == OP and inherited < 0:
                continue
            if inherited >= 0 and self._own_operation(i, inherited):
                inherited = -1  # a dispatcher op recorded inside another is an operation of its own
            if kind in (ROOT, ANNOTATION):
                role[i] = kind
            elif kind == META:
                role[i] = META
                self._read_pg_init(i)
            elif inherited >= 0:
                role[i] = WRAPPED
                anchor_of[i] = inherited
                self._absorb(inherited, i)
                if kind == GLOO:
                    self.wrapped_gloo.setdefault(inherited, []).append(i)
            elif kind == GLOO:
                role[i] = GLOO
                gloo_nodes.append(i)
            else:
                op = self._describe(i)
                if op is not None:
                    role[i] = ANCHOR
                    anchor_of[i] = i
                    self.comm[i] = op
                elif names[i] == "record_param_comms":
                    seq = comms.wait_sequence(host.whole[i])
                    if seq is not None:
                        self.waits[i] = seq
        self._attach_gloo(gloo_nodes)
        if self.pg_init_index is None:
            self.report.notes.append("no ## process_group:init ## node: process groups are unknown")

    def _own_operation(self, i: int, anchor: int) -> bool:
        """Whether a `c10d::` op inside the communication op `anchor` is a second operation, not
        one of its wrappers: a gloo `irecv` posted right after an `isend` is recorded as a child of
        the `c10d::send`, and pipeline schedules (batch_isend_irecv) do just that."""
        names = self.host.names
        return (names[i].startswith("c10d::") and names[anchor].startswith("c10d::")
                and self._describe(i) is not None)

    def _describe(self, i: int) -> comms.CommOp | None:
        name = self.host.names[i]
        node = self.host.whole.get(i)
        if node is None:
            return None
        if name.startswith("c10d::"):
            return comms.describe_c10d(node)
        if name == "record_param_comms":
            return comms.describe_record_param_comms(node)
        if name.startswith("nccl:"):
            kind = comms.kind_of(name)
            if kind is None:
                return None
            size = _input_bytes(node)
            return comms.CommOp(kind, 0 if kind == comms.BARRIER else size, None, source=name)
        return None

    def _absorb(self, anchor: int, i: int) -> None:
        """A wrapper inside a communication op: take the group and sequence number it records."""
        node = self.host.whole.get(i)
        if node is None or self.host.names[i] != "record_param_comms":
            return
        op = self.comm[anchor]
        if op.pg_name is None:
            op.pg_name = comms.record_param_comms_pg(node)
        if op.seq is None:
            inner = comms.describe_record_param_comms(node)
            op.seq = inner.seq if inner else None

    def _attach_gloo(self, gloo_nodes: list[int]) -> None:
        """gloo:* nodes are recorded after their c10d op, under unreliable parents: attach each to
        the latest communication op before it in record-function order."""
        rf = self.host.attr_columns["rf_id"]
        anchors = sorted(self.comm, key=lambda i: rf[i])
        anchor_rf = [rf[i] for i in anchors]
        for g in gloo_nodes:
            k = bisect.bisect_left(anchor_rf, rf[g]) - 1
            if k >= 0:
                self.gloo_of.setdefault(anchors[k], []).append(g)
                self.anchor_of[g] = anchors[k]
                continue
            kind = comms.kind_of(self.host.names[g])  # a gloo op with no c10d op before it: its own node
            if kind is None:
                self.role[g] = OP
                continue
            node = self.host.whole[g]
            self.role[g] = ANCHOR
            self.anchor_of[g] = g
            self.comm[g] = comms.CommOp(kind, _input_bytes(node), None, source=self.host.names[g])

    def _read_pg_init(self, i: int) -> None:
        node = self.host.whole[i]
        self.pg_init_index = i
        self.groups = parse_pg_init((node.get("inputs") or {}).get("values") or [])
        self.report.notes.extend(self.groups.problems)

    def _annotated_group(self, i: int) -> str | None:
        p, steps = self.parent[i], 0
        while p >= 0 and steps < MAX_ANCESTOR_WALK:
            name = self.host.names[p]
            if name.startswith(PG_ANNOTATION_PREFIX):
                return name[len(PG_ANNOTATION_PREFIX):]
            p, steps = self.parent[p], steps + 1
        return None

    # ---------------------------------------------------------------- communication
    def _comm_records(self) -> list[CommRecord]:
        records = []
        own_groups = self.groups.of_rank(self.rank) if self.groups.groups else []
        distinct_member_sets = {tuple(g.ranks) for g in own_groups}
        for i in sorted(self.comm, key=lambda i: self.host.ids[i]):
            op = self.comm[i]
            pg, source = op.pg_name, "record_param_comms" if op.pg_name is not None else ""
            if pg is None:
                pg = self._annotated_group(i)
                source = "annotation" if pg is not None else ""
            if pg is None and len(distinct_member_sets) == 1:
                pg, source = (WORLD if WORLD in self.groups.groups else own_groups[0].name), "only group"
            records.append(CommRecord(i, self.host.ids[i], op.kind, self._checked_size(i, op.size), pg, source,
                                      op.peer, op.tag))
        return records

    def _checked_size(self, i: int, size) -> int:
        """A comm_size that is a byte count the int64 attribute holds: a negative or NaN element
        count in a corrupt trace must not become a message the simulator times."""
        if type(size) is not int or not 0 <= size <= MAX_COMM_SIZE:
            raise ChakraFormatError(self.host.path, f"{self.host.names[i]}: communication size {size!r} is not a"
                                    " byte count (a tensor's element count or item size is negative, not an integer"
                                    " or too large)", node_id=self.host.ids[i])
        return size

    # ---------------------------------------------------------------- timing
    def _gloo_work(self, anchor: int) -> tuple[float, float] | None:
        """(start, end) of the gloo work of a communication op, from its gloo:* spans."""
        spans = [(e.ts, e.ts + e.dur) for e in (self.linked.cpu.get(g) for g in self._gloo_nodes(anchor))
                 if e is not None]
        return (min(s for s, _ in spans), max(e for _, e in spans)) if spans else None

    def _gloo_nodes(self, anchor: int) -> list[int]:
        """The gloo:* nodes of a communication op: attached by record-function order, or nested in it."""
        return self.gloo_of.get(anchor, []) + self.wrapped_gloo.get(anchor, [])

    def _account_call_time(self) -> hosttime.CallTime:
        """Host and blocked time of the nodes a communication call collapses (hosttime.py)."""
        collapsed = {}
        roles = np.asarray(self.role, np.int8)
        for i in np.flatnonzero(np.isin(roles, (ANNOTATION, ANCHOR, WRAPPED, GLOO))).tolist():
            role = self.role[i]
            if role == ANNOTATION:
                collapsed[i] = "annotation"
            elif role == ANCHOR:
                collapsed[i] = "anchor"
            elif self.host.names[i].startswith("gloo:"):
                collapsed[i] = "gloo"
            elif role == WRAPPED:
                collapsed[i] = "wrapped"
        work = self.work = {a: span for a in self.comm if (span := self._gloo_work(a)) is not None}
        self.blocking = {a for a, op in self.comm.items()
                         if (op.blocking if op.blocking is not None else a in work and self._waited_for(a, work[a][1]))}
        role = self.role
        return hosttime.account(self.linked.cpu, self.cpu_columns, collapsed, self.anchor_of, self.parent,
                                lambda i: role[i] == OP or role[i] == ANNOTATION, work)

    def _waited_for(self, anchor: int, end: float) -> bool:
        """Whether the call that issued a communication op returned only once its work had ended:
        the c10d op itself, or an enclosing process-group annotation (torch's blocking send and
        recv wait outside the c10d op, inside the Python call the annotation wraps)."""
        i, steps = anchor, 0
        while i >= 0 and steps < MAX_ANCESTOR_WALK and (i == anchor or self.role[i] == ANNOTATION):
            event = self.linked.cpu.get(i)
            if event is not None and event.ts + event.dur >= end - 1.0:
                return True
            i, steps = self.parent[i], steps + 1
        return False

    def _device_work(self) -> list[tuple[int, DeviceEvent]]:
        """(launcher index, device event) of the device work that becomes nodes: all but that of
        communication ops (their duration) and of thread roots and annotations."""
        return [(i, d) for i, events in self.linked.device.items()
                if self.anchor_of[i] < 0 and self.role[i] not in (ROOT, ANNOTATION) for d in events]


def _input_bytes(node: dict) -> int:
    return sum(map(tensor_nbytes, tensors_in((node.get("inputs") or {}).get("values") or [], [])))


def _cut_parent_cycles(parent: array) -> list[int]:
    """Break every cycle of parent links (a corrupt trace); returns the nodes whose link was cut."""
    state = [0] * len(parent)  # 0 unvisited, 1 on the current path, 2 done
    cut = []
    for start in range(len(parent)):
        path = []
        i = start
        while i >= 0 and state[i] == 0:
            state[i] = 1
            path.append(i)
            i = parent[i]
        if i >= 0 and state[i] == 1:  # closed a cycle: cut the link that closes it
            cut.append(path[-1])
            parent[path[-1]] = -1
        for j in path:
            state[j] = 2
    return cut
