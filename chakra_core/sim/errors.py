"""The simulator's error types."""

from __future__ import annotations

from typing import TYPE_CHECKING

from chakra_core.errors import ChakraError

if TYPE_CHECKING:
    from chakra_core.sim.results import SimResult


class SimulationError(ChakraError):
    """A workload or configuration the simulator cannot run (named precisely)."""


class SimulationDeadlock(SimulationError):
    """The job can never finish; `report` says what each NPU waits for."""

    def __init__(self, report: dict[int, list[str]], partial: SimResult):
        self.report = report
        self.partial = partial
        lines = [f"NPU {npu}: {'; '.join(waits)}" for npu, waits in sorted(report.items())]
        super().__init__("the job cannot finish (deadlock):\n  " + "\n  ".join(lines))
