"""The output rows of one rank's conversion (conversion.RankConversion.emit_rows): the kept host
nodes, then the device work, gathered into the Chakra node table batch by batch, each batch made
when the writer asks for it (pytorch/job.py), so that the whole table never exists at once."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from operator import attrgetter

import numpy as np
import pyarrow as pa

from chakra_core.convert.pytorch import deps
from chakra_core.convert.pytorch.et import ID_ATTRS, HostTrace
from chakra_core.convert.pytorch.kineto import DeviceEvent, column, streams
from chakra_core.format.columns import IO_INFO_TYPE, NODE_SCHEMA
from chakra_core.format.etfile import WRITE_BATCH_NODES
from chakra_core.format.normalize import normalize_table
from chakra_core.format.nodetypes import COLL, COMP, RECV, SEND

COMM_COLUMNS = (("comm_type", pa.int64()), ("comm_size", pa.int64()), ("comm_src", pa.int64()),
                ("comm_dst", pa.int64()), ("comm_tag", pa.int64()), ("pg_name", pa.string()))


@dataclass
class Kernels:
    """The device work's rows, in launch order, as columns: a long trace launches hundreds of
    thousands of kernels."""

    ids: np.ndarray  # int64: each row's node id
    events: list[DeviceEvent]
    launchers: np.ndarray  # int64: the id of the host node that launched it
    previous: np.ndarray  # int64: the id of the work before it on its stream, -1: none

    @classmethod
    def none(cls) -> Kernels:
        empty = np.zeros(0, np.int64)
        return cls(empty, [], empty, empty)

    @classmethod
    def in_order(cls, first_id: int, events: list[DeviceEvent], launchers: np.ndarray) -> Kernels:
        """Rows with ids from first_id on, each after the one before it on the same stream."""
        ids = np.arange(first_id, first_id + len(events), dtype=np.int64)
        stream = streams(events)
        by_stream = np.argsort(stream, kind="stable")
        after = np.flatnonzero(stream[by_stream][1:] == stream[by_stream][:-1])
        previous = np.full(len(events), -1, np.int64)
        previous[by_stream[after + 1]] = ids[by_stream[after]]
        return cls(ids, events, launchers, previous)

    def __len__(self) -> int:
        return len(self.ids)


class NodeRows:
    """The output rows: the kept host nodes (columns over host indices, in id order), then the
    device kernels. Everything that comes from the host trace is gathered by index."""

    def __init__(self, host_index: np.ndarray, host: HostTrace):
        self.host_index, self.host = host_index, host
        self.types = self.start = self.duration = self.ctrl = None  # numpy columns, set by emit
        self.data: tuple[np.ndarray, np.ndarray] = (np.zeros(0, np.int64), np.zeros(0, np.int64))  # (row, row)
        self.comm: dict[int, dict] = {}  # row -> comm_type/comm_size/comm_src/comm_dst/comm_tag/pg_name
        self.inputs_override: dict[int, tuple[str, str, str]] = {}
        self.kernels = Kernels.none()
        self.device_deps: list[tuple[int, int]] = []  # (host row, id of the device work it waited for)
        self.no_num_ops: set[int] = set()  # host indices whose num_ops an inner op already counts
        self.children: np.ndarray | None = None  # per host index, the host nodes directly inside it

    def table(self) -> pa.Table:
        """The whole node table at once (a caller that keeps it); see batches."""
        return pa.Table.from_batches(list(self.batches()), NODE_SCHEMA)

    def batches(self, batch_nodes: int = WRITE_BATCH_NODES) -> Iterator[pa.RecordBatch]:
        """The node table as record batches of at most batch_nodes rows, each built when asked
        for: written one by one, the whole table never exists at once (a long trace's largest
        moment). The host rows come first, then the kernels'."""
        columns, n_host = _HostColumns(self, self.host), len(self.host_index)
        ranges = range(0, n_host, batch_nodes) if n_host or self.kernels else [0]  # no rows: one empty batch
        made = itertools.chain((columns.batch(lo, min(lo + batch_nodes, n_host)) for lo in ranges),
                               (self._kernel_batch(lo, min(lo + batch_nodes, len(self.kernels)))
                                for lo in range(0, len(self.kernels), batch_nodes)))
        for batch in made:  # each brought to the node-table schema, as the writer takes it
            yield from normalize_table(pa.Table.from_batches([batch])).to_batches()

    def _kernel_batch(self, lo: int, hi: int) -> pa.RecordBatch:
        """Rows of device work: what Kineto measured, launched by (a data dependency on) a host row."""
        n, kernels, events = hi - lo, self.kernels, self.kernels.events[lo:hi]
        ids, launchers, previous = kernels.ids[lo:hi], kernels.launchers[lo:hi], kernels.previous[lo:hi]
        ts, dur = column(events, "ts"), column(events, "dur")
        has_previous = previous >= 0
        return pa.RecordBatch.from_pydict({
            "id": pa.array(ids, pa.uint64()),
            "name": pa.array(list(map(attrgetter("name"), events)), pa.string()),
            "type": pa.array(np.full(n, COMP, np.int32)),
            "ctrl_deps": pa.ListArray.from_arrays(pa.array(np.r_[0, np.cumsum(has_previous)], pa.int32()),
                                                  pa.array(previous[has_previous], pa.uint64())),
            "data_deps": pa.ListArray.from_arrays(pa.array(np.arange(n + 1), pa.int32()), pa.array(launchers, pa.uint64())),
            "start_time_micros": pa.array(ts.astype(np.int64), pa.uint64()),  # int(ts): toward zero
            "duration_micros": pa.array(np.maximum(0, np.rint(dur)).astype(np.int64), pa.uint64()),
            # Kineto times device work to the ns: kept, as a kernel of 2.4 us is not one of 2 us
            "duration_ns": pa.array(np.maximum(0, np.rint(dur * 1000)).astype(np.int64), pa.int64()),
            "is_cpu_op": pa.array(np.zeros(n, bool), pa.bool_()),
            "stream": pa.array(list(map(attrgetter("stream"), events)), pa.int64()),
        })

    def _launch_calls(self, host_ids: np.ndarray) -> np.ndarray:
        """Per host row, the runtime calls that launched its device work where they were fewer
        than the work (a CUDA graph's replay: one cudaGraphLaunch, many kernels sharing its
        correlation id); 0 elsewhere (one call per kernel, copy or memset; written null). Work
        without a correlation counts as a call of its own."""
        found, n = np.zeros(len(host_ids), np.int64), len(self.kernels)
        if not n:
            return found
        launchers = self.kernels.launchers
        correlation, known = column(self.kernels.events, "correlation")
        call = np.where(known, correlation, np.arange(n))  # with `known`, distinct per call
        order = np.lexsort((call, known, launchers))
        launcher, known, call = launchers[order], known[order], call[order]
        new_launcher = np.r_[True, launcher[1:] != launcher[:-1]]
        new_call = new_launcher | np.r_[True, (known[1:] != known[:-1]) | (call[1:] != call[:-1])]
        first = np.flatnonzero(new_launcher)
        items, calls = np.diff(np.r_[first, n]), np.add.reduceat(new_call.astype(np.int64), first)
        fewer = calls < items
        if fewer.any():  # host ids are distinct: each launcher is one row
            fewer_ids, fewer_calls = launcher[first][fewer], calls[fewer]  # launcher ids sorted
            at = np.minimum(np.searchsorted(fewer_ids, host_ids), len(fewer_ids) - 1)
            rows = np.flatnonzero(fewer_ids[at] == host_ids)
            found[rows] = fewer_calls[at[rows]]
        return found

    def _data_deps(self, host_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(offsets, parent ids) of the host rows' data_deps: tensor flow and waits, minus what
        ctrl_deps already says."""
        n_host = len(self.host_index)
        readers, writers = self.data
        keep = writers != self.ctrl[readers] if len(readers) else np.zeros(0, bool)
        unique = deps.sorted_unique(readers[keep] * (n_host + 1) + writers[keep])
        readers, writers = unique // (n_host + 1), unique % (n_host + 1)
        parent_ids = host_ids[writers]
        if self.device_deps:  # a host node after a synchronisation waits for device work
            readers = np.r_[readers, [row for row, _ in self.device_deps]].astype(np.int64)
            parent_ids = np.r_[parent_ids, [kernel for _, kernel in self.device_deps]].astype(parent_ids.dtype)
        order = np.lexsort((parent_ids, readers))
        readers, parent_ids = readers[order], parent_ids[order]
        data_offsets = np.r_[0, np.cumsum(np.bincount(readers, minlength=n_host))] if n_host else np.zeros(1, np.int64)
        return data_offsets, parent_ids


class _HostColumns:
    """The host rows' columns, as numpy arrays over every row (a few bytes each), cut into record
    batches on demand; the text (names, schemas, inputs and outputs) is gathered per batch."""

    def __init__(self, rows: NodeRows, host: HostTrace):
        self.rows, self.host = rows, host
        index = rows.host_index
        n_host, types = len(index), rows.types
        self.ids = np.frombuffer(host.ids, np.int64)[index] if n_host else np.zeros(0, np.int64)
        self.num_ops, self.tensor_bytes = self.gather(host.num_ops), self.gather(host.tensor_bytes)
        self.counted = (self.num_ops >= 0) & (types == COMP)
        if rows.no_num_ops:
            self.counted &= ~np.isin(index, np.fromiter(rows.no_num_ops, np.int64))
        has_ctrl = rows.ctrl >= 0  # ctrl_deps: at most one per host row
        self.ctrl_offsets = np.r_[0, np.cumsum(has_ctrl)]
        self.ctrl_values = self.ids[rows.ctrl[has_ctrl]]
        self.data_offsets, self.parent_ids = rows._data_deps(self.ids)
        self.on_cpu = (types != COLL) & (types != SEND) & (types != RECV)
        self.comm_position = np.full(n_host, -1, np.int64)  # row -> its entry in rows.comm, -1: none
        self.comm_position[np.fromiter(rows.comm, np.int64, len(rows.comm))] = np.arange(len(rows.comm))
        attrs = list(rows.comm.values())  # built once: each batch takes its rows' entries
        self.comm_columns = {key: pa.array([a.get(key) for a in attrs], arrow_type) for key, arrow_type in COMM_COLUMNS}
        self.children = rows.children[index] if rows.children is not None else np.zeros(n_host, np.int64)
        self.launch_calls = rows._launch_calls(self.ids)
        self.io_starts = np.cumsum([0] + [len(chunk) for chunk in host.io_chunks])

    def gather(self, values) -> np.ndarray:
        index = self.rows.host_index
        return np.frombuffer(values, np.int64)[index] if len(index) else np.zeros(0, np.int64)

    def batch(self, lo: int, hi: int) -> pa.RecordBatch:
        rows, host, index = self.rows, self.host, self.rows.host_index[lo:hi]
        counted, children, calls = self.counted[lo:hi], self.children[lo:hi], self.launch_calls[lo:hi]
        inputs, outputs = self._io(index, lo, hi)
        return pa.RecordBatch.from_pydict({
            "id": pa.array(self.ids[lo:hi], pa.uint64()),
            "name": pa.array([host.names[i] for i in index.tolist()], pa.string()),
            "type": pa.array(rows.types[lo:hi], pa.int32()),
            "ctrl_deps": _lists(self.ctrl_offsets, self.ctrl_values, lo, hi),
            "data_deps": _lists(self.data_offsets, self.parent_ids, lo, hi),
            "start_time_micros": pa.array(rows.start[lo:hi], pa.uint64()),
            "duration_micros": pa.array(rows.duration[lo:hi], pa.uint64()),
            "inputs": inputs,
            "outputs": outputs,
            "is_cpu_op": pa.array(self.on_cpu[lo:hi], pa.bool_()),
            "num_ops": pa.array(self.num_ops[lo:hi], pa.int64(), mask=~counted),
            "tensor_size": pa.array(self.tensor_bytes[lo:hi], pa.uint64(), mask=~counted),
            **self._comm(lo, hi),
            **{k: pa.array(np.frombuffer(host.attr_columns[k], np.int64)[index], pa.int64()) for k in ID_ATTRS},
            "children": pa.array(children, pa.int64(), mask=children == 0),
            "launch_calls": pa.array(calls, pa.int64(), mask=calls == 0),
            "op_schema": pa.array([host.op_schemas[i] for i in index.tolist()], pa.string()),
        })

    def _comm(self, lo: int, hi: int) -> dict[str, pa.Array]:
        """The communication columns: null everywhere but on the (few) communication rows."""
        position = self.comm_position[lo:hi]
        take = pa.array(position, mask=position < 0)
        return {key: column.take(take) for key, column in self.comm_columns.items()}

    def _io(self, index: np.ndarray, lo: int, hi: int) -> tuple[pa.Array, pa.Array]:
        """The rows' inputs and outputs, with the rows whose inputs were rewritten spliced in."""
        if not self.host.io_chunks or not len(index):
            return pa.nulls(len(index), IO_INFO_TYPE), pa.nulls(len(index), IO_INFO_TYPE)
        io = self._gathered_io(index)
        inputs, outputs = io.field("inputs").cast(IO_INFO_TYPE), io.field("outputs").cast(IO_INFO_TYPE)
        for row, (values, shapes, types_text) in sorted(self.rows.inputs_override.items()):  # a row or two
            if lo <= row < hi:
                replacement = pa.array([{"values": values, "shapes": shapes, "types": types_text}], IO_INFO_TYPE)
                inputs = pa.concat_arrays([inputs.slice(0, row - lo), replacement, inputs.slice(row - lo + 1)])
        return inputs, outputs


    def _gathered_io(self, index: np.ndarray) -> pa.StructArray:
        """The io rows of these host indices, taken chunk by chunk: a take from the chunked array
        would first join every chunk (all of the trace's tensor text) into one, for each batch.
        Rows in id order are mostly in file order: a run of consecutive rows of a chunk is a
        slice of it (no copy), and rows already in chunk order need no final reordering."""
        chunk = np.searchsorted(self.io_starts, index, "right") - 1
        parts = []
        for c in np.unique(chunk).tolist():
            at = index[chunk == c] - self.io_starts[c]
            consecutive = at[-1] - at[0] == len(at) - 1 and bool(np.all(np.diff(at) == 1))
            parts.append(self.host.io_chunks[c].slice(int(at[0]), len(at)) if consecutive
                         else self.host.io_chunks[c].take(pa.array(at)))
        joined = pa.concat_arrays(parts)
        if bool(np.all(np.diff(chunk) >= 0)):  # already grouped by chunk, in the batch's order
            return joined
        order = np.argsort(chunk, kind="stable")  # grouped by chunk, in the batch's order within each
        where = np.empty_like(order)
        where[order] = np.arange(len(order))  # row j of the batch is part row where[j]
        return joined.take(pa.array(where))


def _lists(offsets: np.ndarray, values: np.ndarray, lo: int, hi: int) -> pa.Array:
    """Rows lo..hi of a list column given as (offsets, values) over every row."""
    start, end = offsets[lo], offsets[hi]
    return pa.ListArray.from_arrays(pa.array(offsets[lo:hi + 1] - start, pa.int32()),
                                    pa.array(values[start:end], pa.uint64()))
