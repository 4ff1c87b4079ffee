"""A node's duration in ns: the one reading of it for statistics, the simulator and the timeline.

A Chakra ET holds whole microseconds (`duration_micros`, the field ASTRA-sim reads); a
conversion that timed a node finer (device work from Kineto, an operator of a JAX profile) also
writes the well-known attribute `duration_ns` (format/columns.py). A kernel of 1.4 µs is then
1,400 ns, not 1,000: over the thousands of short kernels of a launch-bound step the rounding
would otherwise add up to whole percent.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc


def durations_ns(table: pa.Table) -> pa.Array:
    """Every node's duration in ns (int64, no nulls): its `duration_ns` where it has one (and
    it is not negative), else `duration_micros` x 1000 (0 where neither is set; a table may
    lack either column)."""
    if "duration_micros" in table.column_names:
        micros = pc.multiply(pc.cast(pc.fill_null(table.column("duration_micros"), 0), pa.int64()), 1000)
    else:
        micros = pa.nulls(table.num_rows, pa.int64()).fill_null(0)
    if "duration_ns" in table.column_names:
        fine = pc.cast(table.column("duration_ns"), pa.int64())
        micros = pc.if_else(pc.fill_null(pc.greater_equal(fine, 0), False), fine, micros)
    return micros.combine_chunks() if isinstance(micros, pa.ChunkedArray) else micros
