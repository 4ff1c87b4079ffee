"""Loading a job as ASTRA-sim does: one `<prefix>.<npu>.et` per NPU of the network."""

from __future__ import annotations

import pyarrow as pa

from chakra_core.errors import ChakraError
from chakra_core.format.etfile import read_table
from chakra_core.sim.collectives import SimulationError
from chakra_core.sim.config import load_comm_groups, load_network, load_system
from chakra_core.sim.engine import Engine, SimResult
from chakra_core.sim.feeder import GraphFeeder
from chakra_core.sim.whatif import scale_job


def load_tables(prefix: str, npus: int) -> list[pa.Table]:
    """The node tables of NPUs 0..npus-1, read from `<prefix>.<npu>.et` (any fsspec URL)."""
    tables = []
    for npu in range(npus):
        try:
            tables.append(read_table(f"{prefix}.{npu}.et"))
        except ChakraError as exc:
            raise SimulationError(f"workload for NPU {npu} of {npus}: {exc}") from None
    return tables


def load_workload(prefix: str, npus: int) -> list[GraphFeeder]:
    """The feeders of NPUs 0..npus-1 (load_tables, then each graph checked and indexed)."""
    feeders = []
    for npu, table in enumerate(load_tables(prefix, npus)):
        try:
            feeders.append(GraphFeeder(table, path=f"{prefix}.{npu}.et"))
        except ChakraError as exc:
            raise SimulationError(f"workload for NPU {npu} of {npus}: {exc}") from None
    return feeders


def simulate_files(prefix: str, network_url: str, system_url: str, comm_group_url: str | None = None,
                   mode: str = "unaware", traced_npus: int | None = None, scaling: str = "weak",
                   record_timeline: bool = False, **knobs) -> tuple[SimResult, list[str]]:
    """`chakra simulate`: the workload files against an ASTRA-sim network YAML and system JSON.

    With traced_npus (N) different from the network's NPU count (M), the N files are scaled
    to M NPUs (sim/whatif.py); returns the result and the assumptions made (empty if none).
    knobs: compute_scale, comm_scale, npu_speed (see Engine).
    """
    network = load_network(network_url)
    system = load_system(system_url)
    groups = load_comm_groups(comm_group_url) if comm_group_url else None
    options = dict(comm_groups=groups, mode=mode, record_timeline=record_timeline, **knobs)
    if traced_npus is None or traced_npus == network.npus:
        return Engine(load_workload(prefix, network.npus), network, system, **options).run(), []
    scaled, assumptions = scale_job(load_tables(prefix, traced_npus), network.npus, scaling)
    feeders = [GraphFeeder(t, path=f"{prefix}.{npu % traced_npus}.et (as NPU {npu})") for npu, t in enumerate(scaled)]
    return Engine(feeders, network, system, **options).run(), assumptions
