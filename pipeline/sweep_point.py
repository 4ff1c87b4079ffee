"""A sweep point: what one simulation of a job runs on (a named system or a grid point of a
sweep file; "system" itself is only ever the simulator's SystemConfig), from the file to the row.

It holds the simulator's own network and system objects (chakra_core.sim.config) and its
options; a sweep's parameter columns, the values its `where` conditions see and the cost are
read from those objects, so a value has one spelling from the file to the table. Picklable: a
Ray worker on any node simulates it without the driver's checkout or files.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from chakra_core.sim import reference
from chakra_core.sim.backends import DEFAULT_MODE, MODES
from chakra_core.sim.config import ASTRA_SIM_NETWORK_KEYS, ASTRA_SIM_SYSTEM_KEYS, NetworkConfig, SystemConfig

NETWORK_KEYS = tuple(ASTRA_SIM_NETWORK_KEYS)  # topology, npus_count, bandwidth, latency
PER_DIMENSION_SYSTEM_KEYS = ("all-reduce-implementation", "all-gather-implementation",
                             "reduce-scatter-implementation", "all-to-all-implementation")
OPTIONS = {"mode": MODES, "scaling": ("weak", "strong")}
# grid keys that place copies of the job together on the point's network (sim/colocation.py):
# `placement` (packed, interleaved, spread, random:SEED) and `copies` (2 where a placement is given)
COLOCATION_KEYS = ("placement", "copies")
DEFAULT_COPIES = 2


@dataclass(frozen=True)
class SweepPoint:
    """One system a job is simulated on (a named system or a grid point of a sweep file)."""

    name: str
    network: NetworkConfig | None  # None: a Ring of the job's own rank count (native-ring)
    system: SystemConfig
    mode: str = DEFAULT_MODE
    scaling: str = "weak"
    swept: tuple[str, ...] = ()  # the grid keys (ASTRA-sim's names) its sweep varies: its parameter columns
    key: str = ""  # sha256 of the configuration as the sweep file gave it: with the job's hash, what a re-run skips
    placement: str | None = None  # where `copies` copies of the job run together (None: the job alone)
    copies: int = 1

    @property
    def npus(self) -> int | None:
        """The network's NPU count (None: the job's own rank count)."""
        return self.network.npus if self.network else None

    def network_for(self, ranks: int) -> NetworkConfig:
        """The network a job of `ranks` traced ranks runs on."""
        return self.network or reference.reference_network(ranks)

    @property
    def topology(self) -> str:
        """The network's shape, dimensions joined by x: RingxSwitch."""
        return "x".join(d.topology.value for d in self.network.dims) if self.network else "Ring"

    @cached_property
    def params(self) -> dict:
        """The parameter columns: each swept key's value read back from the network and system objects."""
        return parameter_columns({**network_values(self.network), **system_values(self.system)}, self.swept)

    def where_values(self) -> dict:
        """What a sweep's `where` conditions see."""
        dims = len(self.network.dims) if self.network else 1
        return condition_values(self.params, self.npus, dims, self.mode, self.scaling)

    def cost(self, rates: dict[str, float], npus: int) -> float | None:
        """npus x (rates.npus + rates.bandwidth x the sum of the dimensions' GB/s): a price per NPU and
        per GB/s of each of its links (a native ring: the reference bandwidth); None without rates."""
        if not rates:
            return None
        bandwidth = sum(d.bandwidth_gbps for d in self.network.dims) if self.network else reference.BANDWIDTH_GBPS
        return npus * (rates.get("npus", 0.0) + rates.get("bandwidth", 0.0) * bandwidth)


def network_values(network: NetworkConfig | None) -> dict:
    """The network's values under ASTRA-sim's keys, a list of one entry per dimension ({}: a native ring)."""
    if network is None:
        return {}
    return {key: [_plain(getattr(d, field)) for d in network.dims] for key, field in ASTRA_SIM_NETWORK_KEYS.items()}


def system_values(system: SystemConfig) -> dict:
    """The system's values under ASTRA-sim's keys: a collective implementation per dimension, one
    value for the others."""
    values = {}
    for key, field in ASTRA_SIM_SYSTEM_KEYS.items():
        value = getattr(system, field)
        values[key] = [impl.name for impl in value] if key in PER_DIMENSION_SYSTEM_KEYS else value
    return values


def _plain(value):
    return getattr(value, "value", value)  # a Topology as its name


def parameter_columns(values: dict, swept: tuple[str, ...] | list[str]) -> dict:
    """The parameter columns of the swept keys: `<key>_<d>` per dimension for the network keys and
    the collective implementations, `<key>` for the others (dashes as underscores)."""
    params = {}
    for key in swept:
        if key in NETWORK_KEYS or key in PER_DIMENSION_SYSTEM_KEYS:
            params.update({dimension_column(key, d): v for d, v in enumerate(values.get(key) or [])})
        else:
            params[column_name(key)] = values.get(key)
    return params


def condition_values(params: dict, npus: int | None, dims: int, mode: str, scaling: str) -> dict:
    """What `where` conditions see: the parameter columns, total_npus, dims, mode and scaling."""
    return {**params, "total_npus": npus, "dims": dims, "mode": mode, "scaling": scaling}


def column_name(key: str) -> str:
    return key.replace("-", "_")


def dimension_column(key: str, dimension: int) -> str:
    """The parameter column of a per-dimension key's value in one dimension: `<key>_<d>`."""
    return f"{column_name(key)}_{dimension}"


def split_column(column: str) -> tuple[str, int | None]:
    """(column_name of the key, dimension) of a parameter column; None for a key of one value."""
    key, _, index = column.rpartition("_")
    return (key, int(index)) if index.isdigit() else (column, None)
