"""The memory layer: how long a memory load or store node takes.

ASTRA-sim times a memory node through its memory API (local memory, or a remote-memory model
given by its --remote-memory-configuration, of which only NO_MEMORY_EXPANSION is modelled
here, sim/config.load_remote_memory). This layer moves tensor_size bytes at the local memory
bandwidth; a remote-memory model would be another class with the same `access_ns`.
"""

from __future__ import annotations

import math

from chakra_core.sim.config import SystemConfig

MEMORY_NOTE = ("memory nodes timed as tensor_size bytes at local-mem-bw (an assumption: ASTRA-sim's remote "
               "memory timing is not modelled)")


class LocalMemory:
    """Memory nodes at the system's local memory bandwidth (decimal GB/s)."""

    note = MEMORY_NOTE

    def __init__(self, system: SystemConfig):
        self.gbps = system.local_mem_bw_gbps

    def access_ns(self, tensor_size: int) -> int:
        """ns to load or store tensor_size bytes."""
        return math.floor(tensor_size / (self.gbps * 1e9) * 1e9)  # as ASTRA-sim: B/s, then ns
