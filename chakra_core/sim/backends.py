"""The simulator's network back-ends: one table from a mode's name to what the engine needs to
run a job in it (docs/simulator.md, 'Layers'). A new back-end is one entry here: its network
(a class of the network layer implementing interface.Network, or interface.Links where
messages share links), the collective model that times a collective alone on it
(system/collectives.py) and the runner that times a job's collectives (system/matching.py's
Unaware, system/live.py's AwareCollectives). The mode names appear here and nowhere else in the
simulator; the CLI, the timeline and the sweeps take them from MODES.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from chakra_core.sim.config import NetworkConfig, SystemConfig
from chakra_core.sim.errors import SimulationError
from chakra_core.sim.events import EventQueue
from chakra_core.sim.network.aware import AwareFabric, EntryRecordingFabric, WatchedFabric
from chakra_core.sim.network.interface import Network
from chakra_core.sim.network.unaware import UnawareNetwork
from chakra_core.sim.network.waits import ledger_fabric
from chakra_core.sim.system.collectives import AwareCollectiveModel, CollectiveModel
from chakra_core.sim.system.live import AwareCollectives
from chakra_core.sim.system.matching import Unaware


@dataclass(frozen=True)
class Backend:
    """What the engine needs of one network model.

    contends: whether messages delay one another on shared links. Then its runner may time
    collectives by shortcuts that it checks (holding tables: a run may be rerun with some
    collectives live, engine.Engine.run), the job's network watches the links for those checks
    while shortcuts are on, and a shared run stands for the job only where the links it runs on
    carry nothing it leaves out (symmetry.links_apart)."""

    description: str  # for --help
    network: Callable[..., Network]  # (NetworkConfig, EventQueue | None, comm_scale[, free]) -> the job's network
    watched: Callable[..., Network]  # the same, watching for the runner's shortcuts (contends only)
    recording: Callable[..., Network]  # the same, recording each link's first entry (holding tables)
    collective_model: type[CollectiveModel]
    runner: Callable[..., object]  # (model, network, events, shapes, shortcuts, forced) -> the collective runner
    contends: bool
    ledger: Callable[..., Network] | None = None  # (NetworkConfig, events, comm_scale, watched, job_of, WaitLedger):
    # the job network of several jobs, charging each wait to the jobs ahead (network/waits.py; contends only)

    def collectives(self, network: NetworkConfig, system: SystemConfig, comm_scale: float = 1.0) -> CollectiveModel:
        """The collective model, its replays on this back-end's network."""
        def replay_network(events: EventQueue, free: dict | None = None, record: bool = False) -> Network:
            return (self.recording if record else self.network)(network, events, comm_scale, free)
        return self.collective_model(network, system, comm_scale, replay_network)

    def job_network(self, network: NetworkConfig, events: EventQueue, comm_scale: float, shortcuts: bool,
                    ledger: tuple | None = None) -> Network:
        """The network a job's sends and live collectives share; with ledger (job_of, WaitLedger),
        where messages contend, one that charges each wait to the jobs ahead."""
        watched = shortcuts and self.contends
        if ledger is not None and self.ledger is not None:
            return self.ledger(network, events, comm_scale, watched, *ledger)
        return (self.watched if watched else self.network)(network, events, comm_scale)


def _unaware_network(network: NetworkConfig, events: EventQueue | None, scale: float = 1.0,
                     free: dict | None = None) -> UnawareNetwork:
    return UnawareNetwork(network, scale)  # no links: nothing to be busy, no queue to run on


def _unaware_runner(model: CollectiveModel, network: Network, events: EventQueue, shapes, shortcuts: bool,
                    forced: frozenset) -> Unaware:
    return Unaware(model)


BACKENDS: dict[str, Backend] = {
    "unaware": Backend("congestion-unaware: every message a fixed delay, never delayed by another",
                       _unaware_network, _unaware_network, _unaware_network, CollectiveModel, _unaware_runner,
                       contends=False),
    "aware": Backend("congestion-aware: links as FIFO servers that messages queue for",
                     AwareFabric, WatchedFabric, EntryRecordingFabric, AwareCollectiveModel, AwareCollectives,
                     contends=True, ledger=ledger_fabric),
}
MODES = tuple(BACKENDS)
DEFAULT_MODE = MODES[0]


def backend(mode: str) -> Backend:
    """The back-end of a mode's name (SimulationError for an unknown one)."""
    found = BACKENDS.get(mode)
    if found is None:
        raise SimulationError(f"mode {mode!r}: expected {' or '.join(repr(m) for m in MODES)}")
    return found


def modes_help() -> str:
    """Each mode and what it models, for a --mode option's help."""
    return "; ".join(f"{name}{' (default)' if name == DEFAULT_MODE else ''}: {b.description}"
                     for name, b in BACKENDS.items())
