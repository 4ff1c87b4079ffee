"""A job on storage, simulated: ASTRA-sim's command line (`<prefix>.<npu>.et` per NPU, a
network YAML, a system JSON and, optionally, a communicator-group JSON), over engine.simulate."""

from __future__ import annotations

import re
from collections.abc import Sequence

import pyarrow as pa

from chakra_core.format.job import Job, JobLayoutError
from chakra_core.sim.backends import DEFAULT_MODE
from chakra_core.sim.colocation import PlacedJob
from chakra_core.sim.config import NetworkConfig, SystemConfig, load_network, load_system
from chakra_core.sim.engine import simulate
from chakra_core.sim.errors import SimulationError
from chakra_core.sim.placement import place
from chakra_core.sim.results import SimResult
from chakra_core.sim.workload.nodes import read_columns


def read_job(prefix: str, npus: int | None, comm_group_url: str | None = None, columns: Sequence[str] | None = None) -> Job:
    """Ranks 0..npus-1 of `<prefix>.<rank>.et` (any fsspec URL; only `columns` of them, when
    given) and their communicator groups (the named file, else the one beside the ranks, if
    any); errors name the NPU."""
    try:
        return Job.read(prefix, npus, comm_group_url, columns)
    except JobLayoutError as exc:  # "rank R of N: ...", said as the simulator's other errors say it
        raise SimulationError(re.sub(r"^rank (\d+)", r"workload for NPU \1", str(exc))) from None


def read_placed(prefixes: list[str], placement: str, starts: list[int], network: NetworkConfig,
                system: SystemConfig, timeline: bool = False) -> list[PlacedJob]:
    """Several jobs placed on one network (sim/colocation.py): each prefix read once (given
    twice: two copies of one job), only the columns a simulation reads, placed by `placement`."""
    columns = read_columns(system, timeline)
    jobs = {prefix: read_job(prefix, None, None, columns) for prefix in dict.fromkeys(prefixes)}
    npus = place(placement, [jobs[prefix].npus for prefix in prefixes], network.npus)
    return [PlacedJob(prefix, jobs[prefix], where, start) for prefix, where, start in zip(prefixes, npus, starts)]


def load_tables(prefix: str, npus: int) -> list[pa.Table]:
    """The node tables of NPUs 0..npus-1, read from `<prefix>.<npu>.et` (any fsspec URL)."""
    return read_job(prefix, npus).tables


def simulate_files(prefix: str, network_url: str, system_url: str, comm_group_url: str | None = None,
                   mode: str = DEFAULT_MODE, traced_npus: int | None = None, scaling: str = "weak",
                   record_timeline: bool = False, **knobs) -> tuple[SimResult, list[str]]:
    """`chakra simulate`: the workload files against an ASTRA-sim network YAML and system JSON.

    With traced_npus (N) different from the network's NPU count (M), the N files are scaled
    to M NPUs (sim/whatif.py); returns the result and the assumptions made (empty if none).
    knobs: compute_scale, comm_scale, npu_speed (see engine.Engine).
    """
    network = load_network(network_url)
    system = load_system(system_url)
    # what-if scaling rewrites whole tables; otherwise only the columns the simulation reads are kept
    columns = read_columns(system, record_timeline) if traced_npus is None else None
    job = read_job(prefix, network.npus if traced_npus is None else traced_npus, comm_group_url, columns)
    result = simulate(job, network, system, mode=mode, traced_npus=traced_npus, scaling=scaling,
                      record_timeline=record_timeline, **knobs)
    return result, result.assumptions
