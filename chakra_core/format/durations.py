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


MAX_NS = 2**63 - 1  # an int64's largest: a duration beyond it (a corrupt trace's) is this, never wrapped


def durations_ns(table: pa.Table) -> pa.Array:
    """Every node's duration in ns (int64, no nulls): its `duration_ns` where it has one (and
    it is not negative), else `duration_micros` x 1000, at most MAX_NS (0 where neither is set;
    a table may lack either column). An int64 product would wrap a corrupt 2**62 µs to 0 ns."""
    if "duration_micros" in table.column_names:
        column = table.column("duration_micros")
        cap = pa.scalar(MAX_NS // 1000 + 1).cast(column.type)  # in the column's own type: uint64 needs no cast
        whole = pc.cast(pc.min_element_wise(pc.fill_null(column, 0), cap), pa.int64())
        micros = pc.if_else(pc.greater(whole, MAX_NS // 1000), MAX_NS, pc.multiply(whole, 1000))
    else:
        micros = pa.nulls(table.num_rows, pa.int64()).fill_null(0)
    if "duration_ns" in table.column_names:
        fine = pc.cast(table.column("duration_ns"), pa.int64())
        micros = pc.if_else(pc.fill_null(pc.greater_equal(fine, 0), False), fine, micros)
    return micros.combine_chunks() if isinstance(micros, pa.ChunkedArray) else micros
