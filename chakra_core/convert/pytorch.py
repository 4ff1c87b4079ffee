"""Convert one rank's PyTorch execution trace (+ optional Kineto trace) to a Chakra node table.

What becomes what:
- every operator node -> a COMP_NODE on the CPU (is_cpu_op) whose duration is the op's
  exclusive CPU time from Kineto (0 without Kineto), with num_ops / tensor_size where the
  shapes allow (chakra_core.convert.opcost);
- `## process_group:init ##` -> a METADATA_NODE whose inputs.values is the Python-literal
  form ASTRA-sim parses (`['<json>']`, CHAKRA_ET_FACTS.md section 1.4);
- a communication op (c10d::*, with its record_param_comms / nccl:* / gloo:* wrappers) -> ONE
  COMM_COLL_NODE, COMM_SEND_NODE or COMM_RECV_NODE on the NPU, timed by the device kernels or
  gloo work it ran (Kineto), typed and sized from its arguments (chakra_core.convert.comms);
- each device kernel / memcpy / memset Kineto attributes to an operator -> a COMP_NODE on the
  NPU with its measured duration;
- thread roots, `chakra::pg=` annotations and the wrappers inside a communication op are
  structure, not work: they are collapsed and counted.

Dependencies, every one from an earlier node to a later one (ids are entry order), so the
graph is acyclic by construction:
- ctrl_deps: program order per thread (each node after the previous one on its thread;
  a communication op that does not block its thread is a side branch), and stream order
  per device stream;
- data_deps: tensor producer -> consumer by storage (views share storages), a kernel on the
  operator that launched it, and a `wait` on the collective it waits for.
"""

from __future__ import annotations

import bisect
import json
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from chakra_core.columns import NODE_TYPE_VALUES
from chakra_core.convert import comms
from chakra_core.convert.groups import WORLD, ProcessGroups, parse_pg_init, simulator_names
from chakra_core.convert.kineto import KinetoTrace, Linked, link
from chakra_core.convert.pytorch_et import PG_INIT_NAME, ROOT_NAME, HostTrace
from chakra_core.schema import et_def_pb2 as pb

COMP, METADATA = NODE_TYPE_VALUES["COMP_NODE"], NODE_TYPE_VALUES["METADATA_NODE"]
COLL, SEND, RECV = NODE_TYPE_VALUES["COMM_COLL_NODE"], NODE_TYPE_VALUES["COMM_SEND_NODE"], NODE_TYPE_VALUES["COMM_RECV_NODE"]
PG_ANNOTATION_PREFIX = "chakra::pg="  # chakra_core.collect.PG_ANNOTATION_PREFIX (no torch import here)

# node roles
OP, ROOT, ANNOTATION, META, ANCHOR, WRAPPED, GLOO = range(7)
MAX_ANCESTOR_WALK = 64


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

    def to_dict(self) -> dict:
        return {"path": self.path, "rank": self.rank, "schema": self.schema, "host_nodes": self.host_nodes,
                "counts": dict(self.counts), "notes": list(self.notes)}


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
        self.index_of_id = {nid: i for i, nid in enumerate(host.ids)}
        self.parent = self._parents()
        self.role = [OP] * n
        self.anchor_of = [-1] * n
        self.comm: dict[int, comms.CommOp] = {}
        self.gloo_of: dict[int, list[int]] = {}
        self.waits: dict[int, int] = {}  # wait node index -> sequence number
        self.groups = ProcessGroups()
        self.pg_init_index: int | None = None
        self._classify()
        self.linked: Linked | None = None
        if kineto is not None:
            self.linked = link(host.names, host.attr_columns["rf_id"], host.attr_columns["tid"], host.ids, kineto)
            self.report.notes.extend(self.linked.report.lines())
        else:
            self.report.notes.append("no Kineto trace: durations are 0 and device kernels are absent")
        self.records = self._comm_records()

    # ---------------------------------------------------------------- structure
    def _parents(self) -> list[int]:
        host = self.host
        parent = [-1] * len(host)
        dangling = 0
        for i, p in enumerate(host.parents):
            if p < 0 or p == host.ids[i]:  # the process root names itself as its parent
                continue
            j = self.index_of_id.get(p, -1)
            if j < 0:
                dangling += 1
            parent[i] = j
        if dangling:
            self.report.notes.append(f"{dangling:,} nodes name a parent (ctrl_deps) that is not in the trace;"
                                     " they are treated as top-level")
        cut = _cut_parent_cycles(parent)
        for i in cut:
            self.report.counts["parent cycle cut"] += 1
        if cut:
            ids = ", ".join(str(self.host.ids[i]) for i in cut[:5])
            self.report.notes.append(f"the parent (ctrl_deps) links form {len(cut)} cycle(s); cut at node(s) {ids}")
        return parent

    def _classify(self) -> None:
        host, role, anchor_of, parent = self.host, self.role, self.anchor_of, self.parent
        gloo_nodes = []
        for i in self.order.tolist():
            name = host.names[i]
            p = parent[i]
            inherited = anchor_of[p] if p >= 0 else -1
            if ROOT_NAME.match(name):
                role[i] = ROOT
            elif name.startswith(PG_ANNOTATION_PREFIX):
                role[i] = ANNOTATION
            elif name == PG_INIT_NAME:
                role[i] = META
                self._read_pg_init(i)
            elif inherited >= 0:
                role[i] = WRAPPED
                anchor_of[i] = inherited
                self._absorb(inherited, i)
            elif name.startswith("gloo:"):
                role[i] = GLOO
                gloo_nodes.append(i)
            else:
                op = self._describe(i)
                if op is not None:
                    role[i] = ANCHOR
                    anchor_of[i] = i
                    self.comm[i] = op
                elif name == "record_param_comms":
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
            size = sum(map(_nbytes, _tensors(node)))
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
            self.comm[g] = comms.CommOp(kind, sum(map(_nbytes, _tensors(node))), None, source=self.host.names[g])

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
            records.append(CommRecord(i, self.host.ids[i], op.kind, op.size, pg, source, op.peer, op.tag))
        return records

    def unresolved_groups(self) -> list[CommRecord]:
        return [r for r in self.records if r.pg_name is None]

    # ---------------------------------------------------------------- timing
    def _cpu_time(self, i: int) -> tuple[int, int]:
        """(start, exclusive duration) in microseconds from Kineto, (0, 0) when not linked."""
        event = self.linked.cpu.get(i) if self.linked else None
        if event is None:
            return 0, 0
        return int(event.ts), int(round(event.exclusive))

    def _comm_time(self, anchor: int) -> tuple[int, int, bool | None]:
        """(start, duration, blocking) of a communication op: the span of its gloo work or device
        kernels; blocking when its CPU op lasted until that work ended."""
        if not self.linked:
            return 0, 0, None
        spans = []
        for g in self.gloo_of.get(anchor, ()):
            event = self.linked.cpu.get(g)
            if event is not None:
                spans.append((event.ts, event.ts + event.dur))
        for k in self._subtree_with_kernels(anchor):
            spans.extend((d.ts, d.ts + d.dur) for d in self.linked.device.get(k, ()))
        if not spans:
            return 0, 0, None
        start, end = min(s for s, _ in spans), max(e for _, e in spans)
        cpu = self.linked.cpu.get(anchor)
        blocking = None if cpu is None or not self.gloo_of.get(anchor) else cpu.ts + cpu.dur >= end - 1.0
        return int(start), max(1, int(round(end - start))), blocking

    def _subtree_with_kernels(self, anchor: int) -> list[int]:
        if not self.linked or not self.linked.device:
            return []
        return [k for k in self.linked.device if self.anchor_of[k] == anchor]

    # ---------------------------------------------------------------- emit
    def emit(self, resolved: dict[int, tuple[str, str]] | None = None, job_groups: ProcessGroups | None = None
             ) -> tuple[pa.Table, pb.GlobalMetadata]:
        """The node table and metadata. `resolved` maps anchor index -> (pg_name, source) for
        groups inferred across ranks; `job_groups` is the union of every rank's groups."""
        groups = job_groups or self.groups
        sim_names = simulator_names(groups)
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
        rows = _Rows()
        host, counts = self.host, self.report.counts
        tid = host.attr_columns["tid"]
        chain: dict[int, int] = {}  # thread id -> id of the last node its next node must follow
        writer: dict[int, int] = {}  # storage key -> id of the last node that wrote it
        seq_node: dict[int, int] = {}  # record_param_comms sequence number -> comm node id
        record_of = {r.index: r for r in self.records}
        host_rows: list[int] = []
        comm_roles = Counter()
        reads, read_ends, writes, write_ends = host.reads, host.read_ends, host.writes, host.write_ends
        for i in self.order.tolist():
            role = self.role[i]
            if role in (ROOT, ANNOTATION, WRAPPED, GLOO):
                counts[{ROOT: "thread/process roots dropped", ANNOTATION: "process-group annotations dropped",
                        WRAPPED: "nodes inside communication ops collapsed", GLOO: "nodes inside communication ops collapsed"}[role]] += 1
                continue
            nid = host.ids[i]
            r0 = read_ends[i - 1] if i else 0
            data = {writer[s] for s in reads[r0:read_ends[i]] if s in writer}
            ctrl = chain.get(tid[i])
            if role == META:
                rows.add_host(i, host, METADATA, ctrl, data, 0, 0, is_cpu=True)
                rows.inputs_override[len(rows.ids) - 1] = self._metadata_inputs(sim_names)
                chain[tid[i]] = nid
                counts["metadata nodes"] += 1
            elif role == ANCHOR:
                op, record = self.comm[i], record_of[i]
                start, duration, measured_blocking = self._comm_time(i)
                blocking = op.blocking if op.blocking is not None else bool(measured_blocking)
                self._add_comm(rows, i, op, record, ctrl, data, start, duration, sim_names, groups)
                if op.seq is not None:
                    seq_node[op.seq] = nid
                if blocking:
                    chain[tid[i]] = nid
                comm_roles[_comm_label(op.kind)] += 1
            else:
                start, duration = self._cpu_time(i)
                if i in self.waits and self.waits[i] in seq_node:
                    data.add(seq_node[self.waits[i]])
                rows.add_host(i, host, COMP, ctrl, data, start, duration, is_cpu=True)
                chain[tid[i]] = nid
                counts["operators"] += 1
            host_rows.append(i)
            w0 = write_ends[i - 1] if i else 0
            for s in writes[w0:write_ends[i]]:
                writer[s] = nid
        for label, n in sorted(comm_roles.items()):
            counts[f"communication: {label}"] = n
        n_host_rows = len(rows.ids)
        self._add_kernels(rows, counts)
        _keep_innermost_num_ops(rows, self.parent)
        table = rows.table(host, host_rows, n_host_rows)
        return table, self._metadata(sim_names)

    def _add_comm(self, rows: "_Rows", i: int, op: comms.CommOp, record: CommRecord, ctrl, data, start, duration,
                  sim_names: dict[str, str], groups: ProcessGroups) -> None:
        members = groups.members(record.pg_name)
        size = op.size
        if op.kind == comms.SCATTER and members:
            size = op.size * len(members)
        node_type = SEND if op.kind == comms.SEND else RECV if op.kind == comms.RECV else COLL
        rows.add_host(i, self.host, node_type, ctrl, data, start, duration, is_cpu=False)
        row = len(rows.ids) - 1
        rows.comm_size[row] = size
        rows.pg_name[row] = sim_names.get(record.pg_name, record.pg_name)
        rows.num_ops[row] = None
        rows.tensor_size[row] = None
        if node_type == COLL:
            rows.comm_type[row] = op.kind
            return
        peer = None
        if op.peer is not None:
            peer = members[op.peer] if members and 0 <= op.peer < len(members) else op.peer
        if peer is None:
            self.report.notes.append(f"node {record.node_id}: {self.host.names[i]} does not name its peer")
            peer = -1
        src, dst = (self.rank, peer) if node_type == SEND else (peer, self.rank)
        rows.comm_src[row], rows.comm_dst[row], rows.comm_tag[row] = src, dst, op.tag

    def _add_kernels(self, rows: "_Rows", counts: Counter) -> None:
        if not self.linked:
            return
        launched = []
        for i, events in self.linked.device.items():
            if self.anchor_of[i] >= 0:  # the device work of a communication op is that op's duration
                counts["device events folded into communication nodes"] += len(events)
                continue
            if self.role[i] in (ROOT, ANNOTATION):
                continue
            launched.extend((d.ts, self.host.ids[i], d) for d in events)
        launched.sort(key=lambda x: (x[0], x[1]))
        next_id = (max(self.host.ids) + 1) if len(self.host) else 0
        last_on_stream: dict[int, int] = {}
        for ts, launcher_id, d in launched:
            ctrl = last_on_stream.get(d.stream)
            rows.add_kernel(next_id, d, launcher_id, ctrl)
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


class _Rows:
    """Column lists of the output table."""

    def __init__(self):
        self.ids, self.names, self.types = [], [], []
        self.ctrl, self.data, self.start, self.duration = [], [], [], []
        self.is_cpu, self.num_ops, self.tensor_size = [], [], []
        self.comm_type, self.comm_size, self.comm_src, self.comm_dst, self.comm_tag, self.pg_name = [], [], [], [], [], []
        self.host_index, self.stream, self.kernel_rows = [], [], []
        self.inputs_override: dict[int, tuple[str, str, str]] = {}

    def _add(self, nid, name, node_type, ctrl, data, start, duration, is_cpu, stream=None, host_index=-1):
        self.ids.append(nid)
        self.names.append(name)
        self.types.append(node_type)
        self.ctrl.append([ctrl] if ctrl is not None else [])
        data.discard(ctrl)
        self.data.append(sorted(data) if len(data) > 1 else list(data))
        self.start.append(start)
        self.duration.append(duration)
        self.is_cpu.append(is_cpu)
        self.host_index.append(host_index)
        self.stream.append(stream)
        for column in (self.comm_type, self.comm_size, self.comm_src, self.comm_dst, self.comm_tag, self.pg_name):
            column.append(None)

    def add_host(self, i, host: HostTrace, node_type, ctrl, data, start, duration, is_cpu):
        self._add(host.ids[i], host.names[i], node_type, ctrl, data, start, duration, is_cpu, host_index=i)
        ops = host.num_ops[i]
        self.num_ops.append(ops if ops >= 0 and node_type == COMP else None)
        self.tensor_size.append(host.tensor_bytes[i] if node_type == COMP and ops >= 0 else None)

    def add_kernel(self, nid, d, launcher_id, ctrl):
        self._add(nid, d.name, COMP, ctrl, {launcher_id}, int(d.ts), max(0, int(round(d.dur))), False, stream=d.stream)
        self.num_ops.append(None)
        self.tensor_size.append(None)

    def table(self, host: HostTrace, host_rows: list[int], n_host_rows: int) -> pa.Table:
        n = len(self.ids)
        io = pa.concat_arrays(host.io_chunks) if host.io_chunks else None
        if io is not None and host_rows:
            taken = io.take(pa.array(host_rows, pa.int64()))
            inputs = taken.field("inputs")
            outputs = taken.field("outputs")
        else:
            inputs = outputs = pa.nulls(0, _IO)
        for row, (values, shapes, types) in sorted(self.inputs_override.items()):  # a row or two: splice
            replacement = pa.array([{"values": values, "shapes": shapes, "types": types}], _IO)
            inputs = pa.concat_arrays([inputs.slice(0, row).cast(_IO), replacement, inputs.slice(row + 1).cast(_IO)])
        pad = n - n_host_rows
        if pad:
            inputs = pa.concat_arrays([inputs.cast(_IO), pa.nulls(pad, _IO)])
            outputs = pa.concat_arrays([outputs.cast(_IO), pa.nulls(pad, _IO)])
        cols = host.attr_columns
        host_attr = lambda values: [values[i] if i >= 0 else None for i in self.host_index]  # noqa: E731
        return pa.table({
            "id": pa.array(self.ids, pa.uint64()),
            "name": pa.array(self.names, pa.string()),
            "type": pa.array(self.types, pa.int32()),
            "ctrl_deps": pa.array(self.ctrl, pa.list_(pa.uint64())),
            "data_deps": pa.array(self.data, pa.list_(pa.uint64())),
            "start_time_micros": pa.array(self.start, pa.uint64()),
            "duration_micros": pa.array(self.duration, pa.uint64()),
            "inputs": inputs.cast(_IO),
            "outputs": outputs.cast(_IO),
            "is_cpu_op": pa.array(self.is_cpu, pa.bool_()),
            "num_ops": pa.array(self.num_ops, pa.int64()),
            "tensor_size": pa.array(self.tensor_size, pa.uint64()),
            "comm_type": pa.array(self.comm_type, pa.int64()),
            "comm_size": pa.array(self.comm_size, pa.int64()),
            "comm_src": pa.array(self.comm_src, pa.int64()),
            "comm_dst": pa.array(self.comm_dst, pa.int64()),
            "comm_tag": pa.array(self.comm_tag, pa.int64()),
            "pg_name": pa.array(self.pg_name, pa.string()),
            **{k: pa.array(host_attr(cols[k]), pa.int64()) for k in ("rf_id", "fw_parent", "seq_id", "scope", "tid", "fw_tid")},
            "stream": pa.array(self.stream, pa.int64()),
            "op_schema": pa.array(host_attr(host.op_schemas), pa.string()),
        })


_IO = pa.struct([("values", pa.string()), ("shapes", pa.string()), ("types", pa.string())])


def _tensors(node: dict) -> list:
    from chakra_core.convert.pytorch_et import tensors_in

    return tensors_in((node.get("inputs") or {}).get("values") or [], [])


def _nbytes(tensor: list) -> int:
    return tensor[3] * tensor[4]


def _comm_label(kind) -> str:
    if kind in (comms.SEND, comms.RECV):
        return kind
    return pb.CollectiveCommType.Name(kind).lower()


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


def _keep_innermost_num_ops(rows: _Rows, parent: list[int]) -> None:
    """aten::linear wraps aten::addmm: only the innermost op with an estimate keeps num_ops."""
    counted = {rows.host_index[r] for r, ops in enumerate(rows.num_ops) if ops is not None}
    covered = set()
    for i in counted:
        p, steps = parent[i], 0
        while p >= 0 and steps < MAX_ANCESTOR_WALK:
            if p in counted:
                covered.add(p)
            p, steps = parent[p], steps + 1
    if covered:
        for r, i in enumerate(rows.host_index):
            if i in covered:
                rows.num_ops[r] = None
                rows.tensor_size[r] = None
