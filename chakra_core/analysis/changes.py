"""What changed between two sets of a job's figures (history.py), and which part explains it.

One engine for the nightly detection (pipeline/nightly/history.py, the `regressions` table) and for
`chakra diff`. A metric's change is flagged when it moves beyond

    threshold = max(FLOORS[unit], NOISE_K x noise)

where `noise` is the job's own day-to-day variation of that metric: the median relative change
between consecutive days of its history (at least MIN_HISTORY changes of the same program),
and the floor holds where there is less history. A part (a kernel family, an idle cause, the
host) is flagged only when it also moves by SIGNIFICANCE of what it is part of (the device's
work for a family, the step for an idle cause, the simulated finish for host time), so that a
tiny family doubling is no news. A flagged headline's cause is the part whose
change, in the headline's direction, is largest; `explained` is that part's share of the
headline's change, at most 1 (a part that moved more than its headline, others moving back,
explains all of it). Rises of time, bytes and counts are regressions, falls improvements; the
busy share's moves are `changed` (slower kernels raise it as a faster host does). A figure beyond
its threshold that is not flagged says why (`why_not`). The simulated finish's parts and the busy share only explain
other changes: they are never flagged alone (EXPLAINING_ONLY).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

from chakra_core.analysis.history import HEADLINES, SIM_PARTS, unit
from chakra_core.analysis.stats import KERNEL_CLASS

FLOORS = {"ns": 0.05, "bytes": 0.01, "count": 0.01, "share": 0.05}
NOISE_K = 4.0
MIN_HISTORY = 2  # day-to-day changes needed before the job's own noise counts
SIGNIFICANCE = 0.02
# figures that explain others but are no news of their own: the simulated finish's parts, and the
# busy share (it rises when kernels get slower)
EXPLAINING_ONLY = frozenset({"busy_share", *SIM_PARTS.values()})
# headline -> the prefixes of its parts, in the headline's units
PARTS: dict[str, tuple[str, ...]] = {
    "step_ns": ("family_ns:", "idle_ns:"),
    "predicted_step_ns": ("family_ns:", "idle_ns:"),
    "sim_finish_ns": tuple(SIM_PARTS.values()),
    "path_step_ns": ("rank_ns:",),  # a straggler's cost: the cause `rank:<r>:<cause>`
}
# where a simulated part leads when it is the cause: the finer figures that explain it
FINER = {"sim_compute_ns": ("family_ns:", "class_ns:"), "sim_exposed_comm_ns": ("comm_bytes:",),
         "sim_host_ns": ("host_ns",)}
CAUSE_NAMES = {"family_ns": "family", "idle_ns": "idle", "class_ns": "class", "comm_bytes": "comm_bytes",
               "comm_count": "comm_count", "host_ns": "host", "sim_host_ns": "host",
               "sim_exposed_comm_ns": "communication", "sim_compute_ns": "compute", "sim_idle_ns": "idle",
               "ranks": "ranks", "nodes": "program", "rank_ns": "rank"}


@dataclass(frozen=True)
class Change:
    metric: str
    before: float | None
    after: float | None
    change: float | None  # relative: (after - before) / before; None where before is 0 or missing
    threshold: float
    noise: float | None  # the job's own day-to-day variation of the metric; None: too little history
    flagged: bool
    kind: str  # regression, improvement, changed (the busy share), added, vanished or same
    cause: str  # what moved: the metric's own part, or for a headline the part that explains most of it
    explained: float | None  # the cause's share of the change (headlines)
    why_not: str | None = None  # why a figure beyond its threshold is not flagged

    def to_dict(self) -> dict:
        return asdict(self)


def noise(history: Sequence[Mapping[str, float]], metric: str) -> float | None:
    """The median relative day-to-day change of `metric` over `history` (oldest first), None
    with fewer than MIN_HISTORY changes."""
    values = [h[metric] for h in history if metric in h]
    steps = [abs(b - a) / abs(a) for a, b in zip(values, values[1:]) if a]
    return statistics.median(steps) if len(steps) >= MIN_HISTORY else None


def cause_of(metric: str) -> str:
    base, part = metric.split(":", 1) if ":" in metric else (metric, None)
    name = CAUSE_NAMES.get(base, base)
    return f"{name}:{part}" if part else name


def compare(before: Mapping[str, float], after: Mapping[str, float],
            history: Sequence[Mapping[str, float]] = (), program_changed: bool = False) -> list[Change]:
    """Every metric of either side: the flagged ones first, each part largest relative change first. `history`:
    the earlier days' figures of the same program, oldest first, `before` last."""
    changes = {m: _change(m, before.get(m), after.get(m), noise(history, m)) for m in {*before, *after}}
    changes = {m: _significant(c, before, after) for m, c in changes.items()}
    changes = _one_cause_once(changes)
    for headline in HEADLINES:
        if headline in changes:
            changes[headline] = _attributed(changes[headline], changes, program_changed)
    return sorted(changes.values(), key=lambda c: (not c.flagged, -abs(c.change or 0), c.metric))


def _one_cause_once(changes: dict[str, Change]) -> dict[str, Change]:
    """An operator class's change is not flagged beside the kernel family whose class it is that
    moved the same way (stats.KERNEL_CLASS: one vocabulary): slower GEMM kernels are one cause,
    not also `class_ns:gemm`."""
    moved = {KERNEL_CLASS[m.split(":", 1)[1]]: c.kind for m, c in changes.items()
             if c.flagged and m.startswith("family_ns:") and m.split(":", 1)[1] in KERNEL_CLASS}
    return {m: Change(**{**c.to_dict(), "flagged": False,
                         "why_not": "the kernel family of the same name is flagged: one cause, once"})
            if c.flagged and m.startswith("class_ns:") and moved.get(m.split(":", 1)[1]) == c.kind else c
            for m, c in changes.items()}


def flagged(changes: Sequence[Change]) -> list[Change]:
    return [c for c in changes if c.flagged]


def _change(metric: str, before: float | None, after: float | None, spread: float | None) -> Change:
    threshold = max(FLOORS[unit(metric)], NOISE_K * spread if spread is not None else 0.0)
    if before is None or after is None:
        kind = "added" if before is None else "vanished"
        return Change(metric, before, after, None, threshold, spread, metric in ("ranks",), kind, cause_of(metric), None)
    relative = (after - before) / abs(before) if before else (None if after == before else float("inf"))
    moved = relative is not None and abs(relative) > threshold
    # the busy share is neither: it rises when kernels get slower as when the host gets faster
    kind = "same" if not moved else "changed" if metric == "busy_share" else \
        "regression" if after > before else "improvement"
    explaining = moved and metric in EXPLAINING_ONLY
    return Change(metric, before, after, relative if relative != float("inf") else None, threshold, spread,
                  moved and not explaining, kind, cause_of(metric), None,
                  "it only explains other figures (never news alone)" if explaining else None)


def _headline_of(metric: str) -> str | None:
    return next((h for h, prefixes in PARTS.items() if any(metric.startswith(p) for p in prefixes)), None)


def _significant(c: Change, before: Mapping[str, float], after: Mapping[str, float]) -> Change:
    """A part is flagged only when it moves by SIGNIFICANCE of what it is part of (_scale)."""
    if not c.flagged or c.before is None or c.after is None:
        return c
    scale = max(_scale(c.metric, before), _scale(c.metric, after))
    if scale and abs(c.after - c.before) < SIGNIFICANCE * scale:
        return Change(**{**c.to_dict(), "flagged": False, "kind": "same",
                         "why_not": f"it moved less than {SIGNIFICANCE:.0%} of what it is part of"})
    return c


def _scale(metric: str, figures: Mapping[str, float]) -> float:
    """What a part is measured against: a family against the device's work (all families), so a
    host-bound job's kernels still count; an idle cause against the step; host and operator-class
    time against the simulated finish; 0 for a figure that is no part."""
    if metric.startswith("family_ns:"):
        return sum(v for m, v in figures.items() if m.startswith("family_ns:"))
    if metric.startswith("idle_ns:"):
        return figures.get("step_ns", 0.0)
    if metric == "host_ns" or metric.startswith("class_ns:"):
        return figures.get("sim_finish_ns", 0.0)
    if metric.startswith("rank_ns:"):
        return figures.get("path_step_ns", 0.0)
    return 0.0


def _attributed(headline: Change, changes: Mapping[str, Change], program_changed: bool) -> Change:
    """The headline with the part that explains most of its change as its cause."""
    if headline.before is None or headline.after is None or headline.before == headline.after:
        return headline
    delta = headline.after - headline.before
    top = _largest_part(PARTS[headline.metric], changes, delta)
    if top is None:
        return headline
    # a share of at most all of it: a cause that moved more than its headline (other parts moved back) explains all
    cause, explained = top.cause, min(_delta(top) / delta, 1.0)
    finer = _largest_part(FINER.get(top.metric, ()), changes, delta)
    if finer is not None and (finer.metric.startswith("comm_bytes:") and finer.flagged
                              or not finer.metric.startswith("comm_bytes:")):
        cause = finer.cause
    if program_changed:
        cause = "program"
    return Change(**{**headline.to_dict(), "cause": cause, "explained": explained})


def _delta(c: Change) -> float:
    return (c.after or 0.0) - (c.before or 0.0)


def _largest_part(prefixes: Sequence[str], changes: Mapping[str, Change], delta: float) -> Change | None:
    """The part with the largest change in the direction of `delta` (bytes by relative change)."""
    parts = [c for m, c in changes.items() if any(m.startswith(p) for p in prefixes)]
    if not parts:
        return None
    if all(unit(c.metric) == "bytes" for c in parts):
        return max(parts, key=lambda c: abs(c.change or 0), default=None)
    best = max(parts, key=lambda c: _delta(c) * (1 if delta > 0 else -1))
    return best if _delta(best) * delta > 0 else None

