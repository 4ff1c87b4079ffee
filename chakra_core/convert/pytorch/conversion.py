"""Convert one rank's PyTorch execution trace (+ optional Kineto trace) to a Chakra node table.

RankConversion emits what analysis.RankAnalysis finds (each host node's role, the
communication ops, the Kineto links and the time of communication calls) as the node table.

What becomes what:
- every operator node -> a COMP_NODE on the CPU (is_cpu_op) whose duration is the op's
  exclusive CPU time from Kineto (0 without Kineto), with num_ops / tensor_size where the
  shapes allow (chakra_core.convert.pytorch.opcost);
- `## process_group:init ##` -> a METADATA_NODE whose inputs.values is the Python-literal
  form ASTRA-sim parses (`['<json>']`, docs/format.md, 'Communicator groups');
- a communication op (c10d::*, with its record_param_comms / nccl:* / gloo:* wrappers) -> ONE
  COMM_COLL_NODE, COMM_SEND_NODE or COMM_RECV_NODE on the NPU, timed by the device kernels or
  gloo work it ran (Kineto), typed and sized from its arguments (chakra_core.convert.pytorch.comms);
- each device kernel / memcpy / memset Kineto attributes to an operator -> a COMP_NODE on the
  NPU with its measured duration;
- a `chakra::pg=` annotation (the recorder's wrapper of one torch.distributed call) -> a
  COMP_NODE on the CPU just before the call's communication node, holding the call's host
  time; the first gloo:* node of a blocking call -> a COMP_NODE on the CPU just after it,
  holding the call's own duration (chakra_core.convert.pytorch.hosttime, job.keep_own_time;
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

import json
from collections import Counter
from collections.abc import Sequence
from operator import itemgetter

import numpy as np
import pyarrow as pa

from chakra_core.convert.pytorch import comms, deps, hosttime
from chakra_core.convert.pytorch.groups import WORLD, ProcessGroups, simulator_names
from chakra_core.convert.pytorch.noderows import Kernels, NodeRows
from chakra_core.convert.pytorch.analysis import (
    ANCHOR,
    ANNOTATION,
    GLOO,
    MAX_ANCESTOR_WALK,
    META,
    OP,
    ROOT,
    WRAPPED,
    CommRecord,
    RankAnalysis,
)
from chakra_core.convert.pytorch.et import HostTrace
from chakra_core.format.nodetypes import COLL, COMP, METADATA, RECV, SEND
from chakra_core.format.schema import et_def_pb2 as pb


class RankConversion(RankAnalysis):
    """A rank's analysed host trace (analysis.RankAnalysis), emitted as a node table."""

    # ---------------------------------------------------------------- timing
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
        events = self.cpu_columns
        rows = row_of_host[events.index]
        on_row = rows >= 0
        index, rows = events.index[on_row], rows[on_row]
        holds_call_time = np.asarray(self.role, np.int8)[index] == ANNOTATION
        if own_nodes:
            holds_call_time |= np.isin(index, np.fromiter(own_nodes, np.int64, len(own_nodes)))
        added = np.zeros(len(self.host))
        added[np.fromiter(host_time, np.int64, len(host_time))] = np.fromiter(host_time.values(), np.float64,
                                                                              len(host_time))
        # the same float sums and rounding (half to even) as int(round(exclusive + added)) per row
        start[rows] = events.ts[on_row].astype(np.int64)
        duration[rows] = np.rint(np.where(holds_call_time, 0.0, events.exclusive()[on_row]) + added[index])
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
    def _resumed_rows(self, row_of_host: np.ndarray) -> tuple[list, list]:
        """The rows that go on after a wait: (row, row waited for) after the gloo send/recv spans on
        their calling threads (their communication node) and after waits for other threads'
        operators; (row, device event waited for) after synchronisations (hosttime.resumed_after)."""
        if not self.call_time.resumes and not self.thread_waits and not self.device_waits:
            return [], []
        events = self.cpu_columns
        resumes = [(events.code(self.linked.cpu[a].tid), end, int(row_of_host[a]))
                   for a, end in self.call_time.resumes.items()]
        if self.thread_waits:
            waited = row_of_host[events.index_of([w.waited_for for w in self.thread_waits])].tolist()
            resumes += [(events.code(w.tid), w.resumed_at, row) for w, row in zip(self.thread_waits, waited)]
        device = [(events.code(w.tid), w.resumed_at, -1) for w in self.device_waits]
        rows = row_of_host[events.index]
        may_wait = (rows >= 0) & (np.asarray(self.role, np.int8)[events.index] != ANCHOR)
        rows = hosttime.resumed_after(resumes + device, events.thread[may_wait], events.ts[may_wait], rows[may_wait])
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
        """The node table and metadata (emit_rows, the table built whole)."""
        rows, metadata = self.emit_rows(resolved, job_groups)
        return rows.table(), metadata

    def emit_rows(self, resolved: dict[int, tuple[str, str]] | None = None, job_groups: ProcessGroups | None = None
                  ) -> tuple[NodeRows, pb.GlobalMetadata]:
        """The output rows (NodeRows: the node table batch by batch) and metadata. `resolved` maps
        anchor index -> (pg_name, source) for groups inferred across ranks; `job_groups` is the
        union of every rank's groups. The rows hold what they need of the host trace alone."""
        groups = job_groups or self.groups
        sim_names = simulator_names(groups)
        self._name_groups(resolved)
        host, counts = self.host, self.report.counts
        role = np.asarray(self.role, np.int8)
        kept = (role == OP) | (role == META) | (role == ANCHOR) | (role == ANNOTATION)
        own_nodes = self._own_time_nodes()  # gloo node -> its anchor: the call's own duration, after the call
        if own_nodes:
            kept[list(own_nodes)] = True
        rows = NodeRows(self.order[kept[self.order]], host)
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
        host_waits, device_waits = self._resumed_rows(row_of_host)
        waits.extend(host_waits)
        if waits:
            readers = np.r_[readers, [w[0] for w in waits]]
            writers = np.r_[writers, [w[1] for w in waits]]
        rows.data = (readers, writers)
        self._count_nodes(types, len(own_nodes), comm_roles)
        device_waits += [(row_of_host[a], work) for a, work in self.comm_waits.items() if row_of_host[a] >= 0]
        kernel_id_of = self._add_kernels(rows, counts, {id(work) for _, work in device_waits})
        rows.device_deps = [(row, kernel_id_of[id(work)]) for row, work in device_waits]
        if self.comm_waits:
            counts["communication ops after the device work launched before them"] = len(self.comm_waits)
        _keep_innermost_num_ops(rows, self.parent, host)
        parents = np.asarray(self.parent, np.int64)
        rows.children = np.bincount(parents[parents >= 0], minlength=len(host))
        return rows, self._metadata(sim_names)

    def release(self) -> None:
        """Drops the traces and what the analysis found in them, once the rows are emitted: a job
        goes on to use only each rank's number, groups, communication records and report
        (job.check_collectives, lacking_rank), and the rows are then encoded without the Kineto
        trace and the analysis beside them (the rows keep the host trace's columns they read)."""
        kept = {"rank", "groups", "records", "report"}
        for name in [n for n in vars(self) if n not in kept]:
            delattr(self, name)

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
            kinds = Counter(comms.kind_label(r.kind) for r in self.records if r.pg_source == "assumed world")
            self.report.notes.append(f"{sources['assumed world']} communication op(s) did not say their process"
                                     " group and none could be inferred: assumed the world group (" +
                                     ", ".join(f"{kind} {n:,}" for kind, n in sorted(kinds.items())) + ")")

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

    def _add_kernels(self, rows: NodeRows, counts: Counter, waited: set[int]) -> dict[int, int]:
        """The device work's rows, in launch order (start time, then the launcher's id), with new
        ids after the host's; returns the id of each event whose id() is in `waited`."""
        if not self.linked:
            return {}
        if folded := sum(len(events) for i, events in self.linked.device.items() if self.anchor_of[i] >= 0):
            counts["device events folded into communication nodes"] = folded
        work = self.device_work
        if not work:
            return {}
        ids = np.frombuffer(self.host.ids, np.int64)
        launchers = ids[np.fromiter(map(itemgetter(0), work), np.int64, len(work))]
        starts = np.fromiter((d.ts for _, d in work), np.float64, len(work))
        order = np.lexsort((launchers, starts))  # stable, as sorting by (start, launcher id)
        rows.kernels = Kernels.in_order(int(ids.max()) + 1, [work[w][1] for w in order.tolist()], launchers[order])
        counts["device kernels"] = len(work)
        return {id(d): node_id for node_id, d in zip(rows.kernels.ids.tolist(), rows.kernels.events)
                if id(d) in waited}

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


def _keep_innermost_num_ops(rows: NodeRows, parent: Sequence[int], host: HostTrace) -> None:
    """aten::linear wraps aten::addmm: only the innermost op with an estimate keeps num_ops."""
    counted = {i for i, ops in enumerate(host.num_ops) if ops >= 0}
    for i in counted:
        p, steps = parent[i], 0
        while p >= 0 and steps < MAX_ANCESTOR_WALK:
            if p in counted:
                rows.no_num_ops.add(p)
            p, steps = parent[p], steps + 1
