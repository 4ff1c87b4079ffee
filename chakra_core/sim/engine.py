"""Replays one Chakra ET per NPU on a modelled system, as ASTRA-sim does.

    result = simulate(job, network, system, mode="aware")   # a Job, or one node table per NPU

The engine wires the layers (docs/simulator.md, 'Layers') to one event queue (events.py)
and runs it: the workload layer (workload/nodes.py decodes each node, workload/issue.py issues them per
NPU), the system layer (system/matching.py matches collectives and sends with receives; the mode's
runner times collectives), the network layer (one interface, network/interface.py) and the memory
layer (memory/local.py). What a mode uses of the system and network layers is its back-end's
(backends.py). A job that cannot finish stops with a report of what every NPU waits for.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from functools import partial
from itertools import combinations
from math import prod

import pyarrow as pa

from chakra_core.errors import ChakraError
from chakra_core.format.etfile import table_source
from chakra_core.format.job import Job
from chakra_core.sim.backends import DEFAULT_MODE, backend
from chakra_core.sim.config import NetworkConfig, SystemConfig
from chakra_core.sim.criticalpath import critical_paths
from chakra_core.sim.decoded import CPU, EXTENSIONS, GPU_COMPUTE
from chakra_core.sim.errors import SimulationDeadlock, SimulationError
from chakra_core.sim.events import EventQueue
from chakra_core.sim.memory.local import LocalMemory
from chakra_core.sim.network.waits import WaitLedger
from chakra_core.sim.results import NpuResult, SimResult, TimelineEvent
from chakra_core.sim.sharing import Sharing, SymmetryBroken
from chakra_core.sim.symmetry import find_sharing, links_apart
from chakra_core.sim.system.matching import System
from chakra_core.sim.whatif import scale_job
from chakra_core.sim.workload.feeder import GraphFeeder
from chakra_core.sim.workload.issue import Workload
from chakra_core.sim.workload.nodes import NodeDecoder

__all__ = ["Engine", "NpuResult", "SimResult", "SimulationDeadlock", "TimelineEvent", "simulate"]


class Engine:
    """One simulation run. Build with the per-NPU feeders, then run()."""

    MAX_ATTEMPTS = 6  # aware runs with holding tables before the job runs with every collective live

    def __init__(self, feeders: list[GraphFeeder], network: NetworkConfig, system: SystemConfig,
                 comm_groups: dict[int, tuple[int, ...]] | None = None, mode: str = DEFAULT_MODE,
                 compute_scale: float = 1.0, comm_scale: float = 1.0, npu_speed: list[float] | None = None,
                 record_timeline: bool = False, reuse_alone: bool = True,
                 progress: Callable[[str, int, int], None] | None = None, sharing: Sharing | None = None,
                 start_at: list[int] | None = None, job_of: list[int] | None = None):
        """compute_scale multiplies every compute time, comm_scale every communication time (a
        what-if knob: 0.5 = twice as fast a network); npu_speed[i] divides NPU i's compute times
        (0.5 = a straggler at half speed). reuse_alone=False replays every aware collective live
        even where a shortcut is exact (for checking that it is). progress, if given, is called
        as progress("simulating nodes", done, total) now and then. With sharing (symmetry.py),
        feeders[npu] is None for every NPU but the representatives, and run() raises
        SymmetryBroken where the shared run cannot stand for the whole job. Several jobs placed
        on one network (sim/colocation.py) give start_at[npu], the tick each NPU first issues,
        and job_of[npu], its job: then `ledger` (network/waits.py) says who waited behind whom
        in the run kept."""
        self.backend = backend(mode)
        if len(feeders) != network.npus:
            raise SimulationError(f"the network has {network.npus} NPUs but {len(feeders)} workload file(s) were given")
        if compute_scale <= 0 or comm_scale <= 0:
            raise SimulationError("compute and communication scales must be positive")
        npu_speed = npu_speed or [1.0] * len(feeders)
        if len(npu_speed) != len(feeders) or min(npu_speed) <= 0:
            raise SimulationError(f"npu_speed needs one positive factor per NPU ({len(feeders)})")
        self.feeders, self.network, self.system, self.mode = feeders, network, system, mode
        self.start_at, self.job_of, self.ledger = start_at, job_of, None
        self.comm_scale, self.record_timeline, self.reuse_alone, self.progress = (
            comm_scale, record_timeline, reuse_alone, progress)
        self.collectives = self.backend.collectives(network, system, comm_scale)
        self.memory = LocalMemory(system)
        decoder = NodeDecoder(network, system, comm_groups or {}, self.collectives, self.memory, compute_scale,
                              npu_speed)
        self.sharing = sharing
        self.nodes = [decoder.decode(npu, f) if f is not None else None for npu, f in enumerate(feeders)]
        if sharing is not None:  # a mirror runs its representative's nodes
            self.nodes = [self.nodes[rep] for rep in sharing.rep_of]
        self.shapes = decoder.shapes
        slots = {node.slot for _, node in self.shapes}
        self.gpu_job = CPU in slots and GPU_COMPUTE in slots  # host and device work: say what held the path

    def run(self) -> SimResult:
        """Runs the job. Aware, a run that used holding tables is kept only where nothing else
        touched a collective timed from its table and no two events of one tick met whose order
        the tables may change (system/live.py). Else the job runs again: with those collectives (and
        those of like groups, live.AwareCollectives.alike; for two completions of one NPU meeting
        in a tick, the collectives timed from tables among them) live while the CPU time spent so
        far is below what the tables saved in the last run (the replays alone of the collectives
        it took from them), else, for messages meeting on a link or a tie (workload/order.py),
        or after MAX_ATTEMPTS, with every collective live. Every way gives the same result; `attempts` says how many runs it took
        (progress reports start again with each)."""
        shortcuts, forced = self.reuse_alone, frozenset()
        contends = self.backend.contends  # shortcuts the runner checks: a run may be run again
        saved = [feeder.save_state() if feeder is not None else None for feeder in self.feeders] if contends and shortcuts else None
        spent = 0.0
        for attempt in range(self.MAX_ATTEMPTS + 1):
            if attempt:
                for feeder, state in zip(self.feeders, saved):
                    if feeder is not None:
                        feeder.restore_state(state)
            start = time.process_time()
            results, workload, system, runner = self._run(shortcuts, forced)
            spent += time.process_time() - start
            if not shortcuts or not contends:
                break
            if runner.conflicts:
                forced = frozenset(forced | runner.alike(runner.conflicts))
                shortcuts = attempt + 1 < self.MAX_ATTEMPTS and spent < runner.tabled_cost
            elif runner.used_shortcuts and (runner.coincidences or workload.ties):
                shortcuts = False
            elif runner.used_shortcuts and runner.tabled(workload.coincidences):
                forced = frozenset(forced | runner.alike(runner.tabled(workload.coincidences)))
                shortcuts = attempt + 1 < self.MAX_ATTEMPTS and spent < runner.tabled_cost
            else:
                break
        self.attempts = attempt + 1
        if self.sharing is not None:
            self._check_shared(workload, shortcuts)
        results = self._per_npu(results, workload)
        extensions = workload.extensions | system.extensions
        result = SimResult(self.mode, results, workload.timeline() if self.record_timeline else None,
                           notes=[EXTENSIONS.get(label, self.memory.note) for label in sorted(extensions)]
                           + sorted(set(runner.notes)))
        result.sharing = self.sharing.summary() if self.sharing is not None else {}
        if self.ledger is not None:
            self.ledger.rep_of = self.sharing.rep_of if self.sharing is not None else None
            result.ledger = self.ledger
        if workload.unfinished():
            report: dict[int, list[str]] = defaultdict(list)
            explained: dict[int, set] = defaultdict(set)  # per NPU: issued nodes the report explains
            system.waits(workload.node_id, report, explained)
            workload.blocked(report, explained)
            raise SimulationDeadlock(dict(report), result)
        return result

    def _per_npu(self, results: list[NpuResult], workload: Workload) -> list[NpuResult]:
        """Each NPU's time by category and, for jobs of host and device work, what held its
        critical path; in a shared run each mirror gets its representative's (the same run)."""
        for npu in workload.active:
            results[npu].time_by_category = workload.time_by_category(npu)
        if self.gpu_job:  # (a mirror ran no node: its walk is empty, its path copied below)
            for r, path in zip(results, critical_paths(self.feeders, self.nodes, workload.issued_at, workload.ran)):
                r.critical_path = path
        if self.sharing is None:
            return results
        return [results[rep] if rep == npu else results[rep].moved_to(npu) for npu, rep in enumerate(self.sharing.rep_of)]

    def _check_shared(self, workload: Workload, shortcuts: bool) -> None:
        """A shared run stands for the whole job unless it stopped short or a run whose messages
        contend went fully live (whose order of messages meeting in a tick on a link nothing
        checks). (Completions meeting in a tick on one NPU run in an order every copy shares:
        Workload.at.)"""
        if workload.unfinished():
            raise SymmetryBroken("the job does not finish")
        if self.backend.contends and not shortcuts:
            raise SymmetryBroken(f"the {self.mode} run replayed every collective live")

    def _run(self, shortcuts: bool, forced: frozenset) -> tuple:
        """One run of the job: (results, workload, system layer, collective runner)."""
        events = EventQueue()  # node completions (tick, npu, node index) and calls (tick, CALL, (function, args))
        results = [NpuResult(npu) for npu in range(len(self.feeders))]
        workload = Workload(self.feeders, self.nodes, events, results, self.record_timeline or self.gpu_job,
                            self.progress)
        if self.system.device_timing is not None:
            timing = self.system.device_timing
            workload.add_device_timing(round(timing.launch_latency_ns), round(timing.kernel_gap_ns))
        if self.job_of is not None:
            self.ledger = WaitLedger()  # the last run's is the one kept
        network = self.backend.job_network(self.network, events, self.comm_scale, shortcuts,
                                           (self.job_of, self.ledger) if self.job_of is not None else None)
        runner = self.backend.runner(self.collectives, network, events, self.shapes, shortcuts and self.backend.contends,
                                     forced)
        if shortcuts and self.backend.contends:
            workload.watch_coincidences()
        system = workload.system = System(self.nodes, network, runner, workload.at, results, self.sharing)
        workload.start(self.start_at)
        events.run(workload.complete)  # calls are steps of the live replays and the network
        return results, workload, system, runner


def simulate(job: Job | Sequence[pa.Table], network: NetworkConfig, system: SystemConfig, *,
             comm_groups: dict[int, tuple[int, ...]] | None = None, mode: str = DEFAULT_MODE,
             traced_npus: int | None = None, scaling: str = "weak", record_timeline: bool = False,
             share: bool = True, **knobs) -> SimResult:
    """Simulates a job (a Job, or one node table per NPU, index = NPU id) on a network and
    system (sim/config.py's objects). comm_groups defaults to the Job's.

    With traced_npus (N, the job's table count) different from the network's NPU count (M),
    the N tables are scaled to M NPUs (sim/whatif.py); result.assumptions says how. knobs:
    compute_scale, comm_scale, npu_speed, reuse_alone, progress (see Engine).

    With share (the default), NPUs that run alike are simulated once (symmetry.py) where the
    shared run stands for the whole job, else the job runs unshared; the results are the
    same either way, and result.sharing says which ran."""
    try:
        return _simulate(job, network, system, comm_groups=comm_groups, mode=mode, traced_npus=traced_npus,
                         scaling=scaling, record_timeline=record_timeline, share=share, **knobs)
    except OverflowError:  # a tick past an int64: durations or sizes no real job has (a corrupt trace's)
        raise SimulationError("the simulated time passes 2**63 ns (292 years): a node's duration or size is no "
                              "real job's") from None


def _simulate(job: Job | Sequence[pa.Table], network: NetworkConfig, system: SystemConfig, *,
              comm_groups: dict[int, tuple[int, ...]] | None, mode: str, traced_npus: int | None, scaling: str,
              record_timeline: bool, share: bool, **knobs) -> SimResult:
    tables, groups = (job.tables, job.comm_groups) if isinstance(job, Job) else (list(job), {})
    if comm_groups is not None:
        groups = comm_groups
    paths = [table_source(t, f"<npu {npu}>") for npu, t in enumerate(tables)]
    assumptions: list[str] = []
    if traced_npus is not None and traced_npus != network.npus:
        if traced_npus != len(tables):
            raise SimulationError(f"traced_npus is {traced_npus} but the job has {len(tables)} rank(s)")
        tables, groups, assumptions = scale_job(tables, network.npus, scaling, groups)
        paths = [f"{paths[npu % traced_npus]} (as NPU {npu})" for npu in range(network.npus)]
    options = dict(comm_groups=groups, mode=mode, record_timeline=record_timeline, **knobs)
    share = share and not record_timeline and (not backend(mode).contends or knobs.get("reuse_alone", True))
    find = partial(_sharing, tables, groups, network, system, mode, share, knobs.get("npu_speed"))
    sharing = find()
    result = None
    if sharing is not None:
        result, unshared = _shared_run(tables, paths, network, system, options, sharing, find)
    if result is None:  # the job runs unshared: the same results, at the full cost
        result = Engine(_feeders(tables, paths), network, system, **options).run()
        result.sharing = {"unshared": unshared, "simulated_npus": network.npus, "npus": network.npus,
                          "shared_would_simulate": len(sharing.reps)} if sharing is not None else {}
    result.assumptions = assumptions
    return result


def _shared_run(tables: list[pa.Table], paths: list[str], network: NetworkConfig, system: SystemConfig,
                options: dict, sharing: Sharing, find) -> tuple[SimResult | None, str | None]:
    """(the result of the shared run, None), else of one along fewer of its dimensions (the
    most NPUs shared first; find(within=dims) gives that Sharing), its `sharing` saying which
    dimensions were not shared and why; (None, why) where no shared run stands for the job."""
    why_not = None
    for count in range(len(sharing.dims), 0, -1):
        for dims in sorted(combinations(sharing.dims, count), key=lambda d: -prod(network.dims[k].npus for k in d)):
            along = sharing if count == len(sharing.dims) else find(within=dims)
            if along is None or along.dims != dims:
                continue
            try:
                result = Engine(_feeders(tables, paths, along.reps), network, system, sharing=along, **options).run()
            except SymmetryBroken as why:
                why_not = why_not or f"shared run not used: {why}"
                continue
            if along is not sharing:
                result.sharing["not_shared"] = {"dimensions": sorted(set(sharing.dims) - set(dims)), "why": why_not,
                                                "shared_would_simulate": len(sharing.reps)}
            return result, None
    return None, why_not


def _sharing(tables: list[pa.Table], groups: dict, network: NetworkConfig, system: SystemConfig, mode: str,
             share: bool, npu_speed: list[float] | None, within: tuple[int, ...] | None = None) -> Sharing | None:
    """The job's Sharing (along `within` only, where given) where a shared run may stand for it
    (where messages contend for links: on links apart; a run that replays every collective live
    is not shared, see Engine._check_shared)."""
    if not share:
        return None
    sharing = find_sharing(tables, groups, network, npu_speed, system.call_time_in_network, within)
    chosen = backend(mode)
    if sharing is not None and chosen.contends and not links_apart(sharing, chosen.network(network, None)):
        return None
    return sharing


def _feeders(tables: list[pa.Table], paths: list[str], only: list[int] | None = None) -> list[GraphFeeder | None]:
    """One feeder per NPU (None for NPUs not in `only`, when given); errors name the NPU."""
    wanted = set(range(len(tables)) if only is None else only)
    feeders: list[GraphFeeder | None] = []
    for npu, (table, path) in enumerate(zip(tables, paths)):
        try:
            feeders.append(GraphFeeder(table, path=path) if npu in wanted else None)
        except ChakraError as exc:
            raise SimulationError(f"workload for NPU {npu} of {len(tables)}: {exc}") from None
    return feeders
