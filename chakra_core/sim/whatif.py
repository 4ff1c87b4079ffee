"""What-if scaling: run a job traced on N NPUs as if it ran on M NPUs.

ASTRA-sim needs one trace per simulated NPU; a fleet trace exists only for the NPU count it
was collected on. This module makes M per-NPU node tables out of N, under assumptions that
are printed with every result (`assumptions`):

- data parallelism: NPU j of M runs the program of traced rank j mod N (every rank of a
  data-parallel job runs the same graph on its own shard of the batch);
- collectives over all NPUs are re-sized to the new group simply by running on all M NPUs
  (the group is "everyone"); their per-NPU comm_size is kept: a gradient all-reduce moves
  the model's gradients whatever the replica count;
- weak scaling (default): each NPU keeps its compute (the global batch grows with M);
  strong scaling: compute durations (and num_ops) are multiplied by N / M (the global batch
  is fixed and each NPU's share shrinks);
- send/recv: the peer keeps its offset within a block of N NPUs (pipeline stages repeat
  per block), which needs M to be a multiple of N.

Traces with communicator sub-groups (pg_name naming a group) are refused: how their groups
map to M NPUs depends on the parallelism layout, which a trace does not record.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from chakra_core.format.columns import NODE_TYPE_VALUES
from chakra_core.format.normalize import normalize_table
from chakra_core.sim.errors import SimulationError
from chakra_core.sim.workload.nodes import DEFAULT_GROUP_NAMES

SEND, RECV = NODE_TYPE_VALUES["COMM_SEND_NODE"], NODE_TYPE_VALUES["COMM_RECV_NODE"]
COMP = NODE_TYPE_VALUES["COMP_NODE"]


def _uses_sub_groups(table: pa.Table) -> bool:
    pg = table.column("pg_name")
    named = pc.and_(pc.is_valid(pg), pc.invert(pc.is_in(pg, pa.array(DEFAULT_GROUP_NAMES))))
    return bool(pc.any(named).as_py())


def _has_point_to_point(table: pa.Table) -> bool:
    return bool(pc.any(pc.is_in(table.column("type"), pa.array([SEND, RECV], pa.int32()))).as_py())


def _shift_peers(table: pa.Table, block_start: int) -> pa.Table:
    """Moves comm_src / comm_dst of send and recv nodes into the NPU block starting at block_start."""
    for name in ("comm_src", "comm_dst"):
        column = table.column(name)
        moved = pc.if_else(pc.is_valid(column), pc.add(column, block_start), column)
        table = table.set_column(table.schema.get_field_index(name), table.schema.field(name), moved)
    return table


def _scale_compute(table: pa.Table, factor: float) -> pa.Table:
    is_comp = pc.equal(table.column("type"), COMP)
    for name in ("duration_micros", "duration_ns", "num_ops"):
        column = table.column(name)
        scaled = pc.cast(pc.floor(pc.multiply(pc.cast(column, pa.float64()), factor)), column.type)
        table = table.set_column(table.schema.get_field_index(name), table.schema.field(name),
                                 pc.if_else(is_comp, scaled, column))
    return table


def scale_job(tables: list[pa.Table], npus: int, scaling: str = "weak") -> tuple[list[pa.Table], list[str]]:
    """M = npus node tables from the N traced ones, and the assumptions made (to print)."""
    traced = len(tables)
    if scaling not in ("weak", "strong"):
        raise SimulationError(f"scaling {scaling!r}: expected 'weak' or 'strong'")
    tables = [normalize_table(t) for t in tables]
    if any(_uses_sub_groups(t) for t in tables):
        raise SimulationError("what-if scaling of a trace with communicator sub-groups (pg_name) is not supported: "
                              "how the groups map to a new NPU count depends on the parallelism layout")
    point_to_point = any(_has_point_to_point(t) for t in tables)
    if point_to_point and npus % traced:
        raise SimulationError(f"the trace has send/recv nodes: it scales only to a multiple of its {traced} NPUs, "
                              f"not {npus}")
    assumptions = [
        f"traced on {traced} NPU(s), simulated on {npus}: NPU j runs the trace of rank j mod {traced} (data parallel)",
        "collectives over all NPUs run on all simulated NPUs, each NPU keeping its traced comm_size",
        "weak scaling: every NPU keeps its traced compute" if scaling == "weak" else
        f"strong scaling: compute durations and num_ops multiplied by {traced}/{npus}",
    ]
    if point_to_point:
        assumptions.append(f"send/recv peers keep their offset within each block of {traced} NPUs")
    if scaling == "strong":
        tables = [_scale_compute(t, traced / npus) for t in tables]
    scaled = []
    for npu in range(npus):
        table = tables[npu % traced]
        block = npu - npu % traced
        scaled.append(_shift_peers(table, block) if point_to_point and block else table)
    return scaled, assumptions
