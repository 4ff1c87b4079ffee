"""The output rows of one rank's conversion (convert/pytorch.py): the kept host nodes, then the
device work, gathered into the Chakra node table."""

from __future__ import annotations

from collections import Counter, defaultdict

import numpy as np
import pyarrow as pa

from chakra_core.convert.pytorch import deps
from chakra_core.convert.pytorch.et import ID_ATTRS, HostTrace
from chakra_core.format.columns import IO_INFO_TYPE
from chakra_core.format.nodetypes import COLL, COMP, RECV, SEND


class NodeRows:
    """The output rows: the kept host nodes (columns over host indices, in id order), then the
    device kernels. Everything that comes from the host trace is gathered by index."""

    def __init__(self, host_index: np.ndarray):
        self.host_index = host_index
        self.types = self.start = self.duration = self.ctrl = None  # numpy columns, set by emit
        self.data: tuple[np.ndarray, np.ndarray] = (np.zeros(0, np.int64), np.zeros(0, np.int64))  # (row, row)
        self.comm: dict[int, dict] = {}  # row -> comm_type/comm_size/comm_src/comm_dst/comm_tag/pg_name
        self.inputs_override: dict[int, tuple[str, str, str]] = {}
        self.kernels: list[tuple] = []  # (id, DeviceEvent, launcher id, previous id on its stream)
        self.device_deps: list[tuple[int, int]] = []  # (host row, id of the device work it waited for)
        self.no_num_ops: set[int] = set()  # host indices whose num_ops an inner op already counts
        self.children: np.ndarray | None = None  # per host index, the host nodes directly inside it

    def table(self, host: HostTrace) -> pa.Table:
        index, kernels = self.host_index, self.kernels
        n_host, n_kernels = len(index), len(kernels)
        types = self.types
        host_ids = np.frombuffer(host.ids, np.int64)[index] if n_host else np.zeros(0, np.int64)

        def gather(values) -> np.ndarray:
            return np.frombuffer(values, np.int64)[index] if n_host else np.zeros(0, np.int64)

        def with_kernels(array: pa.Array, kernel_values=None) -> pa.ChunkedArray:
            """Host rows then kernel rows, as two chunks (no copy of the host column)."""
            tail = pa.array(kernel_values, array.type) if kernel_values is not None else pa.nulls(n_kernels, array.type)
            return pa.chunked_array([array, tail], array.type)

        comm_rows = np.fromiter(self.comm, np.int64, len(self.comm))
        position = np.full(n_host + n_kernels, -1, np.int64)  # row -> its entry in self.comm, -1: none
        position[comm_rows] = np.arange(len(comm_rows))
        position = pa.array(position, mask=position < 0)

        def comm_column(key: str, arrow_type) -> pa.Array:
            """A column null everywhere but on the (few) communication rows."""
            return pa.array([attrs.get(key) for attrs in self.comm.values()], arrow_type).take(position)

        num_ops = gather(host.num_ops)
        counted = (num_ops >= 0) & (types == COMP)
        if self.no_num_ops:
            counted &= ~np.isin(index, np.fromiter(self.no_num_ops, np.int64))
        # ctrl_deps: at most one per host row; kernels follow their stream
        has_ctrl = self.ctrl >= 0
        ctrl_offsets = np.r_[0, np.cumsum(has_ctrl)]
        ctrl_values = host_ids[self.ctrl[has_ctrl]]
        kernel_ctrl = [[k[3]] if k[3] is not None else [] for k in kernels]
        ctrl_deps = with_kernels(
            pa.ListArray.from_arrays(pa.array(ctrl_offsets, pa.int32()), pa.array(ctrl_values, pa.uint64())),
            kernel_ctrl)
        data_offsets, parent_ids = self._data_deps(host_ids)
        data_deps = with_kernels(
            pa.ListArray.from_arrays(pa.array(data_offsets, pa.int32()), pa.array(parent_ids, pa.uint64())),
            [[k[2]] for k in kernels])
        inputs, outputs = self._io(host)
        on_cpu = (types != COLL) & (types != SEND) & (types != RECV)
        return pa.table({
            "id": with_kernels(pa.array(host_ids, pa.uint64()), [k[0] for k in kernels]),
            "name": with_kernels(pa.array(host.names, pa.string()).take(pa.array(index)), [k[1].name for k in kernels]),
            "type": with_kernels(pa.array(types, pa.int32()), [COMP] * n_kernels),
            "ctrl_deps": ctrl_deps,
            "data_deps": data_deps,
            "start_time_micros": with_kernels(pa.array(self.start, pa.uint64()), [int(k[1].ts) for k in kernels]),
            "duration_micros": with_kernels(pa.array(self.duration, pa.uint64()),
                                            [max(0, int(round(k[1].dur))) for k in kernels]),
            # Kineto times device work to the ns: kept, as a kernel of 2.4 us is not one of 2 us
            "duration_ns": with_kernels(pa.nulls(len(host_ids), pa.int64()),
                                        [max(0, int(round(k[1].dur * 1000))) for k in kernels]),
            "inputs": with_kernels(inputs),
            "outputs": with_kernels(outputs),
            "is_cpu_op": with_kernels(pa.array(on_cpu, pa.bool_()), [False] * n_kernels),
            "num_ops": with_kernels(pa.array(num_ops, pa.int64(), mask=~counted)),
            "tensor_size": with_kernels(pa.array(gather(host.tensor_bytes), pa.uint64(), mask=~counted)),
            "comm_type": comm_column("comm_type", pa.int64()),
            "comm_size": comm_column("comm_size", pa.int64()),
            "comm_src": comm_column("comm_src", pa.int64()),
            "comm_dst": comm_column("comm_dst", pa.int64()),
            "comm_tag": comm_column("comm_tag", pa.int64()),
            "pg_name": comm_column("pg_name", pa.string()),
            **{k: with_kernels(pa.array(gather(host.attr_columns[k]), pa.int64())) for k in ID_ATTRS},
            "stream": with_kernels(pa.nulls(n_host, pa.int64()), [k[1].stream for k in kernels]),
            "children": with_kernels(self._children()),
            "launch_calls": with_kernels(self._launch_calls(host_ids)),
            "op_schema": with_kernels(pa.array(host.op_schemas, pa.string()).take(pa.array(index))),
        })


    def _children(self) -> pa.Array:
        """Per host row, the host nodes directly inside it; null (not written) for none."""
        counts = self.children[self.host_index] if self.children is not None else np.zeros(len(self.host_index), np.int64)
        return pa.array(counts, pa.int64(), mask=counts == 0)

    def _launch_calls(self, host_ids: np.ndarray) -> pa.Array:
        """Per host row, the runtime calls that launched its device work where they were fewer
        than the work (a CUDA graph's replay: one cudaGraphLaunch, many kernels sharing its
        correlation id); null elsewhere (one call per kernel, copy or memset)."""
        items, calls = Counter(), defaultdict(set)
        for _, event, launcher, _ in self.kernels:
            items[launcher] += 1
            calls[launcher].add(event.correlation if event.correlation is not None else ("item", id(event)))
        fewer = {launcher: len(ids) for launcher, ids in calls.items() if len(ids) < items[launcher]}
        counts = np.array([fewer.get(i, 0) for i in host_ids.tolist()], np.int64)
        return pa.array(counts, pa.int64(), mask=counts == 0)

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

    def _io(self, host: HostTrace) -> tuple[pa.Array, pa.Array]:
        """The host rows' inputs and outputs, gathered chunk by chunk (no concatenated copy of all
        the text first), with the rows whose inputs were rewritten spliced in."""
        index = self.host_index
        io = pa.chunked_array(host.io_chunks).take(pa.array(index)).combine_chunks() if host.io_chunks and len(index) \
            else None
        inputs = io.field("inputs").cast(IO_INFO_TYPE) if io is not None else pa.nulls(0, IO_INFO_TYPE)
        outputs = io.field("outputs").cast(IO_INFO_TYPE) if io is not None else pa.nulls(0, IO_INFO_TYPE)
        for row, (values, shapes, types_text) in sorted(self.inputs_override.items()):  # a row or two: splice
            replacement = pa.array([{"values": values, "shapes": shapes, "types": types_text}], IO_INFO_TYPE)
            inputs = pa.concat_arrays([inputs.slice(0, row), replacement, inputs.slice(row + 1)])
        return inputs, outputs

