"""What a shared run simulates (found by sim/symmetry.py, followed by the engine and the
collective runner of system/matching.py), and the error that sends a job back to an unshared run.
It sits below the simulator's layers so that the system layer reads the plan without the
module that finds it, which compares the workload's node tables."""

from __future__ import annotations

from dataclasses import dataclass, field


class SymmetryBroken(Exception):
    """A shared run whose mirrors did not run as their representatives: the job runs unshared."""


@dataclass
class Sharing:
    """What a shared run simulates: `reps` (ascending), `rep_of[npu]`, and, per (representative,
    its group), the mirrors that join the representative's collectives in groups holding a
    representative, by their group: [(the mirrors' group, [mirror, ...]), ...] (group None:
    every NPU)."""

    npus: int
    dims: tuple[int, ...]  # the network dimensions shared along
    reps: list[int]
    rep_of: list[int]
    mirrors: dict[tuple, list[tuple[tuple | None, list[int]]]] = field(default_factory=dict)
    groups: list[tuple[int, ...] | None] = field(default_factory=list)  # the job's, [0] None (every NPU)
    sends: set[tuple[int, int]] = field(default_factory=set)  # (NPU, peer) of every send and receive
    world: bool = False  # whether some collective runs over every NPU

    def summary(self) -> dict:
        """What `--json` says was shared."""
        return {"simulated_npus": len(self.reps), "npus": self.npus, "dimensions": list(self.dims)}
