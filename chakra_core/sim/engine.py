"""Replays one Chakra ET per NPU on a modelled system, as ASTRA-sim does.

    result = simulate(job, network, system, mode="aware")   # a Job, or one node table per NPU

The engine wires the layers (docs/simulator.md, 'Layers') to one event queue (events.py)
and runs it: the workload layer (nodes.py decodes each node, issue.py issues them per
NPU), the system layer (system.py matches collectives and sends with receives; the mode's
runner times collectives: closed forms and replays congestion-unaware, live.py aware), the
network layer (network.py unaware, aware.py congestion-aware; one interface) and the
memory layer (memory.py). A job that cannot finish stops with a report of what every NPU
waits for.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Sequence

import pyarrow as pa

from chakra_core.errors import ChakraError
from chakra_core.format.etfile import table_source
from chakra_core.format.job import Job
from chakra_core.sim.aware import AwareFabric, WatchedFabric
from chakra_core.sim.collectives import AwareCollectiveModel, CollectiveModel
from chakra_core.sim.config import NetworkConfig, SystemConfig
from chakra_core.sim.criticalpath import critical_paths
from chakra_core.sim.errors import SimulationDeadlock, SimulationError
from chakra_core.sim.events import EventQueue
from chakra_core.sim.feeder import GraphFeeder
from chakra_core.sim.issue import Workload
from chakra_core.sim.live import AwareCollectives
from chakra_core.sim.memory import LocalMemory
from chakra_core.sim.network import UnawareNetwork
from chakra_core.sim.nodes import CPU, EXTENSIONS, GPU_COMPUTE, NodeDecoder
from chakra_core.sim.results import NpuResult, SimResult, TimelineEvent
from chakra_core.sim.system import System, Unaware
from chakra_core.sim.whatif import scale_job

__all__ = ["Engine", "NpuResult", "SimResult", "SimulationDeadlock", "TimelineEvent", "simulate"]


class Engine:
    """One simulation run. Build with the per-NPU feeders, then run()."""

    MAX_ATTEMPTS = 6  # aware runs with holding tables before the job runs with every collective live

    def __init__(self, feeders: list[GraphFeeder], network: NetworkConfig, system: SystemConfig,
                 comm_groups: dict[int, tuple[int, ...]] | None = None, mode: str = "unaware",
                 compute_scale: float = 1.0, comm_scale: float = 1.0, npu_speed: list[float] | None = None,
                 record_timeline: bool = False, reuse_alone: bool = True,
                 progress: Callable[[str, int, int], None] | None = None):
        """compute_scale multiplies every compute time, comm_scale every communication time (a
        what-if knob: 0.5 = twice as fast a network); npu_speed[i] divides NPU i's compute times
        (0.5 = a straggler at half speed). reuse_alone=False replays every aware collective live
        even where a shortcut is exact (for checking that it is). progress, if given, is called
        as progress("simulating nodes", done, total) now and then."""
        if mode not in ("unaware", "aware"):
            raise SimulationError(f"mode {mode!r}: expected 'unaware' or 'aware'")
        if len(feeders) != network.npus:
            raise SimulationError(f"the network has {network.npus} NPUs but {len(feeders)} workload file(s) were given")
        if compute_scale <= 0 or comm_scale <= 0:
            raise SimulationError("compute and communication scales must be positive")
        npu_speed = npu_speed or [1.0] * len(feeders)
        if len(npu_speed) != len(feeders) or min(npu_speed) <= 0:
            raise SimulationError(f"npu_speed needs one positive factor per NPU ({len(feeders)})")
        self.feeders, self.network, self.system, self.mode = feeders, network, system, mode
        self.comm_scale, self.record_timeline, self.reuse_alone, self.progress = (
            comm_scale, record_timeline, reuse_alone, progress)
        self.collectives = (AwareCollectiveModel if mode == "aware" else CollectiveModel)(network, system, comm_scale)
        self.memory = LocalMemory(system)
        decoder = NodeDecoder(network, system, comm_groups or {}, self.collectives, self.memory, compute_scale,
                              npu_speed)
        self.nodes = [decoder.decode(npu, f) for npu, f in enumerate(feeders)]
        self.shapes = decoder.shapes
        slots = {node.slot for _, node in self.shapes}
        self.gpu_job = CPU in slots and GPU_COMPUTE in slots  # host and device work: say what held the path

    def run(self) -> SimResult:
        """Runs the job. Aware, a run that used holding tables is kept only where nothing else
        touched a collective timed from its table and no two events of one tick met whose order
        the tables may change (live.py). Else the job runs again: with those collectives (and
        those of like groups, live.AwareCollectives.alike) live while the CPU time spent so far
        is below what the tables saved in the last run (the replays alone of the collectives
        it took from them), else, for such a meeting, or after MAX_ATTEMPTS, with every
        collective live. Every way gives the same result; `attempts` says how many runs it took
        (progress reports start again with each)."""
        shortcuts, forced = self.reuse_alone, frozenset()
        saved = [feeder.save_state() for feeder in self.feeders] if self.mode == "aware" and shortcuts else None
        spent = 0.0
        for attempt in range(self.MAX_ATTEMPTS + 1):
            if attempt:
                for feeder, state in zip(self.feeders, saved):
                    feeder.restore_state(state)
            start = time.process_time()
            results, workload, system, runner = self._run(shortcuts, forced)
            spent += time.process_time() - start
            if not shortcuts or self.mode != "aware":
                break
            if runner.conflicts:
                forced = frozenset(forced | runner.alike(runner.conflicts))
                shortcuts = attempt + 1 < self.MAX_ATTEMPTS and spent < runner.tabled_cost
            elif runner.used_shortcuts and (runner.coincidences or workload.coincidences):
                shortcuts = False
            else:
                break
        self.attempts = attempt + 1

        for npu, r in enumerate(results):
            r.time_by_category = workload.time_by_category(npu)
        if self.gpu_job:
            for r, path in zip(results, critical_paths(self.feeders, self.nodes, workload.issued_at, workload.ran)):
                r.critical_path = path
        extensions = workload.extensions | system.extensions
        result = SimResult(self.mode, results, workload.timeline() if self.record_timeline else None,
                           notes=[EXTENSIONS.get(label, self.memory.note) for label in sorted(extensions)]
                           + sorted(set(runner.notes)))
        if workload.unfinished():
            report: dict[int, list[str]] = defaultdict(list)
            explained: dict[int, set] = defaultdict(set)  # per NPU: issued nodes the report explains
            system.waits(workload.node_id, report, explained)
            workload.blocked(report, explained)
            raise SimulationDeadlock(dict(report), result)
        return result

    def _run(self, shortcuts: bool, forced: frozenset) -> tuple:
        """One run of the job: (results, workload, system layer, collective runner)."""
        events = EventQueue()  # node completions (tick, npu, node index) and calls (tick, CALL, (function, args))
        results = [NpuResult(npu) for npu in range(len(self.feeders))]
        workload = Workload(self.feeders, self.nodes, events, results, self.record_timeline or self.gpu_job,
                            self.progress)
        if self.mode == "aware":
            network = (WatchedFabric if shortcuts else AwareFabric)(self.network, events, self.comm_scale)
            runner = AwareCollectives(self.collectives, network, events, self.shapes, shortcuts, forced)
            if shortcuts:
                workload.watch_coincidences()
        else:
            network = UnawareNetwork(self.network, self.comm_scale)
            runner = Unaware(self.collectives)
        system = workload.system = System(self.nodes, network, runner, events.at, results)
        workload.start()
        events.run(workload.complete)  # calls are steps of the live replays and the network
        return results, workload, system, runner


def simulate(job: Job | Sequence[pa.Table], network: NetworkConfig, system: SystemConfig, *,
             comm_groups: dict[int, tuple[int, ...]] | None = None, mode: str = "unaware",
             traced_npus: int | None = None, scaling: str = "weak", record_timeline: bool = False,
             **knobs) -> SimResult:
    """Simulates a job (a Job, or one node table per NPU, index = NPU id) on a network and
    system (sim/config.py's objects). comm_groups defaults to the Job's.

    With traced_npus (N, the job's table count) different from the network's NPU count (M),
    the N tables are scaled to M NPUs (sim/whatif.py); result.assumptions says how. knobs:
    compute_scale, comm_scale, npu_speed, reuse_alone, progress (see Engine)."""
    tables, groups = (job.tables, job.comm_groups) if isinstance(job, Job) else (list(job), {})
    if comm_groups is not None:
        groups = comm_groups
    paths = [table_source(t, f"<npu {npu}>") for npu, t in enumerate(tables)]
    assumptions: list[str] = []
    if traced_npus is not None and traced_npus != network.npus:
        if traced_npus != len(tables):
            raise SimulationError(f"traced_npus is {traced_npus} but the job has {len(tables)} rank(s)")
        tables, assumptions = scale_job(tables, network.npus, scaling)
        paths = [f"{paths[npu % traced_npus]} (as NPU {npu})" for npu in range(network.npus)]
    feeders = []
    for npu, (table, path) in enumerate(zip(tables, paths)):
        try:
            feeders.append(GraphFeeder(table, path=path))
        except ChakraError as exc:
            raise SimulationError(f"workload for NPU {npu} of {len(tables)}: {exc}") from None
    result = Engine(feeders, network, system, comm_groups=groups, mode=mode, record_timeline=record_timeline,
                    **knobs).run()
    result.assumptions = assumptions
    return result
