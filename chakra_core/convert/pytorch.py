"""Convert one rank's PyTorch execution trace (+ optional Kineto trace) to a Chakra node table.

What becomes what:
- every operator node -> a COMP_NODE on the CPU (is_cpu_op) whose duration is the op's
  exclusive CPU time from Kineto (0 without Kineto), with num_ops / tensor_size where the
  shapes allow (chakra_core.convert.opcost);
- `## process_group:init ##` -> a METADATA_NODE whose inputs.values is the Python-literal
  form ASTRA-sim parses (`['<json>']`, docs/format.md, 'Communicator groups');
- a communication op (c10d::*, with its record_param_comms / nccl:* / gloo:* wrappers) -> ONE
  COMM_COLL_NODE, COMM_SEND_NODE or COMM_RECV_NODE on the NPU, timed by the device kernels or
  gloo work it ran (Kineto), typed and sized from its arguments (chakra_core.convert.comms);
- each device kernel / memcpy / memset Kineto attributes to an operator -> a COMP_NODE on the
  NPU with its measured duration;
- a `chakra::pg=` annotation (the recorder's wrapper of one torch.distributed call) -> a
  COMP_NODE on the CPU just before the call's communication node, holding the call's host
  time; the first gloo:* node of a blocking call -> a COMP_NODE on the CPU just after it,
  holding the call's own duration (chakra_core.convert.hosttime, job.keep_own_time;
  docs/ingestion.md, 'Time of communication calls');
- thread roots and the wrappers inside a communication op are structure: they are collapsed
  and counted (the host time of the wrappers goes to the annotation, or to the nearest kept
  node on their thread).

Dependencies, every one from an earlier node to a later one (ids are entry order), so the
graph is acyclic by construction:
- ctrl_deps: program order per thread (each node after the previous one on its thread;
  a communication op that does not block its thread is a side branch), and stream order
  per device stream;
- data_deps: tensor producer -> consumer by storage (views share storages), a kernel on the
  operator that launched it, a `wait` on the collective it waits for, and the first node a
  thread started after a gloo isend/irecv span on it ended on that communication.
"""

from __future__ import annotations

import bisect
import json
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from chakra_core.convert import comms, deps, devicesync, hosttime, threadwait
from chakra_core.convert.groups import (
    WORLD,
    ProcessGroups,
    parse_pg_init,
    simulator_names,
)
from chakra_core.convert.kineto import DeviceEvent, KinetoTrace, Linked, link
from chakra_core.convert.noderows import NodeRows
from chakra_core.convert.pytorch_et import (
    PG_INIT_NAME,
    ROOT_NAME,
    HostTrace,
    tensor_nbytes,
    tensors_in,
)
from chakra_core.errors import ChakraFormatError
from chakra_core.format.nodetypes import COLL, COMP, METADATA, RECV, SEND
from chakra_core.format.schema import et_def_pb2 as pb

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

    def to_dict(self) -> dict:
        return {"path": self.path, "rank": self.rank, "schema": self.schema, "host_nodes": self.host_nodes,
                "counts": dict(self.counts), "notes": list(self.notes), "time_us": dict(self.time_us)}


class RankConversion:
    """Analyse a rank's host trace (roles, communication ops, Kineto links), then emit it."""

    def __init__(self, host: HostTrace, kineto: KinetoTrace | None, rank: int):
        self.host = host
        self.kineto = kineto
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
        self.launchers_in_comm: dict[int, list[int]] = {}  # anchor -> host nodes whose device work it owns
        self.call_time = hosttime.CallTime()  # host and blocked time of communication calls (hosttime.py)
        self.own_time: dict[int, float] = {}  # anchor -> µs of the collective's own duration kept as host time
        self.blocking: set[int] = set()  # anchors whose call returned only once their (measured) work had ended
        self.work: dict[int, tuple[float, float]] = {}  # anchor -> (start, end) of its gloo work
        self.thread_waits: list[threadwait.ThreadWait] = []  # a thread waiting for another's operators
        self.device_waits: list[devicesync.DeviceWait] = []  # a thread waiting for device work
        self.kernel_id_of: dict[int, int] = {}  # id(DeviceEvent) -> the id of its node
        self.comm_waits: dict[int, DeviceEvent] = {}  # anchor -> device work its device-side work waits for
        self.device_work: list[tuple[int, DeviceEvent]] = []  # (launcher index, event) of the device nodes
        if kineto is not None:
            self.linked = link(host.names, host.attr_columns["rf_id"], host.attr_columns["tid"], host.ids, kineto)
            self.report.notes.extend(self.linked.report.lines())
            for k in self.linked.device:  # device work launched inside a communication op is its duration
                if self.anchor_of[k] >= 0:
                    self.launchers_in_comm.setdefault(self.anchor_of[k], []).append(k)
            self.call_time = self._account_call_time()
            operators = [e for i, e in self.linked.cpu.items() if self.role[i] == OP]
            cut = hosttime.remove_waiting_between_ops(self.call_time, self.kineto.after_children, self.work, operators)
            self.thread_waits = threadwait.remove_waiting_for_threads(self.kineto.after_children, operators, cut,
                                                                      self.call_time.totals)
            self.device_work = self._device_work()
            eligible = [d for _, d in self.device_work]
            self.device_waits = devicesync.remove_waiting_for_device(self.kineto.runtime, operators, eligible,
                                                                     self.call_time.totals)
            in_comm = {a: self.linked.cpu[a] for a in self.launchers_in_comm if a in self.linked.cpu}
            self.comm_waits = devicesync.communication_waits(in_comm, self.kineto.runtime, eligible)
            hosttime.keep_gaps_between_steps(self.call_time, self.kineto.cpu, self.linked.cpu,
                                             lambda i: self.role[i] == OP)
        else:
            self.report.notes.append("no Kineto trace: durations are 0 and device kernels are absent")
        self.records = self._comm_records()

    # ---------------------------------------------------------------- structure
    def _parents(self, ids: np.ndarray) -> list[int]:
        """Host index of each node's parent (-1: none), found with one sorted search."""
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
        parent = index.tolist()
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
        return hosttime.account(self.linked.cpu, self.kineto.cpu, collapsed, self.anchor_of, self.parent,
                                lambda i: role[i] == OP or role[i] == ANNOTATION, work)

    def _host_durations(self, row_of_host: np.ndarray, own_nodes: dict[int, int], start: np.ndarray,
                        duration: np.ndarray) -> None:
        """Start and duration of the host rows: exclusive CPU time plus the host time of the nodes
        collapsed into them; annotations and gloo nodes kept for a call's own duration hold only that."""
        host_time = dict(self.call_time.host)
        placed = set(own_nodes.values())
        for anchor, own in self.own_time.items():
            target = self.call_time.target_of.get(anchor)
            if anchor not in placed and target is not None:
                host_time[target] = host_time.get(target, 0.0) + own
        for i, event in self.linked.cpu.items():
            row = row_of_host[i]
            if row >= 0:
                holds_call_time = self.role[i] == ANNOTATION or i in own_nodes
                exclusive = 0.0 if holds_call_time else event.exclusive
                start[row], duration[row] = int(event.ts), int(round(exclusive + host_time.get(i, 0.0)))
        for g, anchor in own_nodes.items():
            duration[row_of_host[g]] = int(round(self.own_time[anchor]))
        self.report.time_us, note = hosttime.summary(self.call_time, sum(self.own_time.values()))
        if note:
            self.report.notes.append(note)

    def _own_time_nodes(self) -> dict[int, int]:
        """gloo node -> anchor, for each blocking call whose own duration is kept (hosttime.own_time_nodes)."""
        if not self.own_time:
            return {}
        blocking = [a for a in self.own_time if (self.comm[a].blocking if self.comm[a].blocking is not None
                                                 else a in self.blocking)]
        kept = [i for i in self.order.tolist() if self.role[i] in (OP, ANNOTATION, ANCHOR, META)]
        return hosttime.own_time_nodes(blocking, {a: self._gloo_nodes(a) for a in blocking}, kept, self.host.ids,
                                       self.host.attr_columns["tid"], self.linked.cpu)

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

    def _resumed_rows(self, row_of_host: np.ndarray, index: np.ndarray) -> tuple[list, list]:
        """The rows that go on after a wait: (row, row waited for) after the gloo send/recv spans on
        their calling threads (their communication node) and after waits for other threads'
        operators; (row, device event waited for) after synchronisations (hosttime.resumed_after)."""
        resumes = [(self.linked.cpu[a].tid, end, int(row_of_host[a])) for a, end in self.call_time.resumes.items()]
        if self.thread_waits:
            index_of = {id(e): i for i, e in self.linked.cpu.items()}
            resumes += [(w.tid, w.resumed_at, int(row_of_host[index_of[id(w.waited_for)]]))
                        for w in self.thread_waits]
        device = [(w.tid, w.resumed_at, -1) for w in self.device_waits]
        if not resumes and not device:
            return [], []
        rows = hosttime.resumed_after(resumes + device, self.linked.cpu, index.tolist(), lambda i: self.role[i] != ANCHOR)
        host_waits = [(row, waited) for row, (_, _, waited) in zip(rows, resumes) if row is not None and waited >= 0]
        device_waits = [(row, w.waited_for) for row, w in zip(rows[len(resumes):], self.device_waits) if row is not None]
        return host_waits, device_waits

    def _comm_time(self, anchor: int) -> tuple[int, int]:
        """(start, duration) of a communication op: the span of its gloo work or device kernels."""
        if not self.linked:
            return 0, 0
        spans = []
        for g in self._gloo_nodes(anchor):
            event = self.linked.cpu.get(g)
            if event is not None:
                spans.append((event.ts, event.ts + event.dur))
        for k in self.launchers_in_comm.get(anchor, ()):
            spans.extend((d.ts, d.ts + d.dur) for d in self.linked.device[k])
        if not spans:
            return 0, 0
        start, end = min(s for s, _ in spans), max(e for _, e in spans)
        return int(start), max(1, int(round(end - start)))

    # ---------------------------------------------------------------- emit
    def emit(self, resolved: dict[int, tuple[str, str]] | None = None, job_groups: ProcessGroups | None = None
             ) -> tuple[pa.Table, pb.GlobalMetadata]:
        """The node table and metadata. `resolved` maps anchor index -> (pg_name, source) for
        groups inferred across ranks; `job_groups` is the union of every rank's groups."""
        groups = job_groups or self.groups
        sim_names = simulator_names(groups)
        self._name_groups(resolved)
        host, counts = self.host, self.report.counts
        role = np.asarray(self.role, np.int8)
        kept = (role == OP) | (role == META) | (role == ANCHOR) | (role == ANNOTATION)
        own_nodes = self._own_time_nodes()  # gloo node -> its anchor: the call's own duration, after the call
        if own_nodes:
            kept[list(own_nodes)] = True
        rows = NodeRows(self.order[kept[self.order]])
        index = rows.host_index
        row_of_host = np.full(len(host), -1, np.int64)
        row_of_host[index] = np.arange(len(index))
        types = np.full(len(index), COMP, np.int32)
        advances = np.ones(len(index), bool)
        start, duration = np.zeros(len(index), np.int64), np.zeros(len(index), np.int64)
        if self.linked:
            self._host_durations(row_of_host, own_nodes, start, duration)
        if self.pg_init_index is not None and row_of_host[self.pg_init_index] >= 0:
            row = row_of_host[self.pg_init_index]
            types[row] = METADATA
            rows.inputs_override[row] = self._metadata_inputs(sim_names)
            counts["metadata nodes"] += 1
        comm_roles = Counter()
        seq_row: dict[int, int] = {}  # record_param_comms sequence number -> row of its collective
        for record in self.records:
            i, row = record.index, row_of_host[record.index]
            op = self.comm[i]
            start[row], duration[row] = self._comm_time(i)
            types[row] = self._add_comm(rows, row, i, op, record, sim_names, groups)
            advances[row] = bool(op.blocking) if op.blocking is not None else i in self.blocking
            if op.seq is not None:
                seq_row[op.seq] = row
            comm_roles[comms.kind_label(op.kind)] += 1
        rows.types, rows.start, rows.duration = types, start, duration
        threads = np.frombuffer(host.attr_columns["tid"], np.int64)[index] if len(index) else np.zeros(0, np.int64)
        if own_nodes:  # on the calling thread, after its communication node
            threads = threads.copy()
            for g, anchor in own_nodes.items():
                threads[row_of_host[g]] = host.attr_columns["tid"][anchor]
        rows.ctrl = deps.program_order(threads, advances)
        read_rows, read_keys = deps.csr_rows(np.frombuffer(host.read_ends, np.int64), row_of_host,
                                             np.frombuffer(host.reads, np.int64))
        write_rows, write_keys = deps.csr_rows(np.frombuffer(host.write_ends, np.int64), row_of_host,
                                               np.frombuffer(host.writes, np.int64))
        readers, writers = deps.tensor_flow(read_rows, read_keys, write_rows, write_keys)
        waits = [(row_of_host[i], seq_row[seq]) for i, seq in self.waits.items()
                 if seq in seq_row and row_of_host[i] > seq_row[seq]]
        host_waits, device_waits = self._resumed_rows(row_of_host, index)
        waits.extend(host_waits)
        if waits:
            readers = np.r_[readers, [w[0] for w in waits]]
            writers = np.r_[writers, [w[1] for w in waits]]
        rows.data = (readers, writers)
        self._count_nodes(types, len(own_nodes), comm_roles)
        self._add_kernels(rows, counts)
        device_waits += [(row_of_host[a], work) for a, work in self.comm_waits.items() if row_of_host[a] >= 0]
        rows.device_deps = [(row, self.kernel_id_of[id(work)]) for row, work in device_waits]
        if self.comm_waits:
            counts["communication ops after the device work launched before them"] = len(self.comm_waits)
        _keep_innermost_num_ops(rows, self.parent, host)
        return rows.table(host), self._metadata(sim_names)

    def _name_groups(self, resolved: dict[int, tuple[str, str]] | None) -> None:
        """Every communication op's process group: its own, else one inferred across ranks
        (`resolved`), else the world group; the report's notes say which came from where."""
        for record in self.records:
            if record.pg_name is None and resolved and record.index in resolved:
                record.pg_name, record.pg_source = resolved[record.index]
            if record.pg_name is None:
                record.pg_name, record.pg_source = WORLD, "assumed world"
        sources = Counter(r.pg_source for r in self.records)
        if sources:
            self.report.notes.append("process group of each communication op: " +
                                     ", ".join(f"{n} from {s}" for s, n in sorted(sources.items())))
        if sources.get("assumed world"):
            self.report.notes.append(f"{sources['assumed world']} communication op(s) did not say their process"
                                     " group and none could be inferred: assumed the world group")

    def _count_nodes(self, types: np.ndarray, own_nodes: int, comm_roles: Counter) -> None:
        """The report's counts of what the host nodes became."""
        counts = self.report.counts
        counts["operators"] = int(np.count_nonzero(types == COMP))
        dropped = Counter(self.role)
        for role_kind, label in ((ROOT, "thread/process roots dropped"),
                                 (ANNOTATION, "process-group annotations kept as CPU nodes")):
            if dropped[role_kind]:
                counts[label] = dropped[role_kind]
        if dropped[WRAPPED] + dropped[GLOO] - own_nodes:
            counts["nodes inside communication ops collapsed"] = dropped[WRAPPED] + dropped[GLOO] - own_nodes
        if own_nodes:
            counts["gloo nodes kept as CPU nodes (a call's own duration)"] = own_nodes
        for label, n in sorted(comm_roles.items()):
            counts[f"communication: {label}"] = n

    def _add_comm(self, rows: NodeRows, row: int, i: int, op: comms.CommOp, record: CommRecord,
                  sim_names: dict[str, str], groups: ProcessGroups) -> int:
        """The communication attributes of row `row`; returns its node type."""
        members = groups.members(record.pg_name)
        size = self._checked_size(i, op.size * len(members)) if op.kind == comms.SCATTER and members else op.size
        node_type = SEND if op.kind == comms.SEND else RECV if op.kind == comms.RECV else COLL
        attrs = {"comm_size": size, "pg_name": sim_names.get(record.pg_name, record.pg_name)}
        if node_type == COLL:
            attrs["comm_type"] = op.kind
        else:
            peer = None
            if op.peer is not None:
                peer = members[op.peer] if members and 0 <= op.peer < len(members) else op.peer
            if peer is None:
                self.report.notes.append(f"node {record.node_id}: {self.host.names[i]} does not name its peer")
                peer = -1
            src, dst = (self.rank, peer) if node_type == SEND else (peer, self.rank)
            attrs.update(comm_src=src, comm_dst=dst, comm_tag=op.tag)
        rows.comm[row] = attrs
        return node_type

    def _device_work(self) -> list[tuple[int, DeviceEvent]]:
        """(launcher index, device event) of the device work that becomes nodes: all but that of
        communication ops (their duration) and of thread roots and annotations."""
        return [(i, d) for i, events in self.linked.device.items()
                if self.anchor_of[i] < 0 and self.role[i] not in (ROOT, ANNOTATION) for d in events]

    def _add_kernels(self, rows: NodeRows, counts: Counter) -> None:
        if not self.linked:
            return
        if folded := sum(len(events) for i, events in self.linked.device.items() if self.anchor_of[i] >= 0):
            counts["device events folded into communication nodes"] = folded
        launched = sorted(((d.ts, self.host.ids[i], d) for i, d in self.device_work), key=lambda x: (x[0], x[1]))
        next_id = (max(self.host.ids) + 1) if len(self.host) else 0
        last_on_stream: dict[int, int] = {}
        for ts, launcher_id, d in launched:
            rows.kernels.append((next_id, d, launcher_id, last_on_stream.get(d.stream)))
            self.kernel_id_of[id(d)] = next_id
            last_on_stream[d.stream] = next_id
            next_id += 1
        if launched:
            counts["device kernels"] = len(launched)

    def _metadata_inputs(self, sim_names: dict[str, str]) -> tuple[str, str, str]:
        """ASTRA-sim strips the first and last two characters of inputs.values and parses the rest
        as a JSON list of {pg_name, ranks}: the Python-literal form ['<json>']."""
        groups = []
        for name, group in self.groups.groups.items():
            whole_world = self.groups.world_size is not None and group.ranks == list(range(self.groups.world_size))
            groups.append({"pg_name": sim_names.get(name, name), "pg_desc": group.desc,
                           "backend_config": group.backend, "ranks": [] if whole_world else group.ranks,
                           "group_size": len(group.ranks)})
        return "['" + json.dumps(groups) + "']", "[[]]", '["String"]'

    def _metadata(self, sim_names: dict[str, str]) -> pb.GlobalMetadata:
        meta = pb.GlobalMetadata(version="0.0.4")
        fields = self.host.fields

        def attr(name: str, **value) -> None:
            meta.attr.append(pb.AttributeProto(name=name, **value))

        attr("schema", string_val=str(self.host.schema))
        for key in ("pid", "start_ts", "finish_ts"):
            if type(fields.get(key)) is int and fields[key] >= 0:
                attr(key, uint64_val=fields[key])
        if isinstance(fields.get("time"), str):
            attr("time", string_val=fields["time"])
        attr("rank", int64_val=self.rank)
        attr("converter", string_val="chakra-fleet convert")
        renamed = {k: v for k, v in sim_names.items() if k != v}
        if renamed:
            attr("pg_name_map", string_val=json.dumps(renamed))
        attr("conversion_report", string_val=json.dumps(self.report.to_dict()))
        return meta


def _input_bytes(node: dict) -> int:
    return sum(map(tensor_nbytes, tensors_in((node.get("inputs") or {}).get("values") or [], [])))


def _cut_parent_cycles(parent: list[int]) -> list[int]:
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


def _keep_innermost_num_ops(rows: NodeRows, parent: list[int], host: HostTrace) -> None:
    """aten::linear wraps aten::addmm: only the innermost op with an estimate keeps num_ops."""
    counted = {i for i, ops in enumerate(host.num_ops) if ops >= 0}
    for i in counted:
        p, steps = parent[i], 0
        while p >= 0 and steps < MAX_ANCESTOR_WALK:
            if p in counted:
                rows.no_num_ops.add(p)
            p, steps = parent[p], steps + 1
