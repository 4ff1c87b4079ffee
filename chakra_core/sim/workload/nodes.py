"""The workload layer's view of a node table: what each node does when an NPU issues it.

Every row is decoded once into a `Node` (shared by rows of the same shape: a trace repeats a
few shapes many times): its action, its hardware slot, its time where the node alone decides
it (compute, memory, replayed durations), and what the system layer needs of a
communication node (the collective it is timed as, its group, its peer).

Collectives ASTRA-sim refuses (REDUCE, GATHER, SCATTER, REDUCE_SCATTER_BLOCK, BARRIER) are
timed as the ring-family collective that moves the same data (EXTENSIONS); the run's notes
say which of these choices it used. The decoded node itself is sim/decoded.py, what the
workload layer hands the system layer.
"""

from __future__ import annotations

import math

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from chakra_core.format.columns import NODE_TYPE_VALUES, device_compute
from chakra_core.format.durations import durations_ns
from chakra_core.format.nodenames import on_names
from chakra_core.format.nodetypes import CALL_OWN_TIME_PREFIXES
from chakra_core.sim.config import NetworkConfig, SystemConfig
from chakra_core.sim.decoded import (CPU, DO_COLLECTIVE, DO_COMPUTE, DO_INSTANT, DO_RECV, DO_REPLAY, DO_SEND,
                                      GPU_COMM, GPU_COMPUTE, NO_SLOT, Node)
from chakra_core.sim.errors import SimulationError
from chakra_core.sim.memory.local import LocalMemory
from chakra_core.sim.system.collectives import CollectiveModel
from chakra_core.sim.system.plan import ALL_GATHER, ALL_REDUCE, ALL_TO_ALL, REDUCE_SCATTER
from chakra_core.sim.workload.feeder import GraphFeeder

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
BROADCAST = 5
DEFAULT_GROUP_NAMES = ("", "0")  # pg_name values that mean "all NPUs" to ASTRA-sim
DECODE_ROWS = 1 << 16  # rows whose column values are Python objects at once while decoding

def read_columns(system: SystemConfig, timeline: bool = False) -> tuple[str, ...]:
    """The node-table columns a simulation on `system` reads (the feeder's graph, what
    NodeDecoder decodes, names where the system or a timeline wants them, inputs where the
    host-overhead model counts them): all a reader of a big trace needs to keep."""
    names = ("name",) if timeline or system.call_time_in_network else ()
    inputs = ("inputs",) if system.host_overhead is not None and system.host_overhead.reads_inputs else ()
    return ("id", "ctrl_deps", "data_deps", *NodeDecoder.COLUMNS, *NodeDecoder.DURATION_COLUMNS, *names, *inputs)


def input_counts(table: pa.Table) -> list[int]:
    """Per row, the inputs its operator recorded (the entries of inputs.types, a JSON list); 0 where
    none were recorded or the text is no list (the count only refines a time estimate)."""
    if "inputs" not in table.column_names:
        return [0] * table.num_rows
    counts = []
    for text in pc.struct_field(table.column("inputs"), "types").to_pylist():
        try:
            types = orjson.loads(text) if text else None
        except orjson.JSONDecodeError:
            types = None
        counts.append(len(types) if isinstance(types, list) else 0)
    return counts


def _column(table: pa.Table, name: str, fill=None) -> list:
    if name not in table.column_names:
        return [fill] * table.num_rows
    return table.column(name).to_pylist()


class NodeDecoder:
    """Decodes each NPU's table into Nodes, checking what ASTRA-sim would refuse.

    compute_scale multiplies every compute time; npu_speed[i] divides NPU i's. `shapes` lists
    every distinct (NPU, Node) decoded, for layers that check the whole job once."""

    COLUMNS = ("type", "is_cpu_op", "num_ops", "tensor_size", "comm_type", "comm_size",
               "pg_name", "involved_dim", "comm_src", "comm_dst", "comm_tag")
    DURATION_COLUMNS = ("duration_micros", "duration_ns")  # read together by format/durations.py

    def __init__(self, network: NetworkConfig, system: SystemConfig, comm_groups: dict[int, tuple[int, ...]],
                 collectives: CollectiveModel, memory: LocalMemory, compute_scale: float, npu_speed: list[float]):
        self.network, self.system, self.comm_groups = network, system, comm_groups
        self.collectives, self.memory = collectives, memory
        self.compute_scale, self.npu_speed = compute_scale, npu_speed
        self.shapes: list[tuple[int, Node]] = []

    def decode(self, npu: int, feeder: GraphFeeder) -> list[Node]:
        """One Node per row of the feeder's table, DECODE_ROWS rows at a time: the columns are
        Python values only for the rows being decoded (the Nodes themselves are shared)."""
        t, path = feeder.table, feeder.path
        launches = self._launch_counts(t) if self.system.host_overhead is not None else None
        nodes: list[Node] = []
        interned: dict[tuple, Node] = {}  # a trace repeats a few node shapes many times
        for first in range(0, t.num_rows, DECODE_ROWS):
            ids = feeder.ids[first:first + DECODE_ROWS]
            cols = self._columns(t.slice(first, DECODE_ROWS), ids, launches)
            for i, (node_id, shape) in enumerate(zip(ids.tolist(), zip(*cols.values()))):
                known = interned.get(shape)
                if known is None:
                    known = interned[shape] = self._node(cols, i, npu, path, node_id)
                    self.shapes.append((npu, known))
                nodes.append(known)
        return nodes

    def _columns(self, t: pa.Table, ids: np.ndarray, launches: dict[int, int] | None) -> dict[str, list]:
        """The rows' values that decide their Node, column by column."""
        cols = {name: _column(t, name) for name in self.COLUMNS}
        cols["duration_ns"] = durations_ns(t).to_pylist()  # to the ns where the conversion kept it
        if self.system.call_time_in_network and "name" in t.column_names:  # else no column: nothing to tell apart
            cols["call_own_time"] = self._call_own_time(t)
        if launches is not None:
            cols["launches"] = [launches.get(node_id, 0) for node_id in ids.tolist()]
            if self.system.host_overhead.reads_inputs:
                cols["inputs"] = input_counts(t)
            if self.system.host_overhead.reads_children:
                cols["children"] = _column(t, "children", 0)
            cols["launch_calls"] = _column(t, "launch_calls")
        cols["involved_dim"] = [tuple(v) if v is not None else None for v in cols["involved_dim"]]  # hashable
        return cols

    @staticmethod
    def _call_own_time(table: pa.Table) -> list[bool]:
        """Which rows hold a recorded call's own duration that the network already times
        (SystemConfig.call_time_in_network)."""
        def own_time(names: pa.Array) -> pa.Array:
            own = pc.starts_with(names, CALL_OWN_TIME_PREFIXES[0])
            for prefix in CALL_OWN_TIME_PREFIXES[1:]:
                own = pc.or_(own, pc.starts_with(names, prefix))
            return own

        return pc.fill_null(on_names(table.column("name"), own_time), False).to_pylist()

    @staticmethod
    def _launch_counts(table: pa.Table) -> dict[int, int]:
        """Node id -> the device work it launched: the device compute nodes whose first data
        dependency it is (the converter lists a kernel's launcher there); absent: none."""
        deps = pc.filter(table.column("data_deps"), device_compute(table))
        deps = pc.filter(deps, pc.greater(pc.list_value_length(deps), 0))  # device work without a launcher: none
        firsts = pc.list_element(deps, 0) if len(deps) else pa.array([])
        launchers = pc.drop_null(firsts).to_numpy(zero_copy_only=False).astype(np.int64)
        if not len(launchers):
            return {}
        found, counts = np.unique(launchers, return_counts=True)
        return dict(zip(found.tolist(), counts.tolist()))

    def _node(self, cols: dict, i: int, npu: int, path: str, node_id: int) -> Node:
        ntype, is_cpu = cols["type"][i], bool(cols["is_cpu_op"][i])
        recorded_ns = cols["duration_ns"][i]
        if ntype in (COLL, SEND, RECV) and is_cpu:
            raise SimulationError(f"{path}: node {node_id}: communication node with is_cpu_op true "
                                  "(ASTRA-sim: Comm node should not be on CPU)")
        slot = CPU if is_cpu else (GPU_COMPUTE if ntype == COMP else (NO_SLOT if ntype == RECV else GPU_COMM))
        if self.system.replay_only and ntype not in INSTANT_TYPES:
            return Node(DO_REPLAY, slot, duration=recorded_ns or 1)
        if ntype == COMP and is_cpu and "call_own_time" in cols and cols["call_own_time"][i]:
            return Node(DO_INSTANT, slot)
        if ntype == COMP:
            launches = (cols["launches"][i] if "launches" in cols else 0) if is_cpu else None
            inputs = cols["inputs"][i] if "inputs" in cols else 0
            children = (cols["children"][i] or 0) if "children" in cols else 0
            calls = cols["launch_calls"][i] if "launch_calls" in cols else None
            return Node(DO_COMPUTE, slot, duration=self._compute_ns(
                npu, recorded_ns, cols["num_ops"][i], cols["tensor_size"][i], launches, path, node_id, inputs,
                children, calls))
        if ntype == COLL:
            return self._collective(cols, i, npu, slot, recorded_ns, path, node_id)
        if ntype in (SEND, RECV):
            return self._point_to_point(cols, i, ntype, path, node_id)
        if ntype in INSTANT_TYPES:
            return Node(DO_INSTANT, slot)
        if ntype in MEM_TYPES:
            return self._memory(cols["tensor_size"][i], slot, path, node_id)
        raise SimulationError(f"{path}: node {node_id}: unknown node type {ntype}")

    def _compute_ns(self, npu: int, recorded_ns: int, num_ops, tensor_size, launches: int | None, path: str,
                    node_id: int, inputs: int = 0, children: int = 0, launch_calls: int | None = None) -> int:
        """launches: None for device compute; for a CPU node, the device work it launched where the
        system takes the profiler's cost out of host time (SystemConfig.host_overhead), else 0;
        inputs, children, launch_calls: the node's recorded inputs, operators directly inside it
        and runtime launch calls (null: one per launch), where that model reads them."""
        sysc = self.system
        is_cpu = launches is not None
        if sysc.roofline_enabled and not is_cpu and not sysc.replay_only:
            if num_ops is None or tensor_size is None:
                raise SimulationError(f"{path}: node {node_id}: roofline needs num_ops and tensor_size")
            if tensor_size == 0:
                return 0
            intensity = num_ops / tensor_size
            perf = min(sysc.local_mem_bw_gbps * 1e9 * intensity, sysc.peak_perf_tflops * 1e12)
            ns = math.floor(num_ops / perf * 1e9)
        else:
            ns = recorded_ns or 1
        if is_cpu and sysc.host_overhead is not None:
            ns = sysc.host_overhead.host_ns(ns, launches, inputs, children, launch_calls)
        scale = self.compute_scale / self.npu_speed[npu]
        return ns if scale == 1.0 else max(1, math.floor(ns * scale))

    def _collective(self, cols: dict, i: int, npu: int, slot: int, recorded_ns: int, path: str, node_id: int) -> Node:
        comm_type, size = cols["comm_type"][i], cols["comm_size"][i]
        if comm_type is None or size is None:
            raise SimulationError(f"{path}: node {node_id}: a collective needs comm_type and comm_size")
        if size < 0:
            raise SimulationError(f"{path}: node {node_id}: comm_size {size} is negative")
        if comm_type == BROADCAST:  # ASTRA-sim replays broadcasts by their duration
            return Node(DO_REPLAY, slot, duration=recorded_ns or 1, op="broadcast", label="broadcast", size=size)
        if comm_type not in COLLECTIVE_OPS:
            raise SimulationError(f"{path}: node {node_id}: comm_type {comm_type} is not a CollectiveCommType")
        op, label = COLLECTIVE_OPS[comm_type]
        if label == "barrier":
            size = 0
        group, involved = self._group(npu, cols["pg_name"][i], path, node_id), cols["involved_dim"][i]
        return Node(DO_COLLECTIVE, slot, op=op, label=label, size=size, group=group, involved=involved,
                    idle=group is None and not self.collectives.has_phases(op, involved))

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

    def _memory(self, tensor_size, slot: int, path: str, node_id: int) -> Node:
        """A memory load/store, timed by the memory layer (sim/memory/local.py)."""
        if tensor_size is None:
            raise SimulationError(f"{path}: node {node_id}: a memory node needs tensor_size")
        return Node(DO_REPLAY, slot, duration=self.memory.access_ns(tensor_size), op="memory", label="memory",
                    size=tensor_size)

    def _point_to_point(self, cols: dict, i: int, ntype: int, path: str, node_id: int) -> Node:
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
            return Node(DO_SEND, GPU_COMM, op="send", size=size, peer=peer, tag=tag)
        return Node(DO_RECV, NO_SLOT, op="recv", size=size, peer=peer, tag=tag)
