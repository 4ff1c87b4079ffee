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
  per block), which needs M to be a multiple of N;
- communicator sub-groups (pg_name naming a group) likewise repeat per block of N NPUs (a
  tensor- or pipeline-parallel group inside each data-parallel replica), each block's copy a
  group of its own; a group of all N traced ranks spans all M NPUs, as the world does. The
  trace does not record the layout: this is the one assumed, and printed.
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


def _groups_by_block(groups: dict[int, tuple[int, ...]], traced: int, npus: int
                     ) -> tuple[dict[int, tuple[int, ...]], int]:
    """The M-NPU job's groups and the id step between blocks: block b's copy of group g is
    group g + b * step (block 0 keeps the traced ids); a group of every traced rank spans all
    NPUs under its own id."""
    step = max(groups, default=0) + 1
    scaled = {}
    for group, members in groups.items():
        if set(members) == set(range(traced)):
            scaled[group] = tuple(range(npus))
            continue
        for block in range(npus // traced):
            scaled[group + block * step] = tuple(member + block * traced for member in members)
    return scaled, step


def _rename_groups(table: pa.Table, groups: dict[int, tuple[int, ...]], traced: int, offset: int) -> pa.Table:
    """pg_name of the sub-groups (not those of every traced rank) moved on by `offset` ids."""
    own = [g for g, members in groups.items() if set(members) != set(range(traced))]
    if not offset or not own:
        return table
    position = pc.index_in(table.column("pg_name"), value_set=pa.array([str(g) for g in own]))
    renamed = pc.take(pa.array([str(g + offset) for g in own]), position)
    column = pc.if_else(pc.is_valid(position), renamed, table.column("pg_name"))
    index = table.schema.get_field_index("pg_name")
    return table.set_column(index, table.schema.field("pg_name"), column)


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


def scale_job(tables: list[pa.Table], npus: int, scaling: str = "weak",
              groups: dict[int, tuple[int, ...]] | None = None
              ) -> tuple[list[pa.Table], dict[int, tuple[int, ...]], list[str]]:
    """M = npus node tables from the N traced ones, their communicator groups (from the traced
    `groups`), and the assumptions made (to print)."""
    traced, groups = len(tables), groups or {}
    if scaling not in ("weak", "strong"):
        raise SimulationError(f"scaling {scaling!r}: expected 'weak' or 'strong'")
    tables = [normalize_table(t) for t in tables]
    sub_groups = any(_uses_sub_groups(t) for t in tables)
    point_to_point = any(_has_point_to_point(t) for t in tables)
    for present, what in ((point_to_point, "send/recv nodes"), (sub_groups, "communicator sub-groups")):
        if present and npus % traced:
            raise SimulationError(f"the trace has {what}: it scales only to a multiple of its {traced} NPUs, "
                                  f"not {npus}")
    assumptions = [
        f"traced on {traced} NPU(s), simulated on {npus}: NPU j runs the trace of rank j mod {traced} (data parallel)",
        "collectives over all NPUs run on all simulated NPUs, each NPU keeping its traced comm_size",
        "weak scaling: every NPU keeps its traced compute" if scaling == "weak" else
        f"strong scaling: compute durations and num_ops multiplied by {traced}/{npus}",
    ]
    if point_to_point:
        assumptions.append(f"send/recv peers keep their offset within each block of {traced} NPUs")
    if sub_groups:
        assumptions.append(f"communicator sub-groups repeat in each block of {traced} NPUs, each copy a group of its "
                           "own; a group of every traced rank spans all NPUs")
    if scaling == "strong":
        tables = [_scale_compute(t, traced / npus) for t in tables]
    scaled_groups, step = _groups_by_block(groups, traced, npus) if sub_groups else (groups, 0)
    scaled = []
    for npu in range(npus):
        table = tables[npu % traced]
        block = npu - npu % traced
        if point_to_point and block:
            table = _shift_peers(table, block)
        if sub_groups and block:
            table = _rename_groups(table, groups, traced, block // traced * step)
        scaled.append(table)
    return scaled, scaled_groups, assumptions
