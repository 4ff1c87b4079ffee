"""What every source's converted trace keeps (docs/architecture.md, 'Trace sources'): the analysis,
the simulator and the nightly tables rely on it, whichever source wrote the job.

- A job is `<prefix>.<R>.et` for ranks 0..N-1 and `<prefix>.comm_groups.json` (format/job.py).
- Host and device: a node with `is_cpu_op` true ran on the host; one with it false on the NPU.
  Only device nodes carry a `stream`.
- Launches: a device kernel, copy or memset is a COMP node off the CPU with its `stream`; its
  first data dependency is the host operator that launched it (analysis/device_work.py).
- Steps: a training step is a host COMP node named `ProfilerStep#N` (one per N); a node belongs
  to the step its recorded start falls in. A trace without them is one step.
- Communicator groups: a communication node's `pg_name` is "0" (or absent: all NPUs) or the id
  of a group of the job's groups file, whose members are ranks of the job.
- Every dependency names a node of the same trace, and the validator finds no error in it.

`problems(job)` lists where a converted job breaks these (tests/test_sources.py runs it on every
source of the registry).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from chakra_core.analysis.device_work import STEP_PREFIX, launchers, step_marks
from chakra_core.format.depgraph import to_numpy
from chakra_core.format.job import Job
from chakra_core.format.nodetypes import COMM_NODE_TYPES, COMP

WORLD_GROUP = "0"


def problems(job: Job) -> list[str]:
    """Every way the job's ranks break the conventions above, one line each (first few per rank)."""
    from chakra_core.analysis.validate import validate_table

    found = []
    for rank, table in enumerate(job.tables):
        where = f"rank {rank}"
        found += [f"{where}: {x.message}" for x in validate_table(table, where) if x.severity == "error"]
        found += [f"{where}: {line}" for line in _rank_problems(table, job)]
    return found


def _rank_problems(table: pa.Table, job: Job) -> list[str]:
    types = to_numpy(table.column("type"))
    on_cpu = to_numpy(table.column("is_cpu_op"), True).astype(bool)
    stream = to_numpy(pc.is_valid(table.column("stream")), False).astype(bool)
    names = table.column("name").combine_chunks()
    found = []
    if (stream & on_cpu).any():
        found.append(f"{int((stream & on_cpu).sum())} host node(s) with a stream")
    kernels = np.flatnonzero((types == COMP) & ~on_cpu & stream)
    launcher = launchers(table, (types == COMP) & ~on_cpu & stream)
    unlaunched = (launcher < 0) | ~on_cpu[np.maximum(launcher, 0)]
    if unlaunched.any():
        found.append(f"{int(unlaunched.sum())} device kernel(s) whose first data dependency is not a host node "
                     f"(the first: {names[int(kernels[unlaunched][0])].as_py()!r})")
    steps = np.flatnonzero(step_marks(names))
    if steps.size and ((types[steps] != COMP) | ~on_cpu[steps]).any():
        found.append(f"{STEP_PREFIX}N nodes that are not host COMP nodes")
    step_names = names.take(pa.array(steps)).to_pylist()
    if len(set(step_names)) != len(step_names):
        found.append(f"two {STEP_PREFIX}N nodes of one N")
    comm = np.isin(types, COMM_NODE_TYPES)
    groups = {WORLD_GROUP, *map(str, job.comm_groups)}
    named = set(pc.unique(table.column("pg_name").filter(pa.array(comm))).to_pylist()) - {None, ""}
    if named - groups:
        found.append(f"communication in group(s) {sorted(named - groups)} that the groups file does not define")
    outside = sorted({m for members in job.comm_groups.values() for m in members if not 0 <= m < job.npus})
    if outside:
        found.append(f"groups name NPU(s) {outside[:4]} outside the job's {job.npus}")
    return found
