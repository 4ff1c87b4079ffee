"""One rank's device work, its steps and what its host did meanwhile, on one clock (ns).

The node table says what ran: device kernels, copies and memsets are COMP nodes off the CPU
(`is_cpu_op` false) with the `stream` they ran on, each with a data dependency on the host
operator that launched it (chakra_core/convert/pytorch/conversion.py); communication nodes run on the
device when their process group's backend is a device library (NCCL, RCCL, ...: the
`backend_config` of the `## process_group:init ##` metadata node; without one, on the device,
as ASTRA-sim has them), else on the host (gloo). Steps are the `ProfilerStep#N` host nodes:
a node belongs to the step its recorded start falls in, a kernel to the step of the operator
that launched it; nodes before the first step are left out. Without ProfilerStep nodes the
whole trace is one step.

When things ran comes separately, so that the same analysis reads the recorded timestamps
(`recorded_times`) and a simulator's timeline (`simulated_times`): every figure of
device_time.py then exists as recorded and as predicted on any system. A step's window runs
from its first node's start to the next step's first start (the last step: to its last end).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from chakra_core.analysis import intervals
from chakra_core.analysis.kernels import COMMUNICATION, families
from chakra_core.format.depgraph import flat_list, lookup, to_numpy
from chakra_core.format.durations import durations_ns
from chakra_core.format.nodenames import on_names
from chakra_core.format.nodetypes import COMM_NODE_TYPES, COMP, METADATA
from chakra_core.format.normalize import normalize_table
from chakra_core.sim.workload.recorded import RecordedTimeline

STEP_PREFIX = "ProfilerStep#"
WHOLE_TRACE = "trace"  # the one step of a trace without ProfilerStep nodes
# host operators that wait for the device to drain (a read of a device value, an explicit sync)
SYNC_OPS = re.compile(r"^aten::(_local_scalar_dense|item|is_nonzero|nonzero|equal)$|synchroniz", re.IGNORECASE)
DEVICE_BACKENDS = re.compile(r"nccl|rccl|hccl|xccl", re.IGNORECASE)


# the node-table columns the device analysis reads (recorded_times, device_work, has_device_work)
COLUMNS = ("id", "name", "type", "data_deps", "start_time_micros", "duration_micros", "duration_ns", "is_cpu_op",
           "stream", "pg_name", "inputs")


@dataclass
class DeviceWork:
    """A rank's device work in its steps (one entry per kernel, copy, memset or device
    communication) and the host's intervals that explain the device's idle time."""

    names: pa.Array  # string (dictionary-encoded from a trace read by facade.read_trace)
    families: np.ndarray  # object: chakra_core.analysis.kernels
    start: np.ndarray  # int64 ns
    end: np.ndarray
    comm: np.ndarray  # bool: communication on the device
    launch: np.ndarray  # int64 ns: when it was launched at the latest (its operator's end, or its start), -1: unknown
    step: np.ndarray  # index into step_names
    step_names: list[str]
    windows: intervals.Intervals  # one (start, end) per step
    host_comm: intervals.Intervals  # communication running off the device
    sync: intervals.Intervals  # host operators waiting for the device


def has_device_work(table: pa.Table) -> bool:
    """Whether the trace holds device kernels (COMP nodes off the CPU with a stream)."""
    if "stream" not in table.column_names or table.column("stream").null_count == table.num_rows:
        return False
    off_cpu = pc.invert(pc.fill_null(table.column("is_cpu_op"), True))
    return bool(pc.any(pc.and_(off_cpu, pc.is_valid(table.column("stream")))).as_py())


def recorded_times(table: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """(start, end) of every node in ns as recorded; -1 for nodes without a start time. A Chakra
    ET holds whole microseconds of start; durations are to the ns where the conversion kept them
    (format/durations.py), so that sums over many short kernels are not off by their rounding."""
    start = to_numpy(table.column("start_time_micros"), 0).astype(np.int64) * 1000
    end = start + durations_ns(table).to_numpy(zero_copy_only=False)
    untimed = start <= 0
    start[untimed], end[untimed] = -1, -1
    return start, end


def simulated_times(table: pa.Table, npu: int, timeline) -> tuple[np.ndarray, np.ndarray]:
    """(start, end) of every node in ns as a simulation's timeline (TimelineEvents) has NPU
    `npu` run it; -1 for nodes it did not run."""
    if isinstance(timeline, RecordedTimeline):  # a run's own: its arrays, no event made
        node_ids, starts, ends = timeline.node_times(npu)
    else:
        events = [(e.node_id, e.start_ns, e.end_ns) for e in timeline if e.npu == npu]
        node_ids, starts, ends = (np.array(column, np.int64) for column in zip(*events)) if events else [[]] * 3
    start, end = np.full(table.num_rows, -1, np.int64), np.full(table.num_rows, -1, np.int64)
    if len(node_ids):
        rows = _rows_of(table, np.asarray(node_ids).astype(np.uint64))
        found = rows >= 0
        start[rows[found]], end[rows[found]] = starts[found], ends[found]
    return start, end


def _rows_of(table: pa.Table, ids: np.ndarray) -> np.ndarray:
    """The row of each node id (-1 where the table has none)."""
    all_ids = to_numpy(table.column("id")).astype(np.uint64)
    order = np.argsort(all_ids, kind="stable")
    at = lookup(all_ids[order], ids)
    return np.where(at >= 0, order[np.maximum(at, 0)], -1)


def device_work(table: pa.Table, start: np.ndarray, end: np.ndarray) -> DeviceWork:
    """The rank's device work with the times given (recorded_times or simulated_times)."""
    table = normalize_table(table, COLUMNS)
    types = to_numpy(table.column("type"))
    on_cpu = to_numpy(table.column("is_cpu_op"), True).astype(bool)
    kernel = (types == COMP) & ~on_cpu & to_numpy(pc.is_valid(table.column("stream")))
    comm = np.isin(types, COMM_NODE_TYPES)
    comm_on_device = comm & _device_groups(table)
    host = (types == COMP) & on_cpu
    names = table.column("name")  # as read (dictionary-encoded by read_trace): only the rows taken below are copied
    launcher = launchers(table, kernel)
    step, step_names = _steps(table, host, kernel, launcher, names)
    launch = np.full(len(types), -1, np.int64)
    launch[kernel] = np.where(launcher >= 0, np.minimum(end[np.maximum(launcher, 0)], start[kernel]), -1)
    timed = (start >= 0) & (end >= start)
    items = np.flatnonzero((kernel | (comm_on_device & (end > start))) & timed & (step >= 0))
    item_names = names.take(pa.array(items)).combine_chunks()
    fams = families(item_names)
    fams[comm[items]] = COMMUNICATION
    return DeviceWork(
        names=item_names, families=fams,
        start=start[items], end=end[items], comm=comm[items], launch=launch[items], step=step[items],
        step_names=step_names, windows=_windows(step, start, end, timed, len(step_names)),
        host_comm=intervals.union(start[comm & ~comm_on_device & timed], end[comm & ~comm_on_device & timed]),
        sync=_sync(names, host & timed, start, end))


def _steps(table: pa.Table, host: np.ndarray, kernel: np.ndarray, launcher: np.ndarray,
           names: pa.ChunkedArray) -> tuple[np.ndarray, list[str]]:
    """Each node's step (-1: before the first) by its recorded start, a kernel's by its
    launcher's; and the steps' names in time order."""
    step, step_names = host_steps(table, host, names)
    if step_names != [WHOLE_TRACE]:
        step[kernel] = np.where(launcher >= 0, step[np.maximum(launcher, 0)], step[kernel])
    return step, step_names


def step_marks(names: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Whether each node is a step's own node (`ProfilerStep#N`), by name."""
    return to_numpy(on_names(names, lambda distinct: pc.starts_with(distinct, STEP_PREFIX)), False).astype(bool)


def host_steps(table: pa.Table, host: np.ndarray, names: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, list[str]]:
    """Each node's step by its recorded start (-1: untimed or before the first), the steps being
    the timed `ProfilerStep#N` nodes among the host ones; and their names in time order. Without
    them every timed node is in the one step WHOLE_TRACE."""
    start, _ = recorded_times(table)
    return steps_by_start(start, np.flatnonzero(host & (start >= 0) & step_marks(names)), names)


def steps_by_start(start: np.ndarray, marks: np.ndarray, names: pa.Array | pa.ChunkedArray
                   ) -> tuple[np.ndarray, list[str]]:
    """Each node's step by its start (ns, -1: untimed; -1 also before the first), the steps being
    the rows `marks` (timed `ProfilerStep#N` nodes), and their names in time order; without marks
    every timed node is in the one step WHOLE_TRACE."""
    if not len(marks):
        return np.where(start >= 0, 0, -1), [WHOLE_TRACE]
    marks = marks[np.argsort(start[marks], kind="stable")]
    step = np.searchsorted(start[marks], start, side="right") - 1
    step[start < 0] = -1
    return step, names.take(pa.array(marks)).to_pylist()


def launchers(table: pa.Table, rows: np.ndarray) -> np.ndarray:
    """For each selected row (a boolean mask), the row of its first data dependency (-1: none)."""
    selected = np.flatnonzero(rows)
    parents, owner = flat_list(table.column("data_deps").take(pa.array(selected)), len(selected))
    first = np.full(len(selected), -1, np.int64)
    if len(parents):
        is_first = np.r_[True, owner[1:] != owner[:-1]]
        first[owner[is_first]] = _rows_of(table, parents[is_first])
    return first


def _windows(step: np.ndarray, start: np.ndarray, end: np.ndarray, timed: np.ndarray, steps: int) -> intervals.Intervals:
    """Step k runs from its first node's start to step k+1's; the last to its last end."""
    firsts = np.full(steps, np.iinfo(np.int64).max, np.int64)
    inside = timed & (step >= 0)
    np.minimum.at(firsts, step[inside], start[inside])
    last = end[inside & (step == steps - 1)]
    ends = np.r_[firsts[1:], last.max() if len(last) else firsts[-1]]
    return firsts, np.maximum(ends, firsts)


def _device_groups(table: pa.Table) -> np.ndarray:
    """Whether each node's process group runs on the device (all True when the trace does
    not say any group's backend)."""
    backends = {}
    for text in table.filter(pc.equal(table.column("type"), METADATA)).column("inputs").to_pylist():
        backends.update(_group_backends((text or {}).get("values") or ""))
    if not backends:
        return np.ones(table.num_rows, bool)
    device = [name for name, backend in backends.items() if DEVICE_BACKENDS.search(backend)]
    return to_numpy(pc.is_in(table.column("pg_name"), value_set=pa.array(device, pa.string())), False)


def _group_backends(values: str) -> dict[str, str]:
    """pg_name -> backend_config from a metadata node's Python-literal `['<json>']`."""
    try:
        groups = json.loads(values[2:-2])
    except ValueError:
        return {}
    if not isinstance(groups, list):
        return {}
    return {str(g.get("pg_name")): str(g.get("backend_config") or "") for g in groups if isinstance(g, dict)}


def _sync(names: pa.ChunkedArray, rows: np.ndarray, start: np.ndarray, end: np.ndarray) -> intervals.Intervals:
    selected = np.flatnonzero(rows)
    encoded = names.take(pa.array(selected)).combine_chunks().dictionary_encode()
    waits = np.array([bool(SYNC_OPS.search(n or "")) for n in encoded.dictionary.to_pylist()] or [False])
    chosen = selected[waits[encoded.indices.to_numpy(zero_copy_only=False)]]
    return intervals.union(start[chosen], end[chosen])
