"""A converted trace repeated K times into one consistent, K times longer trace, for the tests
and benchmarks of big traces (tests/benchmarks/bench_big_analysis.py, tests/test_big_traces.py).

Each copy's ids are shifted past the copy before it, its dependencies kept within the copy, a
control dependency added from copy k's last node to copy k+1's first, its recorded times
shifted by the trace's span and its `ProfilerStep#N` steps renumbered: one profiled window K
times as long, written with the project's ET writer.
"""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

STEP = re.compile(r"^ProfilerStep#(\d+)$")


def _shifted_lists(column: pa.ChunkedArray, shift: int) -> pa.Array:
    lists = column.combine_chunks()
    values = pc.add(lists.values, pa.scalar(shift, pa.uint64()))
    return pa.ListArray.from_arrays(lists.offsets, values, type=lists.type)


def _step_names(names: pa.ChunkedArray, steps: int, copy: int) -> pa.Array:
    """The names with `ProfilerStep#N` renumbered N + copy * steps."""
    values = names.to_pylist()
    for i, name in enumerate(values):
        found = STEP.match(name or "")
        if found:
            values[i] = f"ProfilerStep#{int(found.group(1)) + copy * steps}"
    return pa.array(values, pa.string())


def repeat_trace(src: str, dst: str, k: int) -> int:
    """Writes `src` repeated k times into `dst` (see the module docstring); returns the node count."""
    from chakra_core.format.etfile import ETReader, ETWriter

    with ETReader(src) as reader:
        table, metadata = reader.read_table(), reader.metadata_bytes
    ids = table.column("id").to_numpy()
    id_span = int(ids.max()) + 1  # copies never share an id, whatever the first one is
    start = table.column("start_time_micros").to_numpy()
    end = start + table.column("duration_micros").to_numpy()
    timed = start > 0
    time_span = int(end[timed].max() - start[timed].min()) + 1
    steps = [int(m.group(1)) for m in map(STEP.match, table.column("name").to_pylist()) if m]
    n_steps = max(steps) - min(steps) + 1 if steps else 0
    with ETWriter(dst, metadata) as writer:
        for copy in range(k):
            shift = copy * id_span
            ctrl = _shifted_lists(table.column("ctrl_deps"), shift)
            if copy:  # chain: this copy's first node waits for the previous copy's last
                first = ctrl[0].values.to_pylist() + [int(ids[-1]) + shift - id_span]
                ctrl = pa.concat_arrays([pa.array([first], ctrl.type), ctrl.slice(1)])
            moved = np.where(timed, start + copy * time_span, start).astype(np.uint64)
            copied = table.set_column(table.schema.get_field_index("id"), "id", pa.array(ids + np.uint64(shift)))
            for name, column in (("ctrl_deps", ctrl), ("data_deps", _shifted_lists(table.column("data_deps"), shift)),
                                 ("start_time_micros", pa.array(moved)),
                                 ("name", _step_names(table.column("name"), n_steps, copy))):
                copied = copied.set_column(copied.schema.get_field_index(name), name, column)
            writer.write_table(copied)
        return writer.nodes_written
