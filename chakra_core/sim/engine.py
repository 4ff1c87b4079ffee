"""Replays one Chakra ET per NPU on a modelled system: ASTRA-sim's workload layer.

Event-driven, one GraphFeeder per NPU (docs/simulator.md, 'Workload layer'):
- at tick 0 and after every node completion, an NPU visits its dependency-free nodes in
  ascending id order and issues each one whose hardware slot is free: one CPU op
  (is_cpu_op), one GPU compute node, and one GPU communication operation (collective,
  send, memory, metadata) at a time; receives take no slot;
- a compute node takes duration_micros x 1000 ns (0 becomes 1 ns), or its roofline time;
- a collective is matched across its group: the k-th collective an NPU issues in a group
  is the k-th of every member; each member starts it when it issues it, and messages sent
  to a member that has not yet issued it wait there (ASTRA-sim's holding). Congestion-
  unaware, nothing else touches its messages, so when the last member issues it every
  member's finish is known: CollectiveModel's closed form when all issued together, else
  its replay from each member's issue tick;
- a send completes when its message arrives; its receive then, or when it is posted if later;
- a job that cannot finish stops with a report of what every NPU waits for.

With mode="aware" every collective and every send is replayed message by message while the
job runs, on one AwareFabric (sim/aware.py) sharing this event queue, so traffic that shares
links contends; each member gets its own finish time. Where only all-NPU collectives exist,
a collective all members start in one tick on idle links and all finish together reuses
its replay alone (exact: no other traffic can reach the links before it ends). An
all-to-all starts when its last member issues it (its plan needs every member's size).

Collectives ASTRA-sim refuses (REDUCE, GATHER, SCATTER, REDUCE_SCATTER_BLOCK, BARRIER) are
timed as the ring-family collective that moves the same data (EXTENSIONS); memory nodes by
the local memory bandwidth (MEMORY_NOTE); the result's notes say which choices a run used.
"""

from __future__ import annotations

import math
from collections import defaultdict, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import pyarrow as pa

from chakra_core.format.columns import NODE_TYPE_VALUES
from chakra_core.format.etfile import table_source
from chakra_core.sim import breakdown
from chakra_core.sim.aware import AwareCollectiveModel, AwareFabric
from chakra_core.sim.collectives import (
    ALL_GATHER,
    ALL_REDUCE,
    ALL_TO_ALL,
    REDUCE_SCATTER,
    CollectiveModel,
    SimulationError,
)
from chakra_core.sim.config import NetworkConfig, SystemConfig
from chakra_core.sim.events import CALL, EventQueue
from chakra_core.sim.feeder import GraphFeeder
from chakra_core.sim.network import UnawareNetwork
from chakra_core.sim.replay import Instance, Replay

COMP = NODE_TYPE_VALUES["COMP_NODE"]
COLL = NODE_TYPE_VALUES["COMM_COLL_NODE"]
SEND = NODE_TYPE_VALUES["COMM_SEND_NODE"]
RECV = NODE_TYPE_VALUES["COMM_RECV_NODE"]
MEM_TYPES = (NODE_TYPE_VALUES["MEM_LOAD_NODE"], NODE_TYPE_VALUES["MEM_STORE_NODE"])
INSTANT_TYPES = (NODE_TYPE_VALUES["METADATA_NODE"], NODE_TYPE_VALUES["INVALID_NODE"])

# comm_type -> (the collective it is timed as, its name in results). ASTRA-sim refuses REDUCE,
# GATHER, SCATTER, REDUCE_SCATTER_BLOCK and BARRIER; they are timed here as the ring-family
# collective that moves the same data along the same steps, and the result says so (EXTENSIONS).
COLLECTIVE_OPS = {
    0: (ALL_REDUCE, "all_reduce"), 1: (ALL_REDUCE, "reduce"), 2: (ALL_GATHER, "all_gather"),
    3: (ALL_GATHER, "gather"), 4: (REDUCE_SCATTER, "scatter"), 6: (ALL_TO_ALL, "all_to_all"),
    7: (REDUCE_SCATTER, "reduce_scatter"), 8: (REDUCE_SCATTER, "reduce_scatter_block"), 9: (ALL_REDUCE, "barrier"),
}
EXTENSIONS = {
    "reduce": "REDUCE timed as an all-reduce (a pipelined ring reduce to the root takes the same steps)",
    "gather": "GATHER timed as an all-gather of the same per-NPU size",
    "scatter": "SCATTER timed as a reduce-scatter (an upper bound: it adds the local reduction cost)",
    "reduce_scatter_block": "REDUCE_SCATTER_BLOCK timed as a reduce-scatter",
    "barrier": "BARRIER timed as an all-reduce of the smallest size (one byte per NPU per chunk)",
    "uneven_all_to_all": "an all-to-all whose NPUs send different amounts (uneven splits) is timed at the largest"
                         " NPU's size",
}
MEMORY_NOTE = ("memory nodes timed as tensor_size bytes at local-mem-bw (an assumption: ASTRA-sim's remote "
               "memory timing is not modelled)")
BROADCAST = 5
DEFAULT_GROUP_NAMES = ("", "0")  # pg_name values that mean "all NPUs" to ASTRA-sim
PROGRESS_EVERY = 1 << 16  # completed nodes between progress reports: rare enough to cost nothing

# hardware slots
CPU, GPU_COMPUTE, GPU_COMM, NO_SLOT = 0, 1, 2, 3

# what a node does when issued
DO_COMPUTE, DO_COLLECTIVE, DO_REPLAY, DO_SEND, DO_RECV, DO_INSTANT = range(6)


class SimulationDeadlock(SimulationError):
    """The job can never finish; `report` says what each NPU waits for."""

    def __init__(self, report: dict[int, list[str]], partial: SimResult):
        self.report = report
        self.partial = partial
        lines = [f"NPU {npu}: {'; '.join(waits)}" for npu, waits in sorted(report.items())]
        super().__init__("the job cannot finish (deadlock):\n  " + "\n  ".join(lines))


@dataclass
class NpuResult:
    npu: int
    finish_ns: int = 0
    compute_ns: int = 0  # sum of GPU compute durations (what ASTRA-sim subtracts for "exposed")
    cpu_ns: int = 0
    nodes: int = 0
    comm_ns: dict[str, int] = field(default_factory=dict)  # collective / p2p time by type
    comm_bytes: dict[str, int] = field(default_factory=dict)
    time_by_category: dict[str, int] = field(default_factory=dict)  # sim/breakdown.py: adds up to finish_ns

    def add_comm(self, kind: str, nbytes: int, ns: int | None = None) -> None:
        """Counts bytes (and, for collectives, the time) of one communication of this kind."""
        if ns is not None:
            self.comm_ns[kind] = self.comm_ns.get(kind, 0) + ns
        self.comm_bytes[kind] = self.comm_bytes.get(kind, 0) + nbytes

    @property
    def exposed_comm_ns(self) -> int:
        """The time communication alone holds the NPU (sim/breakdown.py)."""
        return self.time_by_category.get("communication", 0)

    @property
    def astra_exposed_comm_ns(self) -> int:
        """ASTRA-sim's "exposed communication": finish time minus GPU compute time (host and idle
        time included), kept to compare with ASTRA-sim's output."""
        return self.finish_ns - self.compute_ns

    def to_dict(self) -> dict:
        return {"npu": self.npu, "finish_ns": self.finish_ns, "compute_ns": self.compute_ns,
                "exposed_comm_ns": self.exposed_comm_ns, "astra_exposed_comm_ns": self.astra_exposed_comm_ns,
                "cpu_ns": self.cpu_ns, "nodes": self.nodes,
                "comm_ns": dict(self.comm_ns), "comm_bytes": dict(self.comm_bytes),
                "time_by_category": dict(self.time_by_category)}


@dataclass(frozen=True)
class TimelineEvent:
    """One node's run on one NPU, for timelines (Perfetto) and overlap analysis."""

    npu: int
    node_id: int
    name: str
    track: str  # "compute" (GPU), "cpu", or "comm" (collectives, send/recv, metadata)
    kind: str  # "compute", "all_reduce", ..., "send", "recv", "broadcast", "instant"
    start_ns: int  # when the NPU issued it
    end_ns: int
    bytes: int = 0


@dataclass
class SimResult:
    mode: str
    npus: list[NpuResult]
    timeline: list[TimelineEvent] | None = None  # with Engine(record_timeline=True)
    notes: list[str] = field(default_factory=list)  # modelling choices beyond ASTRA-sim that this run used

    @property
    def finish_ns(self) -> int:
        return max((n.finish_ns for n in self.npus), default=0)

    def to_dict(self) -> dict:
        return {"mode": self.mode, "finish_ns": self.finish_ns, "notes": self.notes,
                "npus": [n.to_dict() for n in self.npus]}

    def npu_table(self) -> pa.Table:
        """One row per NPU, ready for Parquet (communication time and bytes as maps by type)."""
        rows = [{**n.to_dict(), "comm_ns": list(n.comm_ns.items()), "comm_bytes": list(n.comm_bytes.items()),
                 "time_by_category": list(n.time_by_category.items())} for n in self.npus]
        return pa.Table.from_pylist(rows, schema=NPU_RESULT_SCHEMA)

    def timeline_table(self) -> pa.Table:
        if self.timeline is None:
            raise ValueError("no timeline was recorded: run the engine with record_timeline=True")
        return pa.Table.from_pylist([vars(e) for e in self.timeline], schema=TIMELINE_SCHEMA)


NPU_RESULT_SCHEMA = pa.schema([
    ("npu", pa.int32()), ("finish_ns", pa.int64()), ("compute_ns", pa.int64()), ("exposed_comm_ns", pa.int64()),
    ("astra_exposed_comm_ns", pa.int64()),
    ("cpu_ns", pa.int64()), ("nodes", pa.int64()), ("comm_ns", pa.map_(pa.string(), pa.int64())),
    ("comm_bytes", pa.map_(pa.string(), pa.int64())), ("time_by_category", pa.map_(pa.string(), pa.int64())),
])
TIMELINE_SCHEMA = pa.schema([
    ("npu", pa.int32()), ("node_id", pa.uint64()), ("name", pa.string()), ("track", pa.string()),
    ("kind", pa.string()), ("start_ns", pa.int64()), ("end_ns", pa.int64()), ("bytes", pa.int64()),
])
TRACK_OF_SLOT = {CPU: "cpu", GPU_COMPUTE: "compute", GPU_COMM: "comm", NO_SLOT: "comm"}


@dataclass(frozen=True)
class _Node:
    """What the engine needs of one node, decoded once from the table (and shared by equal nodes)."""

    action: int
    slot: int
    duration: int = 0  # compute / replay ns
    op: str = ""  # the collective it is timed as, or "send"/"recv"
    label: str = ""  # its name in results (differs from op for the EXTENSIONS)
    size: int = 0
    group: tuple[int, ...] | None = None  # collective members (None: all NPUs)
    involved: tuple[bool, ...] | None = None
    idle: bool = False  # a collective with no dimension to run on: each member is done when it issues it
    peer: int = -1
    tag: int = 0
    category: int | None = field(init=False, default=None)  # its share of the NPU's time (sim/breakdown.py)

    def __post_init__(self) -> None:  # once per distinct node shape: nodes are interned
        object.__setattr__(self, "category", _category_of(self))


def _category_of(node: _Node) -> int | None:
    """None for nodes that take no time."""
    if node.action == DO_INSTANT:
        return None
    if node.op == "memory":
        return breakdown.MEMORY
    if node.action in (DO_COLLECTIVE, DO_SEND, DO_RECV) or node.op == "broadcast":
        return breakdown.COMMUNICATION
    return breakdown.HOST if node.slot == CPU else breakdown.COMPUTE


def _column(table: pa.Table, name: str, fill=None) -> list:
    if name not in table.column_names:
        return [fill] * table.num_rows
    return table.column(name).to_pylist()


class Engine:
    """One simulation run. Build with the per-NPU feeders, then run()."""

    def __init__(self, feeders: list[GraphFeeder], network: NetworkConfig, system: SystemConfig,
                 comm_groups: dict[int, tuple[int, ...]] | None = None, mode: str = "unaware",
                 compute_scale: float = 1.0, comm_scale: float = 1.0, npu_speed: list[float] | None = None,
                 record_timeline: bool = False, reuse_alone: bool = True,
                 progress: Callable[[str, int, int], None] | None = None):
        """compute_scale multiplies every compute time, comm_scale every communication time (a
        what-if knob: 0.5 = twice as fast a network); npu_speed[i] divides NPU i's compute times
        (0.5 = a straggler at half speed). reuse_alone=False replays every aware collective live
        even where its cached replay alone is exact (for checking that it is). progress, if
        given, is called as progress("simulating nodes", done, total) now and then."""
        if mode not in ("unaware", "aware"):
            raise SimulationError(f"mode {mode!r}: expected 'unaware' or 'aware'")
        if len(feeders) != network.npus:
            raise SimulationError(f"the network has {network.npus} NPUs but {len(feeders)} workload file(s) were given")
        self.feeders = feeders
        self.network = network
        self.system = system
        self.comm_groups = comm_groups or {}
        self.mode = mode
        if compute_scale <= 0 or comm_scale <= 0:
            raise SimulationError("compute and communication scales must be positive")
        self.collectives = (AwareCollectiveModel if mode == "aware" else CollectiveModel)(network, system, comm_scale)
        self.links = UnawareNetwork(network)  # sends in the unaware mode (the aware mode routes them on its links)
        self.compute_scale = compute_scale
        self.comm_scale = comm_scale
        self.npu_speed = npu_speed or [1.0] * len(feeders)
        if len(self.npu_speed) != len(feeders) or min(self.npu_speed) <= 0:
            raise SimulationError(f"npu_speed needs one positive factor per NPU ({len(feeders)})")
        self.record_timeline = record_timeline
        self.reuse_alone = reuse_alone
        self.progress = progress
        self.nodes = [self._decode(npu, f) for npu, f in enumerate(feeders)]

    def _comm_time(self, ns: int) -> int:
        return ns if self.comm_scale == 1.0 else math.floor(ns * self.comm_scale)

    # ------------------------------------------------------------------ node decoding

    def _group(self, npu: int, pg_name: str | None, path: str, node_id: int) -> tuple[int, ...] | None:
        if pg_name is None or pg_name in DEFAULT_GROUP_NAMES:
            return None
        try:
            members = self.comm_groups[int(pg_name)]
        except (ValueError, KeyError):
            raise SimulationError(f"{path}: node {node_id}: communicator group {pg_name!r} not found "
                                  f"(groups: {sorted(self.comm_groups) or 'none; pass --comm-group'})") from None
        if npu not in members:
            raise SimulationError(f"{path}: node {node_id}: NPU {npu} runs a collective of communicator group "
                                  f"{pg_name}, whose members are {list(members)}")
        if any(not 0 <= m < self.network.npus for m in members):
            raise SimulationError(f"communicator group {pg_name} {list(members)} names NPUs outside the network's "
                                  f"{self.network.npus}")
        if len(members) == self.network.npus:
            return None
        return members

    def _compute_ns(self, npu: int, duration_us: int, num_ops, tensor_size, is_cpu: bool, path: str,
                    node_id: int) -> int:
        sysc = self.system
        if sysc.roofline_enabled and not is_cpu and not sysc.replay_only:
            if num_ops is None or tensor_size is None:
                raise SimulationError(f"{path}: node {node_id}: roofline needs num_ops and tensor_size")
            if tensor_size == 0:
                return 0
            intensity = num_ops / tensor_size
            perf = min(sysc.local_mem_bw_gbps * 1e9 * intensity, sysc.peak_perf_tflops * 1e12)
            ns = math.floor(num_ops / perf * 1e9)
        else:
            ns = duration_us * 1000 or 1
        scale = self.compute_scale / self.npu_speed[npu]
        return ns if scale == 1.0 else max(1, math.floor(ns * scale))

    def _decode(self, npu: int, feeder: GraphFeeder) -> list[_Node]:
        t = feeder.table
        path = feeder.path
        ids = feeder.ids.tolist()
        cols = {name: _column(t, name) for name in ("type", "duration_micros", "is_cpu_op", "num_ops", "tensor_size",
                                                     "comm_type", "comm_size", "pg_name", "involved_dim",
                                                     "comm_src", "comm_dst", "comm_tag")}
        cols["involved_dim"] = [tuple(v) if v is not None else None for v in cols["involved_dim"]]  # hashable
        replay = self.system.replay_only
        nodes = []
        interned: dict[tuple, _Node] = {}  # a trace repeats a few node shapes many times
        for i, (node_id, shape) in enumerate(zip(ids, zip(*cols.values()))):
            known = interned.get(shape)
            if known is not None:
                nodes.append(known)
                continue
            ntype, is_cpu = cols["type"][i], bool(cols["is_cpu_op"][i])
            duration_us = cols["duration_micros"][i] or 0
            if ntype in (COLL, SEND, RECV) and is_cpu:
                raise SimulationError(f"{path}: node {node_id}: communication node with is_cpu_op true "
                                      "(ASTRA-sim: Comm node should not be on CPU)")
            slot = CPU if is_cpu else (GPU_COMPUTE if ntype == COMP else (NO_SLOT if ntype == RECV else GPU_COMM))
            if replay and ntype not in INSTANT_TYPES:
                nodes.append(_Node(DO_REPLAY, slot, duration=duration_us * 1000 or 1))
            elif ntype == COMP:
                nodes.append(_Node(DO_COMPUTE, slot, duration=self._compute_ns(
                    npu, duration_us, cols["num_ops"][i], cols["tensor_size"][i], is_cpu, path, node_id)))
            elif ntype == COLL:
                nodes.append(self._collective(cols, i, npu, slot, duration_us, path, node_id))
            elif ntype in (SEND, RECV):
                nodes.append(self._point_to_point(cols, i, ntype, npu, path, node_id))
            elif ntype in INSTANT_TYPES:
                nodes.append(_Node(DO_INSTANT, slot))
            elif ntype in MEM_TYPES:
                nodes.append(self._memory(cols["tensor_size"][i], slot, path, node_id))
            else:
                raise SimulationError(f"{path}: node {node_id}: unknown node type {ntype}")
            interned[shape] = nodes[-1]
        return nodes

    def _collective(self, cols: dict, i: int, npu: int, slot: int, duration_us: int, path: str, node_id: int) -> _Node:
        comm_type, size = cols["comm_type"][i], cols["comm_size"][i]
        if comm_type is None or size is None:
            raise SimulationError(f"{path}: node {node_id}: a collective needs comm_type and comm_size")
        if size < 0:
            raise SimulationError(f"{path}: node {node_id}: comm_size {size} is negative")
        if comm_type == BROADCAST:  # ASTRA-sim replays broadcasts by their duration
            return _Node(DO_REPLAY, slot, duration=duration_us * 1000 or 1, op="broadcast", label="broadcast", size=size)
        if comm_type not in COLLECTIVE_OPS:
            raise SimulationError(f"{path}: node {node_id}: comm_type {comm_type} is not a CollectiveCommType")
        op, label = COLLECTIVE_OPS[comm_type]
        if label == "barrier":
            size = 0
        group, involved = self._group(npu, cols["pg_name"][i], path, node_id), cols["involved_dim"][i]
        return _Node(DO_COLLECTIVE, slot, op=op, label=label, size=size, group=group, involved=involved,
                     idle=group is None and not self.collectives.has_phases(op, involved))

    def _memory(self, tensor_size, slot: int, path: str, node_id: int) -> _Node:
        """A memory load/store: tensor_size bytes at the local memory bandwidth (MEMORY_NOTE)."""
        if tensor_size is None:
            raise SimulationError(f"{path}: node {node_id}: a memory node needs tensor_size")
        ns = math.floor(tensor_size / (self.system.local_mem_bw_gbps * 1e9) * 1e9)
        return _Node(DO_REPLAY, slot, duration=ns, op="memory", label="memory", size=tensor_size)

    def _point_to_point(self, cols: dict, i: int, ntype: int, npu: int, path: str, node_id: int) -> _Node:
        peer_key = "comm_dst" if ntype == SEND else "comm_src"
        peer, size, tag = cols[peer_key][i], cols["comm_size"][i], cols["comm_tag"][i]
        if peer is None or size is None or tag is None:
            kind = "send" if ntype == SEND else "receive"
            raise SimulationError(f"{path}: node {node_id}: a {kind} needs {peer_key}, comm_size and comm_tag")
        if size < 0:
            raise SimulationError(f"{path}: node {node_id}: comm_size {size} is negative")
        if not 0 <= peer < self.network.npus:
            raise SimulationError(f"{path}: node {node_id}: peer NPU {peer} is outside the network's "
                                  f"{self.network.npus} NPUs")
        if ntype == SEND:
            return _Node(DO_SEND, GPU_COMM, op="send", size=size, peer=peer, tag=tag)
        return _Node(DO_RECV, NO_SLOT, op="recv", size=size, peer=peer, tag=tag)

    # ------------------------------------------------------------------ the event loop

    def run(self) -> SimResult:
        npus = len(self.feeders)
        results = [NpuResult(npu) for npu in range(npus)]
        busy = [[False, False, False, False] for _ in range(npus)]
        events = EventQueue()  # node completions: (tick, npu, node index)
        finish_at = events.at
        # collectives: (group, k) -> {npu: (issue tick, node index)}; issued count per (npu, group)
        pending: dict[tuple, dict[int, tuple[int, int]]] = {}
        issued_in_group: dict[tuple[int, tuple | None], int] = defaultdict(int)
        # point to point, keyed (src, dst, tag): unmatched sends (arrival tick) and receives (npu, index, post tick)
        sends: dict[tuple[int, int, int], deque] = defaultdict(deque)
        recvs: dict[tuple[int, int, int], deque] = defaultdict(deque)
        feeders, nodes = self.feeders, self.nodes
        extensions: set[str] = set()  # collectives ASTRA-sim refuses, timed by EXTENSIONS
        # timeline recording: issue tick per node and (npu, index, end) per completion, only when asked for
        issued_at = [[0] * len(n) for n in nodes] if self.record_timeline else None
        ran: list[tuple[int, int, int]] | None = [] if self.record_timeline else None

        # congestion-aware: every collective and send is replayed as it happens on one set of links
        fabric = live = None
        if self.mode == "aware":
            fabric = AwareFabric(self.network, events, self.comm_scale)
            live = Replay(self.system, self.collectives.ranks, events, fabric, self.collectives.timer.p,
                          self.comm_scale)
        instances: dict[tuple, Instance] = {}  # live collectives by key, until every member is done
        live_members: dict[tuple, dict[int, tuple[int, int]]] = {}
        members_done: dict[tuple, int] = defaultdict(int)
        # When every communication is a collective of all NPUs, nothing but a collective's own
        # members can put traffic on the links, and they are busy with it until they finish: a
        # collective that all members start in one tick on idle links, and that they all finish
        # together, runs exactly as it does alone, so its cached replay is reused (a training
        # trace repeats a few collectives thousands of times). Others run live.
        reuse_alone = live is not None and self.reuse_alone and not any(
            node.action == DO_SEND or node.group for npu_nodes in nodes for node in npu_nodes)
        deciding: dict[tuple, list[int]] = {}  # collectives started this tick on idle links: who joined

        def member_order(group: tuple[int, ...] | None) -> Iterable[int]:
            return group or range(npus)

        def checked(key: tuple, members: dict[int, tuple[int, int]]) -> tuple[_Node, int]:
            """The collective's node on its first member and the size to time it at; every member
            must issue the same collective."""
            first = nodes[next(iter(members))][members[next(iter(members))][1]]
            size = first.size
            for npu, (_, index) in members.items():
                node = nodes[npu][index]
                if node.label == first.label == "all_to_all":  # uneven splits: the largest buffer bounds it
                    size = max(size, node.size)
                    if node.size != first.size:
                        extensions.add("uneven_all_to_all")
                elif (node.label, node.size) != (first.label, first.size):
                    raise SimulationError(
                        f"collective #{key[1]} of group {key[0] or 'all'} differs across NPUs: "
                        f"{first.label} of {first.size} B on one, {node.label} of {node.size} B on NPU {npu}")
            if first.label in EXTENSIONS:
                extensions.add(first.label)
            return first, size

        def all_issued(key: tuple, members: dict[int, tuple[int, int]], now: int) -> None:
            """The last member has issued the collective."""
            first, size = checked(key, members)
            group = key[0]
            if live is not None:
                if first.op == ALL_TO_ALL:  # its plan needs every member's size: all start now
                    live_join(key, first, size, members, member_order(group), now)
                return
            # congestion-unaware: nothing else touches the messages, so the finish times are
            # known now: the closed form when all issued together, else the replay from each issue
            if first.idle:  # every member was done when it issued it
                return
            start = next(iter(members.values()))[0]  # the first issue (ticks never decrease)
            offsets = None if start == now else tuple(members[npu][0] - start for npu in member_order(group))
            finishes = self.collectives.member_finish(first.op, size, first.involved, group, offsets)
            for npu, finish in zip(member_order(group), finishes):  # comm_scale applied by the model
                issued, index = members[npu]  # (a member needs every other's data: it ends after the last issue)
                finish_at(start + finish, npu, index)
                results[npu].add_comm(first.label, nodes[npu][index].size, start + finish - issued)

        def live_join(key: tuple, node: _Node, size: int, members: dict[int, tuple[int, int]],
                      joining: Iterable[int], now: int) -> None:
            """Members start the collective now (aware mode)."""
            instance = instances.get(key)
            if instance is None:
                if key in deciding:
                    deciding[key] += joining
                    return
                if reuse_alone and not instances:  # idle links: decide at the end of this tick
                    deciding[key] = list(joining)
                    events.call(now, decide, key, node, size, members)
                    return
                instance = start_live(key, node, size, members)
            for npu in joining:
                instance.join(npu, now)

        def decide(now: int, key: tuple, node: _Node, size: int, members: dict[int, tuple[int, int]]) -> None:
            joined = deciding.pop(key)
            if len(joined) == npus:
                alone = self.collectives.member_durations(node.op, size, node.involved, None)
                if len(set(alone)) == 1:  # all finish together: exactly as alone
                    live_members[key] = members
                    for npu in range(npus):
                        events.call(now + alone[npu], live_member_done, key, npu)
                    return
            instance = start_live(key, node, size, members)
            for npu in joined:
                instance.join(npu, now)

        def start_live(key: tuple, node: _Node, size: int, members: dict[int, tuple[int, int]]) -> Instance:
            plan = self.collectives.plan(node.op, size, node.involved, key[0])
            instance = instances[key] = live.instance(plan, lambda npu, tick: live_member_done(tick, key, npu))
            live_members[key] = members
            return instance

        def live_member_done(now: int, key: tuple, npu: int) -> None:
            issued, index = live_members[key][npu]
            node = nodes[npu][index]
            finish_at(now, npu, index)
            results[npu].add_comm(node.label, node.size, now - issued)
            members_done[key] += 1
            if members_done[key] == (len(key[0]) if key[0] else npus):
                instances.pop(key, None)
                del live_members[key], members_done[key]

        def message_arrived(arrival: int, npu: int, index: int) -> None:
            """The message of send node `index` of `npu` arrives at `arrival` (now, or later in the unaware mode)."""
            node = nodes[npu][index]
            finish_at(arrival, npu, index)
            match = (npu, node.peer, node.tag)
            if recvs[match]:
                r_npu, r_index, posted = recvs[match].popleft()
                finish_at(max(arrival, posted), r_npu, r_index)
            else:
                sends[match].append(arrival)

        def issue(npu: int, now: int) -> None:
            """Visits the free nodes in ascending id order; those whose slot is busy go back."""
            feeder, npu_nodes, slots = feeders[npu], nodes[npu], busy[npu]
            deferred = []
            while True:
                index = feeder.next_issuable()
                if index is None:
                    break
                node = npu_nodes[index]
                if slots[node.slot] and node.slot != NO_SLOT:
                    deferred.append(index)
                    continue
                slots[node.slot] = True
                if node.category is not None:
                    move(npu, now, node.category, 1)
                if issued_at is not None:
                    issued_at[npu][index] = now
                action = node.action
                if action == DO_COMPUTE or action == DO_REPLAY:
                    finish_at(now + node.duration, npu, index)
                    if node.op == "memory":
                        extensions.add("memory")
                    if action == DO_COMPUTE:
                        if node.slot == CPU:
                            results[npu].cpu_ns += node.duration
                        else:
                            results[npu].compute_ns += node.duration
                elif action == DO_COLLECTIVE:
                    group = node.group
                    k = issued_in_group[(npu, group)]
                    issued_in_group[(npu, group)] = k + 1
                    key = (group, k)
                    members = pending.setdefault(key, {})
                    members[npu] = (now, index)
                    if live is not None and node.op != ALL_TO_ALL:  # ASTRA-sim: it starts on this NPU at once
                        live_join(key, node, node.size, members, (npu,), now)
                    elif node.idle:  # no dimension to run on: done at once
                        finish_at(now, npu, index)
                    if len(members) == (len(group) if group else npus):
                        del pending[key]
                        all_issued(key, members, now)
                elif action == DO_SEND:
                    results[npu].add_comm("send", node.size)
                    if fabric is None:
                        message_arrived(now + self._comm_time(self.links.delay(npu, node.peer, node.size)), npu, index)
                    else:
                        fabric.send(now, npu, node.peer, node.size, message_arrived, (npu, index))
                elif action == DO_RECV:
                    match = (node.peer, npu, node.tag)
                    if sends[match]:
                        finish_at(max(sends[match].popleft(), now), npu, index)
                    else:
                        recvs[match].append((npu, index, now))
                else:  # metadata / invalid: done at once (later in this same tick)
                    finish_at(now, npu, index)
            for index in deferred:
                feeder.push_back(index)

        report_every, total_nodes, done_nodes = PROGRESS_EVERY, sum(map(len, nodes)), 0
        spent = breakdown.TimeBreakdown(npus)
        move = spent.move
        for npu in range(npus):
            issue(npu, 0)
        while events:
            now, npu, index = events.pop()
            if npu == CALL:  # a step of the live aware replay
                function, args = index
                function(now, *args)
                continue
            node = nodes[npu][index]
            busy[npu][node.slot] = False
            if node.category is not None:
                move(npu, now, node.category, -1)
            feeders[npu].free_children(index)
            r = results[npu]
            r.nodes += 1
            r.finish_ns = now
            done_nodes += 1
            if done_nodes == report_every and self.progress is not None:
                self.progress("simulating nodes", done_nodes, total_nodes)
                report_every += PROGRESS_EVERY
            if ran is not None:
                ran.append((npu, index, now))
            issue(npu, now)

        for npu, r in enumerate(results):
            r.time_by_category = spent.totals(npu, r.finish_ns)
        unfinished = {npu: f.remaining for npu, f in enumerate(feeders) if f.remaining}
        result = SimResult(self.mode, results, self._timeline(ran, issued_at) if ran is not None else None,
                           notes=[EXTENSIONS.get(label, MEMORY_NOTE) for label in sorted(extensions)]
                           + sorted(set(self.collectives.notes) | set(fabric.notes if fabric else ())))
        if unfinished:
            raise SimulationDeadlock(self._deadlock_report(pending, recvs, instances), result)
        return result

    def _timeline(self, ran: list[tuple[int, int, int]], issued_at: list[list[int]]) -> list[TimelineEvent]:
        names = [f.table.column("name").to_pylist() if "name" in f.table.column_names else None
                 for f in self.feeders]
        events = []
        for npu, index, end in ran:
            node = self.nodes[npu][index]
            kind = "compute" if node.action == DO_COMPUTE else (node.label or node.op or "instant")
            events.append(TimelineEvent(npu, int(self.feeders[npu].ids[index]),
                                        names[npu][index] if names[npu] else "", TRACK_OF_SLOT[node.slot], kind,
                                        issued_at[npu][index], end, node.size))
        return events

    def _deadlock_report(self, pending: dict, recvs: dict, live: dict) -> dict[int, list[str]]:
        npus = len(self.feeders)
        report: dict[int, list[str]] = defaultdict(list)
        waiting_nodes: dict[int, set[tuple]] = defaultdict(set)  # per NPU: issued nodes the report explains
        for (group, k), instance in live.items():  # aware: members that wait for one another in their queues
            for npu, text in instance.stuck():
                report[npu].append(f"{instance.plan.op} (collective #{k} of group {'all' if group is None else group}) "
                                   f"{text}")
                waiting_nodes[npu].add(("collective", group, k))
        for (group, k), members in pending.items():
            everyone = group or tuple(range(npus))
            missing = [m for m in everyone if m not in members]
            for npu, (tick, index) in members.items():
                node = self.nodes[npu][index]
                node_id = int(self.feeders[npu].ids[index])
                report[npu].append(f"node {node_id} ({node.op} of {node.size} B, collective #{k} of group "
                                   f"{'all' if group is None else group}) issued at {tick} ns waits for "
                                   f"NPU(s) {missing} to issue it")
                waiting_nodes[npu].add(("collective", group, k))
        for (src, dst, tag), waiting in recvs.items():
            for npu, index, tick in waiting:
                node_id = int(self.feeders[npu].ids[index])
                report[npu].append(f"receive node {node_id} (from NPU {src}, tag {tag}) posted at {tick} ns "
                                   "waits for a send that never came")
                waiting_nodes[npu].add(("receive", index))
        for npu, feeder in enumerate(self.feeders):
            blocked = feeder.remaining - len(waiting_nodes[npu])
            if blocked > 0:
                report[npu].append(f"{blocked} node(s) wait on unfinished parents")
        return dict(report)


def simulate(tables: list[pa.Table], network: NetworkConfig, system: SystemConfig, **options) -> SimResult:
    """Simulates one node table per NPU (index = NPU id)."""
    feeders = [GraphFeeder(t, path=table_source(t, f"<npu {npu}>")) for npu, t in enumerate(tables)]
    return Engine(feeders, network, system, **options).run()
