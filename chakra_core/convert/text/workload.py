"""ASTRA-sim 1.0 text workloads to Chakra: one graph per NPU that runs the training loop ASTRA-sim
1.0 ran for the file's policy, for --passes passes (docs/other-sources.md).

Each policy is the order in which ASTRA-sim 1.0's loop computes, issues collectives and waits
for them: a compute node follows the step before it; a blocking collective holds the loop
until it ends, a non-blocking one only the steps that waited for it (the next layer's
backward step for an input-gradient collective, the same layer's next forward for a
weight-gradient one). Collectives run on process groups, as ASTRA-sim 1.0's network
dimensions did: `world` (every NPU), `inner` (consecutive NPUs, the first dimension) and
`outer` (the NPUs across it); a hybrid policy puts model-parallel collectives on one and
data-parallel ones on the other, so HYBRID_DATA_MODEL and HYBRID_MODEL_DATA differ.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from chakra_core import limits
from chakra_core.convert.common.source_file import Converted, SourceOptions, read_source
from chakra_core.convert.text.grammar import Layer, Workload, parse_workload
from chakra_core.errors import SourceFormatError
from chakra_core.format.job import Job
from chakra_core.generate.builder import JobBuilder, RankGraph

PHASES = ("fwd", "ig", "wg")
# The group of each phase's collective: world, inner, outer, or None where the policy issues none.
ROLES: dict[str, tuple[str | None, str | None, str | None]] = {
    "DATA": (None, None, "world"), "MICRO": (None, None, "world"), "HYBRID_DLRM": (None, None, "world"),
    "HYBRID_DLRM_ENHANCED": (None, None, "world"),
    "MODEL": ("world", "world", None), "DISTRIBUTED_INFERENCE": ("world", "world", None),
    "HYBRID_DATA_MODEL": ("inner", "inner", "outer"), "HYBRID_TRANSFORMER": ("inner", "inner", "outer"),
    "HYBRID_TRANSFORMER_FWD_IN_BCKWD": ("inner", "inner", "outer"),
    "HYBRID_MODEL_DATA": ("outer", "outer", "inner"),
}
ALL_WORLD = ("world", "world", "world")  # HYBRID_DLRM's first layer (the embeddings): every NPU


@dataclass(frozen=True)
class Step:
    """One node of every NPU's graph: a compute (comm None) or a collective on `role`'s group."""

    name: str
    deps: tuple[int, ...]
    cycles: int = 0
    comm: str | None = None
    size: int = 0
    role: str = "world"


@dataclass
class Program:
    """The steps of one NPU, in loop order (a step's deps are earlier steps); collectives whose
    group is a single NPU (`live` lacks its role) or that the policy never issues are counted."""

    workload: Workload
    live: frozenset[str]
    suffix: str = ""
    steps: list[Step] = field(default_factory=list)
    issued: Counter = field(default_factory=Counter)
    single: Counter = field(default_factory=Counter)

    def roles(self, index: int, layer: Layer) -> tuple:
        if self.workload.policy.startswith("HYBRID_DLRM") and index == 0:
            return ALL_WORLD
        return ROLES[layer.policy or self.workload.policy]

    def compute(self, index: int, phase: str, deps: list[int | None], again: str = "") -> int:
        layer = self.workload.layers[index]
        return self._add(Step(f"{layer.name} {phase}{again}{self.suffix}", _ids(deps), getattr(layer, phase).cycles))

    def collective(self, index: int, phase: str, deps: list[int | None]) -> int | None:
        """The phase's collective after deps; None for NONE, a policy that issues none here, or a one-NPU group."""
        layer = self.workload.layers[index]
        step, role = getattr(layer, phase), self.roles(index, layer)[PHASES.index(phase)]
        if step.comm is None or role is None:
            return None
        if role not in self.live:
            self.single[f"{phase} {step.comm}"] += 1
            return None
        self.issued[f"{phase} {step.comm}"] += 1
        return self._add(Step(f"{layer.name} {phase} {step.comm}{self.suffix}", _ids(deps), comm=step.comm,
                              size=step.size, role=role))

    def _add(self, step: Step) -> int:
        self.steps.append(step)
        return len(self.steps) - 1


def _ids(deps: list[int | None]) -> tuple[int, ...]:
    return tuple(sorted({d for d in deps if d is not None}))


def _first(*ids: int | None) -> int | None:
    return next((i for i in ids if i is not None), None)


# ---------------------------------------------------------------------------- the loops, one pass each
# Each takes the steps the loop waits on when the pass starts and the weight-gradient
# collective of each layer's previous pass (its next forward waits for it), and returns the former.
def _data_pass(p: Program, ctl: list, wg_done: list) -> list:
    n = len(p.workload.layers)
    for i in range(n):
        ctl = [p.compute(i, "fwd", ctl + [wg_done[i]])]
    for i in reversed(range(n)):
        wg = p.compute(i, "wg", ctl)
        wg_done[i] = p.collective(i, "wg", [wg])
        ctl = [p.compute(i, "ig", [wg])] if i else [wg]  # the first layer has no input gradient to compute
    return ctl


def _micro_pass(p: Program, ctl: list, wg_done: list) -> list:
    for i in range(len(p.workload.layers)):
        p.collective(i, "wg", [])
    return ctl


def _forward(p: Program, ctl: list, wg_done: list, layers: range | None = None, again: str = "") -> list:
    """Each layer's forward compute, then its collective, which blocks the loop."""
    for i in range(len(p.workload.layers)) if layers is None else layers:
        fwd = p.compute(i, "fwd", ctl + [wg_done[i]], again)
        ctl = [_first(p.collective(i, "fwd", [fwd]), fwd)]
    return ctl


def _backward(p: Program, i: int, ctl: list, wg_done: list, blocking_ig: bool) -> list:
    """Layer i's input gradient and its collective, weight gradient and its collective; the
    next layer's backward waits for this one's input-gradient collective."""
    ig = p.compute(i, "ig", ctl)
    ig_comm = p.collective(i, "ig", [ig]) if blocking_ig or i else None
    wg = p.compute(i, "wg", [_first(ig_comm, ig) if blocking_ig else ig])
    wg_done[i] = p.collective(i, "wg", [wg])
    return [wg, ig_comm]


def _hybrid_pass(p: Program, ctl: list, wg_done: list) -> list:
    """MODEL, both HYBRIDs, HYBRID_CUSTOMIZED: the first layer issues no input-gradient collective."""
    ctl = _forward(p, ctl, wg_done)
    for i in reversed(range(len(p.workload.layers))):
        ctl = _backward(p, i, ctl, wg_done, blocking_ig=False)
    return ctl


def _transformer_pass(p: Program, ctl: list, wg_done: list) -> list:
    """HYBRID_TRANSFORMER: every layer's input-gradient collective holds the loop. With checkpoints
    (HYBRID_TRANSFORMER_FWD_IN_BCKWD), the backward of an initiating layer first computes the
    forward again from the nearest checkpoint at or below it up to the layer before it."""
    w = p.workload
    ctl = _forward(p, ctl, wg_done)
    for i in reversed(range(len(w.layers))):
        if i in w.initiates:
            start = max((c for c in w.checkpoints if c <= i), default=0)
            ctl = _forward(p, ctl, wg_done, range(start, i), " again")
        ctl = _backward(p, i, ctl, wg_done, blocking_ig=True)
    return ctl


def _inference_pass(p: Program, ctl: list, wg_done: list) -> list:
    return _forward(p, ctl, wg_done)


def _dlrm_pass(p: Program, ctl: list, wg_done: list) -> list:
    """The embeddings' all-to-all is issued after the first layer's forward compute and awaited after
    the last bottom layer's; backward, the input-gradient all-to-all after the first top layer's input
    gradient, awaited at the end of the pass (not by HYBRID_DLRM_ENHANCED)."""
    w = p.workload
    n, bottom = len(w.layers), w.last_bottom_layer
    fwd_a2a = ig_a2a = None
    for i in range(n):
        ctl = [p.compute(i, "fwd", ctl + [wg_done[i]])]
        if i == 0 and w.layers[0].fwd.comm == "ALL_TO_ALL":
            fwd_a2a = p.collective(0, "fwd", ctl)
        if i == bottom:
            ctl.append(fwd_a2a)
    for i in reversed(range(n)):
        wg = p.compute(i, "wg", ctl)
        wg_done[i] = p.collective(i, "wg", [wg])
        if i == 0:
            return [wg] if w.policy == "HYBRID_DLRM_ENHANCED" else [wg, ig_a2a]
        ctl = [p.compute(i, "ig", [wg])]
        if i == bottom + 1:
            ig_a2a = p.collective(0, "ig", ctl)
    return ctl


PASSES: dict[str, Callable[[Program, list, list], list]] = {
    "DATA": _data_pass, "MICRO": _micro_pass, "MODEL": _hybrid_pass, "HYBRID_DATA_MODEL": _hybrid_pass,
    "HYBRID_MODEL_DATA": _hybrid_pass, "HYBRID_CUSTOMIZED": _hybrid_pass, "HYBRID_TRANSFORMER": _transformer_pass,
    "HYBRID_TRANSFORMER_FWD_IN_BCKWD": _transformer_pass,
    "HYBRID_DLRM": _dlrm_pass, "HYBRID_DLRM_ENHANCED": _dlrm_pass, "DISTRIBUTED_INFERENCE": _inference_pass,
}


def build_program(workload: Workload, passes: int, live: frozenset[str]) -> Program:
    program = Program(workload, live)
    ctl: list = []
    wg_done: list = [None] * len(workload.layers)
    for k in range(passes):
        program.suffix = f" #{k}" if passes > 1 else ""
        ctl = PASSES[workload.policy](program, ctl, wg_done)
    return program


# ---------------------------------------------------------------------------- groups and graphs
def _roles_used(workload: Workload) -> set[str]:
    policies = {layer.policy for layer in workload.layers} if workload.policy == "HYBRID_CUSTOMIZED" \
        else {workload.policy}
    return {role for policy in policies for role in ROLES[policy] if role}


def first_dimension(workload: Workload, options: SourceOptions) -> tuple[int, str]:
    """NPUs of the first network dimension (the `inner` groups) and where that figure comes from."""
    npus = options.npus
    if workload.model_group is not None:
        inner, origin, line = workload.model_group, "model_parallel_NPU_group on line 1", 1
    elif options.first_dim_npus is not None:
        inner, origin, line = options.first_dim_npus, "--first-dim-npus", None
    else:
        inner = min((d for d in range(1, npus + 1) if npus % d == 0), key=lambda d: (abs(d - math.sqrt(npus)), d))
        return inner, f"the divisor of {npus} nearest its square root (--first-dim-npus sets it)"
    if inner > npus or npus % inner:
        raise SourceFormatError(workload.path, f"{origin} is {inner}, which does not divide the {npus} NPUs "
                                "into groups", line=line)
    return inner, origin


def _rank_groups(builder: JobBuilder, npus: int, inner: int, live: frozenset[str]) -> list[dict[str, str]]:
    """Per NPU, the pg_name of each live role: inner = its block of `inner` consecutive NPUs,
    outer = the NPUs at its place in every block."""
    groups = []
    for rank in range(npus):
        block = rank - rank % inner
        names = {"world": "0"}
        if "inner" in live:
            names["inner"] = builder.group(range(block, block + inner))
        if "outer" in live:
            names["outer"] = builder.group(range(rank % inner, npus, inner))
        groups.append(names)
    return groups


def _graph(program: Program, rank: int, npus: int, pg: dict[str, str], frequency: float | None) -> RankGraph:
    graph = RankGraph(rank, npus=npus)
    for step in program.steps:
        if step.comm is None:
            us = step.cycles if frequency is None else round(step.cycles / frequency)
            graph.compute(step.name, step.deps, duration_us=us)
        else:
            graph.collective(step.name, step.comm, step.size, step.deps, pg_name=pg[step.role])
    return graph


def _check_size(path: str, nodes: int) -> None:
    """Within the nodes limit, and the lower one of jobs built in Python (source_nodes: a
    1M-layer workload within the first needed over 3.4 GB)."""
    for name in ("nodes", "source_nodes"):
        if nodes > limits.value(name):
            raise limits.LimitExceeded(path, name, f"the job would have {nodes:,} nodes over all NPUs")


def _check_options(path: str, options: SourceOptions) -> None:
    if options.npus is None or options.npus < 1:
        raise SourceFormatError(path, "a text workload needs the NPUs to run it on (--npus N >= 1), got "
                                f"{options.npus}")
    if options.npus > limits.value("npus"):
        raise limits.LimitExceeded(path, "npus", f"--npus {options.npus}")
    if options.passes < 1:
        raise SourceFormatError(path, f"--passes must be at least 1, got {options.passes}")
    frequency = options.npu_frequency_mhz
    if frequency is not None and not (math.isfinite(frequency) and frequency > 0):
        raise SourceFormatError(path, f"--npu-frequency must be a positive number of MHz, got {frequency}")


def devices(src: str, options: SourceOptions) -> int:
    """The registry's device count (convert/sources.py): the NPUs the options run it on."""
    return options.npus


def convert_text(src: str, out_dir: str, prefix: str, options: SourceOptions, progress, accounted):
    """The registry's entry (convert/sources.py): the workload at src run as `options` say."""
    return convert_workload(src, options).write(out_dir, prefix)


def convert_workload(path: str, options: SourceOptions) -> Converted:
    """The job ASTRA-sim 1.0 would have run from the text workload at `path` on options.npus NPUs."""
    workload = parse_workload(path, read_source(path))
    _check_options(path, options)
    # bound the work before doing it: 6 steps a layer, 2 more for each forward computed again
    _check_size(path, options.passes * len(workload.layers) * (6 + 2 * len(workload.initiates)))
    roles = _roles_used(workload)
    inner, origin = first_dimension(workload, options) if roles & {"inner", "outer"} else (options.npus, "")
    live = frozenset(r for r, size in (("world", options.npus), ("inner", inner), ("outer", options.npus // inner))
                     if size > 1 and r in roles)
    program = build_program(workload, options.passes, live)
    builder = JobBuilder(options.npus)
    rank_groups = _rank_groups(builder, options.npus, inner, live)
    signatures = [tuple(sorted(g.items())) for g in rank_groups]
    _check_size(path, len(program.steps) * options.npus)  # every NPU's file is written, shared table or not
    tables: dict[tuple, object] = {}
    for rank, (signature, pg) in enumerate(zip(signatures, rank_groups)):
        if signature not in tables:  # NPUs of the same groups run the same graph: one table, shared
            tables[signature] = _graph(program, rank, options.npus, pg, options.npu_frequency_mhz).table()
    job = Job([tables[s] for s in signatures], builder.comm_groups, "text")
    return Converted(job, _source_report(workload, options, program, (inner, origin) if roles - {"world"} else None),
                     [])


def _source_report(workload: Workload, options: SourceOptions, program: Program, split: tuple | None) -> dict:
    described = Counter()
    for layer in workload.layers:
        for phase in PHASES:
            comm = getattr(layer, phase).comm
            if comm:
                described[f"{phase} {comm}"] += options.passes
    frequency = options.npu_frequency_mhz
    report = {
        "format": "ASTRA-sim 1.0 text workload", "file": workload.path, "policy": workload.policy,
        "layers": len(workload.layers), "passes": options.passes, "npus": options.npus,
        "time": (f"compute cycles / {frequency:g} MHz, rounded to whole microseconds" if frequency else
                 "compute cycles written unchanged as microseconds (no --npu-frequency), as the reference converter"),
        "collectives": dict(sorted(program.issued.items())),
        "not_issued_by_policy": dict(sorted((described - program.issued - program.single).items())),
        "on_single_npu_groups": dict(sorted(program.single.items())),
        "notes": [],
    }
    if split:
        inner, origin = split
        report["first_dim_npus"] = {"npus": inner, "from": origin}
        report["notes"].append(_groups_note(workload, options.npus, inner))
    if any(layer.update for layer in workload.layers):
        report["notes"].append("the update time of each layer (its last field) is not modelled, as by the "
                               "reference converter")
    if report["not_issued_by_policy"]:
        report["notes"].append(f"{sum(report['not_issued_by_policy'].values())} collective(s) of the file are not "
                               f"issued by {workload.policy}, as in ASTRA-sim 1.0 (not_issued_by_policy)")
    return report


def _groups_note(workload: Workload, npus: int, inner: int) -> str:
    model = "outer" if workload.policy == "HYBRID_MODEL_DATA" else "inner"
    shapes = {"inner": f"blocks of {inner} consecutive NPUs", "outer": f"NPUs {inner} apart ({npus // inner} each)"}
    text = f"first network dimension {inner} NPUs: inner groups are {shapes['inner']}, outer groups {shapes['outer']}"
    if workload.policy == "HYBRID_CUSTOMIZED":
        return text + "; each layer's policy puts its collectives on them"
    return text + f"; model-parallel collectives on the {model}, data-parallel on the other"
