"""The simulator's error type."""

from chakra_core.errors import ChakraError


class SimulationError(ChakraError):
    """A workload or configuration the simulator cannot run (named precisely)."""
