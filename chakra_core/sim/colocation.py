"""Several jobs on one network: who slows whom (docs/simulator.md, 'Several jobs on one network').

    placed = [PlacedJob(prefix, job, npus, start_ns), ...]    # sim/placement.py gives the NPUs
    outcome = colocate(placed, network, system, mode="aware")

The jobs become one job of the whole network (`combine`): each keeps its ranks, groups and
collectives, its ranks moved to its NPUs, its groups (and its "all NPUs", now a group of its
own NPUs) renumbered apart from the other jobs', its sends' peers moved with it; NPUs no job
holds stay idle. That job runs once with every job (aware: their messages queue for the same
links, the fabric charging each wait to the jobs ahead, network/waits.py) and once per job
alone on the same NPUs. Two jobs of one workload whose NPUs differ by a translation of the torus
of dimensions take the same time alone (symmetry.py: such a move maps the network onto itself),
so one alone run serves both. Shared simulation (symmetry.py) runs where the jobs are alike.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from chakra_core.format.job import Job
from chakra_core.sim.backends import DEFAULT_MODE, backend
from chakra_core.sim.config import NetworkConfig, SystemConfig
from chakra_core.sim.engine import simulate
from chakra_core.sim.errors import SimulationError
from chakra_core.sim.network.aware import moved_link
from chakra_core.sim.network.waits import WaitLedger, link_name
from chakra_core.sim.results import SimResult
from chakra_core.sim.workload.nodes import DEFAULT_GROUP_NAMES

TOP_LINKS = 5  # links listed per job, the longest waits first


@dataclass
class PlacedJob:
    workload: str  # what names it (the prefix of its files)
    job: Job
    npus: list[int]  # rank r runs on NPU npus[r]
    start_ns: int = 0


@dataclass
class JobOutcome:
    workload: str
    npus: list[int]
    start_ns: int
    finish_ns: int  # from its start to its last NPU's last node, together with the others
    alone_finish_ns: int  # the same, alone on the same NPUs
    waited_ns: int = 0  # ns its messages waited for busy links, in all
    links: list[dict] = field(default_factory=list)  # the links it waited on longest
    behind: list[dict] = field(default_factory=list)  # whose traffic it waited behind (itself included)

    @property
    def slowdown(self) -> float:
        return self.finish_ns / self.alone_finish_ns if self.alone_finish_ns else 1.0

    def to_dict(self) -> dict:
        return {"workload": self.workload, "npus": self.npus, "start_ns": self.start_ns, "finish_ns": self.finish_ns,
                "alone_finish_ns": self.alone_finish_ns, "slowdown": round(self.slowdown, 6),
                "waited_ns": self.waited_ns, "links": self.links, "behind": self.behind}


@dataclass
class Colocation:
    mode: str
    shares_links: bool  # False: the network model shares nothing, every slowdown is 1 by construction
    jobs: list[JobOutcome]
    together: SimResult  # the run of all jobs, per NPU of the network
    alone_runs: int  # alone runs simulated (fewer than jobs where placements are translations)

    def to_dict(self) -> dict:
        return {"mode": self.mode, "shares_links": self.shares_links, "notes": self.together.notes,
                "sharing": self.together.sharing, "alone_runs": self.alone_runs,
                "jobs": [job.to_dict() for job in self.jobs]}


def colocate(placed: list[PlacedJob], network: NetworkConfig, system: SystemConfig, mode: str = DEFAULT_MODE,
             share: bool = True, record_timeline: bool = False, **knobs) -> Colocation:
    """Runs the jobs together and each alone (knobs: as engine.simulate's)."""
    _check_placed(placed, network)
    job, job_of, start_at = combine(placed, network)
    same_start = len({p.start_ns for p in placed}) == 1  # jobs started apart are not alike: no shared run
    together = simulate(job, network, system, mode=mode, share=share and same_start, record_timeline=record_timeline,
                        start_at=start_at if any(start_at) else None, job_of=job_of, **knobs)
    alone: dict[tuple, int] = {}
    outcomes = []
    for p in placed:
        key = (id(p.job), _relative_placement(p.npus, network))
        if key not in alone:
            by_itself, _, _ = combine([PlacedJob(p.workload, p.job, p.npus)], network)
            result = simulate(by_itself, network, system, mode=mode, share=share, **knobs)
            alone[key] = _finish(result, p.npus)
        outcomes.append(JobOutcome(p.workload, p.npus, p.start_ns, _finish(together, p.npus) - p.start_ns, alone[key]))
    if together.ledger is not None:
        _add_waits(outcomes, together.ledger, job_of, network, placed)
    return Colocation(mode, backend(mode).contends, outcomes, together, len(alone))


def combine(placed: list[PlacedJob], network: NetworkConfig) -> tuple[Job, list[int], list[int]]:
    """(one job of the whole network holding every placed job, each NPU's job (-1: idle), each
    NPU's start tick)."""
    tables: list[pa.Table | None] = [None] * network.npus
    groups: dict[int, tuple[int, ...]] = {}
    job_of, start_at = [-1] * network.npus, [0] * network.npus
    for j, p in enumerate(placed):
        world = len(groups) + 1
        groups[world] = tuple(p.npus)
        names = {name: str(world) for name in DEFAULT_GROUP_NAMES}
        for gid, members in sorted(p.job.comm_groups.items()):
            if tuple(members) == tuple(range(len(p.npus))):
                names[str(gid)] = str(world)  # its "all NPUs" by another name: one group, as alone
                continue
            names[str(gid)] = str(len(groups) + 1)
            groups[len(groups) + 1] = tuple(p.npus[m] for m in members)
        moved: dict[int, pa.Table] = {}  # ranks sharing one table share the moved one
        for rank, (table, npu) in enumerate(zip(p.job.tables, p.npus)):
            if id(table) not in moved:
                moved[id(table)] = _moved_table(table, names, np.asarray(p.npus), f"{p.workload}.{rank}.et")
            tables[npu], job_of[npu], start_at[npu] = moved[id(table)], j, p.start_ns
    idle = placed[0].job.tables[0].slice(0, 0)
    return Job([t if t is not None else idle for t in tables], groups), job_of, start_at


def _moved_table(table: pa.Table, names: dict[str, str], npus: np.ndarray, where: str) -> pa.Table:
    """The table with its groups renamed (`names`, a missing name: the job's all NPUs) and its
    sends' and receives' peers moved to their NPUs."""
    if "pg_name" not in table.column_names:  # every collective on all NPUs: now on the job's own
        table = table.append_column("pg_name", pa.nulls(table.num_rows, pa.string()))
    column = pc.fill_null(table.column("pg_name"), "").combine_chunks().dictionary_encode()
    unknown = [i for i, n in enumerate(column.dictionary.to_pylist()) if n not in names]
    if unknown:
        row = column.indices.to_numpy(zero_copy_only=False).tolist().index(unknown[0])
        raise SimulationError(f"{where}: node {table.column('id')[row]}: communicator group "
                              f"{column.dictionary[unknown[0]]} not found in the job's groups")
    renamed = pa.array([names[n] for n in column.dictionary.to_pylist()], pa.string())
    table = table.set_column(table.schema.get_field_index("pg_name"), "pg_name",
                             renamed.take(column.indices).cast(table.schema.field("pg_name").type))
    for name in ("comm_src", "comm_dst"):
        if name not in table.column_names:
            continue
        column = table.column(name).combine_chunks()
        peers = np.asarray(pc.fill_null(column, -1).to_numpy(zero_copy_only=False), np.int64)
        if (peers >= len(npus)).any():
            row = int(np.flatnonzero(peers >= len(npus))[0])
            raise SimulationError(f"{where}: node {table.column('id')[row]}: {name} {peers[row]} is not a rank "
                                  f"of the job ({len(npus)} ranks)")
        moved = np.where(peers >= 0, npus[np.maximum(peers, 0)], peers)
        table = table.set_column(table.schema.get_field_index(name), name,
                                 pa.array(moved, column.type, mask=column.is_null().to_numpy(zero_copy_only=False)))
    return table


def _check_placed(placed: list[PlacedJob], network: NetworkConfig) -> None:
    taken: dict[int, int] = {}
    for j, p in enumerate(placed):
        if len(p.npus) != p.job.npus:
            raise SimulationError(f"{p.workload}: {p.job.npus} ranks but {len(p.npus)} NPUs placed")
        if p.start_ns < 0:
            raise SimulationError(f"{p.workload}: start {p.start_ns} ns is negative")
        for npu in p.npus:
            if not 0 <= npu < network.npus or npu in taken:
                raise SimulationError(f"{p.workload}: NPU {npu} is " + ("outside the network" if npu not in taken
                                                                        else f"also given to job {taken[npu]}"))
            taken[npu] = j


def _relative_placement(npus: list[int], network: NetworkConfig) -> tuple:
    """Each rank's coordinates less rank 0's, modulo the dimensions: equal for placements that
    differ by a translation of the torus."""
    sizes = np.array([d.npus for d in network.dims])
    coords = np.array([network.coords(npu) for npu in npus])
    return tuple(((coords - coords[0]) % sizes).ravel().tolist())


def _finish(result: SimResult, npus: list[int]) -> int:
    return max(result.npus[npu].finish_ns for npu in npus)


def _add_waits(outcomes: list[JobOutcome], ledger: WaitLedger, job_of: list[int], network: NetworkConfig,
               placed: list[PlacedJob]) -> None:
    """Each job's waits from the ledger; in a shared run a job no NPU of which was simulated
    waited as the job of its first NPU's representative, on that job's links moved to its own."""
    for j, outcome in enumerate(outcomes):
        first = placed[j].npus[0]
        rep = ledger.rep_of[first] if ledger.rep_of is not None else first
        source = job_of[rep]
        by = tuple((a - b) % d.npus for a, b, d in zip(network.coords(first), network.coords(rep), network.dims))
        on_link = ledger.on_link.get(source, {})
        outcome.waited_ns = sum(on_link.values())
        longest = sorted(on_link.items(), key=lambda item: (-item[1], item[0]))[:TOP_LINKS]
        outcome.links = [{"link": link_name(network, moved_link(network, link, by)), "waited_ns": ns}
                         for link, ns in longest]
        behind = ledger.behind.get(source, {})
        outcome.behind = [{"job": _moved_job(placed[other].npus[0], by, job_of, network), "waited_ns": ns, "bytes": size}
                          for other, (ns, size) in sorted(behind.items())]


def _moved_job(npu: int, by: tuple[int, ...], job_of: list[int], network: NetworkConfig) -> int:
    """The job of the NPU `by` coordinates on from `npu` (in a shared run: the job a mirror's
    neighbour copies)."""
    return job_of[network.npu_id(tuple((c + b) % d.npus for c, b, d in zip(network.coords(npu), by, network.dims)))]
