"""The reference system that synthesis and selection compare jobs on.

A job of N ranks is simulated on a single Ring of exactly N NPUs (50 GB/s, 500 ns per hop)
with the system file of ASTRA-sim's reference folder (ring algorithms, 4 dataset splits,
LIFO, localBWAware). SYSTEM is the source of these settings: a sweep file's `system:
reference` (pipeline/sweep/file.py, the nightly sweep's `ring-native`) is SYSTEM, and
pipeline/sweeps/ring_system.json, the same settings as a file for the command line, is
checked equal to it by tests/test_sweep_grid.py. One fixed model for every job, so that
simulated times of real and synthetic jobs, or of jobs within a cluster, are comparable.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pyarrow as pa

from chakra_core.sim.config import ASTRA_SIM_SYSTEM_KEYS, NetworkConfig, SystemConfig
from chakra_core.sim.engine import SimResult, simulate

BANDWIDTH_GBPS = 50.0  # the reference link (ASTRA-sim's example network's): its one home
LATENCY_NS = 500.0
SYSTEM = {  # ASTRA-sim's dashed keys, as in its system JSON
    "scheduling-policy": "LIFO", "endpoint-delay": 10, "active-chunks-per-dimension": 1,
    "preferred-dataset-splits": 4, "all-reduce-implementation": ["ring"], "all-gather-implementation": ["ring"],
    "reduce-scatter-implementation": ["ring"], "all-to-all-implementation": ["ring"],
    "collective-optimization": "localBWAware", "local-mem-bw": 1600, "roofline-enabled": 0, "peak-perf": 900,
}


def reference_network(npus: int, bandwidth_gbps: float = BANDWIDTH_GBPS, latency_ns: float = LATENCY_NS
                      ) -> NetworkConfig:
    """A Ring of `npus` NPUs; its links ASTRA-sim's example network's unless given (a calibrated ring's)."""
    return NetworkConfig.model_validate({"dims": [{"topology": "Ring", "npus": npus, "bandwidth_gbps": bandwidth_gbps,
                                                   "latency_ns": latency_ns}]})


def reference_system() -> SystemConfig:
    return SystemConfig.model_validate({ASTRA_SIM_SYSTEM_KEYS[key]: value for key, value in SYSTEM.items()})


def describe() -> str:
    return f"Ring of the job's NPUs, {BANDWIDTH_GBPS:g} GB/s, {LATENCY_NS:g} ns, ring algorithms, 4 splits"


def simulate_reference(tables: Sequence[pa.Table], comm_groups: Mapping[int, Sequence[int]] | None = None
                       ) -> SimResult:
    """One job (a node table per rank) on the reference system of its own size."""
    groups = {int(k): tuple(v) for k, v in (comm_groups or {}).items()}
    return simulate(list(tables), reference_network(len(tables)), reference_system(), comm_groups=groups)
