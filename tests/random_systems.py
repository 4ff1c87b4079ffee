"""Random ASTRA-sim system files and network bandwidths for the shared-simulation checks
(tests/test_sim_shared.py and tests/benchmarks/bench_sim_sharing.py): scheduling policy,
collective optimisation, active chunks, dataset splits, implementations per dimension
(ring on the first, which communicator sub-groups run on), endpoint delay, memory bandwidth."""

from __future__ import annotations

import random

from chakra_core.sim.config import NetworkConfig, NetworkDim, SystemConfig, system_from_document

IMPLEMENTATIONS = ("ring", "direct", "halvingDoubling")
BANDWIDTHS = (25.0, 50.0, 100.0, 200.0, 400.0)


def random_system_document(rng: random.Random, dims: int) -> dict:
    """A system file as ASTRA-sim spells it."""
    def per_dim() -> list[str]:
        return ["ring"] + [rng.choice(IMPLEMENTATIONS) for _ in range(dims - 1)]

    return {"scheduling-policy": rng.choice(["LIFO", "FIFO"]), "endpoint-delay": rng.choice([0, 10, 50]),
            "active-chunks-per-dimension": rng.choice([1, 1, 2]), "preferred-dataset-splits": rng.choice([1, 2, 4, 8]),
            "all-reduce-implementation": per_dim(), "all-gather-implementation": per_dim(),
            "reduce-scatter-implementation": per_dim(), "all-to-all-implementation": per_dim(),
            "collective-optimization": rng.choice(["baseline", "localBWAware"]),
            "local-mem-bw": rng.choice([50, 1600])}


def random_system(rng: random.Random, dims: int) -> SystemConfig:
    return system_from_document("<random system>", random_system_document(rng, dims))


def random_network(rng: random.Random, shape: list[tuple[str, int]]) -> NetworkConfig:
    """The network of `shape` ((topology, NPUs) per dimension) with random bandwidths and latencies."""
    return NetworkConfig(dims=tuple(NetworkDim(topology=t, npus=n, bandwidth_gbps=rng.choice(BANDWIDTHS),
                                               latency_ns=rng.choice([100.0, 500.0, 1000.0])) for t, n in shape))
