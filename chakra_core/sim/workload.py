"""Loading a job as ASTRA-sim does: one `<prefix>.<npu>.et` per NPU of the network."""

from __future__ import annotations

from chakra_core.errors import ChakraError
from chakra_core.etfile import read_table
from chakra_core.feeder import GraphFeeder
from chakra_core.sim.collectives import SimulationError
from chakra_core.sim.config import load_comm_groups, load_network, load_system
from chakra_core.sim.engine import Engine, SimResult


def load_workload(prefix: str, npus: int) -> list[GraphFeeder]:
    """The feeders of NPUs 0..npus-1, read from `<prefix>.<npu>.et` (any fsspec URL)."""
    feeders = []
    for npu in range(npus):
        url = f"{prefix}.{npu}.et"
        try:
            feeders.append(GraphFeeder(read_table(url), path=url))
        except ChakraError as exc:
            raise SimulationError(f"workload for NPU {npu} of {npus}: {exc}") from None
    return feeders


def simulate_files(prefix: str, network_url: str, system_url: str, comm_group_url: str | None = None,
                   mode: str = "unaware") -> SimResult:
    """`chakra simulate`: the workload files against an ASTRA-sim network YAML and system JSON."""
    network = load_network(network_url)
    system = load_system(system_url)
    groups = load_comm_groups(comm_group_url) if comm_group_url else None
    return Engine(load_workload(prefix, network.npus), network, system, comm_groups=groups, mode=mode).run()
