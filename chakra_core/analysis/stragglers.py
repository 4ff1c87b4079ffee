"""Who holds a multi-rank job back, why, and what it costs (docs/cli.md, 'chakra stragglers').

A straggler is a rank the others wait for. Each rank's work is cut into segments at its
arrivals at communications (segment i of step s: from its i-th arrival in the step to the
next), which every rank of a job running the same program has in the same order. A rank's
excess in a segment is its work there beyond the median of its peers' in the same segment, and
by kind (analysis/rank_timeline.py) which part grew. Its cost is measured, not estimated: the job
is replayed (analysis/cross_rank.py) with that rank's excess removed, segment by segment, its
other work as recorded, and the step time saved per step is the cost. Only the late part
changes: a rank that is slow before one all-reduce and on time elsewhere keeps its time elsewhere.

The cause is the kind whose excess is largest: `compute` (with the operator class and the
innermost operator that grew most against the peers' median), `host` (time with no operator
running: a stall), `communication` (its own transfers, and blocking calls' own time, longer than
its peers') or `input` (data loading). At most CANDIDATES ranks are priced, those with the most
excess, and only ranks whose excess reaches the floor (removing work saves at most that work). A
rank is reported when its cost is at least FLOOR_SHARE of the step: below that, run-to-run noise
is of the same size (the shipped balanced four-rank CPU job's largest cost is 6% of its step).
"""

from __future__ import annotations

import numpy as np

from chakra_core.analysis import cross_rank
from chakra_core.analysis.rank_timeline import RankTimeline

FLOOR_SHARE = 0.05  # a straggler saves at least this share of the step when it is made median
CANDIDATES = 8  # ranks priced by a replay each, those with the most excess first


def _by_segment(events: list):
    """Each event with the segment it falls in: (step, arrivals so far in the step)."""
    step, arrived = -1, 0
    for event in events:
        if event[0] == "step":
            step, arrived = event[1], 0
        elif event[0] == "issue":
            arrived += 1
        yield (step, arrived), event


def segments(tl: RankTimeline) -> dict:
    """(step, arrivals so far in the step) -> [work ns, parts] of the rank."""
    out: dict = {}
    for seg, event in _by_segment(tl.events):
        if event[0] == "work":
            totals = out.setdefault(seg, [0, {}])
            totals[0] += event[1]
            for label, ns in event[2].items():
                totals[1][label] = totals[1].get(label, 0) + ns
    return out


def peer_medians(values: np.ndarray) -> np.ndarray:
    """For each value, the median of the others (NaN for a value alone); one sort, whatever the count."""
    n = len(values)
    if n < 2:
        return np.full(n, np.nan)
    order = np.argsort(values, kind="stable")
    ranked, position = values[order], np.empty(n, np.int64)
    position[order] = np.arange(n)
    lo, hi = (n - 2) // 2, (n - 1) // 2  # the middle of the n - 1 others, in their sorted order
    return (ranked[lo + (lo >= position)] + ranked[hi + (hi >= position)]) / 2


def excess(timelines: list[RankTimeline], by_rank: dict) -> dict:
    """rank -> {segment: (excess ns, {kind: excess ns})} over the median of its peers (the ranks
    with the same segment)."""
    holders: dict = {}
    for tl in timelines:
        for seg in by_rank[tl.rank]:
            holders.setdefault(seg, []).append(tl.rank)
    out: dict = {tl.rank: {} for tl in timelines}
    for seg, ranks in holders.items():
        work = np.array([by_rank[r][seg][0] for r in ranks], np.float64)
        over = work - peer_medians(work)
        late = np.flatnonzero(over > 0)
        if not len(late):
            continue
        labels = sorted({label for r in ranks for label in by_rank[r][seg][1]})
        parts = np.array([[by_rank[r][seg][1].get(label, 0) for label in labels] for r in ranks], np.float64)
        grew = np.column_stack([parts[:, j] - peer_medians(parts[:, j]) for j in range(len(labels))])
        for i in late.tolist():
            out[ranks[i]][seg] = (float(over[i]), {label: float(g) for label, g in zip(labels, grew[i]) if g > 0})
    return out


def _without_excess(tl: RankTimeline, extra: dict, work: dict) -> list:
    """The rank's events with each segment's work scaled down by its excess."""
    events = []
    for seg, event in _by_segment(tl.events):
        if event[0] == "work" and seg in extra:
            keep = 1.0 - extra[seg][0] / work[seg][0]
            event = ("work", int(event[1] * keep), {k: int(v * keep) for k, v in event[2].items()})
        events.append(event)
    return events


def _cause(timelines, rank: int, grew: dict, transfer_over: float) -> dict:
    """The kind that grew most, with the operator class and operator for compute."""
    kinds: dict = {}
    for label, ns in grew.items():
        kind = label.split(":")[0]
        kinds[kind] = kinds.get(kind, 0) + ns
    if transfer_over > 0:
        kinds["communication"] = kinds.get("communication", 0) + transfer_over
    cause = max(kinds, key=kinds.get) if kinds else "host"
    out = {"cause": cause, "excess_by_kind_ns": {k: int(v) for k, v in sorted(kinds.items())}}
    if cause == "compute":
        classes = {label.split(":", 1)[1]: ns for label, ns in grew.items() if label.startswith("compute:")}
        out["family"] = max(classes, key=classes.get)
        out["operator"] = _operator_grown(timelines, rank)
    return out


def transfer_excess(joins: dict) -> dict:
    """rank -> its own transfers beyond its peers' median in the same joins, summed (ns)."""
    out: dict = {}
    for join in joins.values():
        ranks = list(join.transfer)
        own = np.array([join.transfer[r] for r in ranks], np.float64)
        over = np.nan_to_num(own - peer_medians(own))
        for r, ns in zip(ranks, over.tolist()):
            if ns > 0:
                out[r] = out.get(r, 0.0) + ns
    return out


def _operator_grown(timelines: list[RankTimeline], rank: int) -> str | None:
    mine = next(tl.operators for tl in timelines if tl.rank == rank)
    peers = [tl.operators for tl in timelines if tl.rank != rank]
    grown = {name: ns - float(np.median([p.get(name, 0) for p in peers])) for name, ns in mine.items()}
    return max(grown, key=grown.get) if grown else None


def analyze(timelines: list[RankTimeline]) -> dict:
    """The report of `chakra stragglers` for a job's rank timelines (docs/cli.md)."""
    timelines = [tl for tl in timelines if tl.events]
    if not timelines:
        return {"step_ns": 0, "steps": [], "stragglers": [], "critical_path": {"length_ns": 0, "steps": 0, "parts": [], "segments": []},
                "waits": {}, "replay": {}, "floor_share": FLOOR_SHARE}
    joins = cross_rank.match_joins(timelines)
    base = cross_rank.replay(timelines, joins)
    marks = cross_rank.marks_index(timelines)
    steps = sorted(base.step_ends)
    paths = [cross_rank.walk(timelines, base, marks, s) for s in steps]
    step_ns = float(np.mean([p["length_ns"] for p in paths]))
    replayed = float(np.mean(cross_rank.step_times(base)))
    return {
        "step_ns": int(step_ns),
        "steps": [_step_row(timelines, s, p) for s, p in zip(steps, paths)],
        "stragglers": _stragglers(timelines, joins, replayed, step_ns),
        "critical_path": _over_steps(paths),
        "waits": {str(r): row for r, row in sorted(cross_rank.waits_by_rank(joins).items())},
        "replay": {"recorded_step_ns": _recorded_step(timelines), "replayed_step_ns": int(replayed)},
        "floor_share": FLOOR_SHARE,
    }


def _stragglers(timelines, joins, replayed: float, step_ns: float) -> list[dict]:
    work = {tl.rank: segments(tl) for tl in timelines}
    over = excess(timelines, work)
    per_step = {r: sum(v[0] for v in over[r].values()) / max(1, len(_steps_of(work[r]))) for r in over}
    # removing work saves at most that work (a replay is monotone): a rank whose excess is under
    # the floor cannot be a straggler and is not priced
    ranked = sorted((r for r in over if per_step[r] >= FLOOR_SHARE * step_ns), key=lambda r: -per_step[r])
    transfers = transfer_excess(joins)
    by_rank = {tl.rank: tl for tl in timelines}
    found = []
    for rank in ranked[:CANDIDATES]:
        tl = by_rank[rank]
        events = {rank: _without_excess(tl, over[rank], work[rank])}
        saved = replayed - float(np.mean(cross_rank.step_times(cross_rank.replay(timelines, joins, events))))
        if saved < FLOOR_SHARE * step_ns:
            continue
        grew: dict = {}
        for _, parts in over[rank].values():
            for label, ns in parts.items():
                grew[label] = grew.get(label, 0) + ns
        row = {"rank": rank, "cost_ns": int(saved), "share": saved / step_ns if step_ns else 0.0,
               "excess_ns": int(per_step[rank])}
        row.update(_cause(timelines, rank, grew, transfers.get(rank, 0.0)))
        found.append(row)
    return sorted(found, key=lambda row: -row["cost_ns"])


def _steps_of(segs: dict) -> set:
    return {step for step, _ in segs}


def _step_row(timelines, step: int, path: dict) -> dict:
    names = timelines[0].steps
    closers: dict = {}
    for join in path["joins"]:
        closers[join["closer"]] = closers.get(join["closer"], 0) + 1
    return {"step": names[step] if step < len(names) else str(step), "length_ns": int(path["length_ns"]),
            "parts": _part_rows(path["parts"], 1), "joins": path["joins"],
            "closers": {str(r): n for r, n in sorted(closers.items())}, "segments": path["segments"]}


def _part_rows(parts: dict, steps: int) -> list[dict]:
    rows = [{"rank": r, "kind": kind, "ns": int(ns / steps)} for (r, kind), ns in parts.items()]
    return sorted(rows, key=lambda row: -row["ns"])


def _over_steps(paths: list[dict]) -> dict:
    total: dict = {}
    for p in paths:
        for key, ns in p["parts"].items():
            total[key] = total.get(key, 0) + ns
    n = len(paths)
    return {"length_ns": int(np.mean([p["length_ns"] for p in paths])), "steps": n,
            "parts": _part_rows(total, n),
            "segments": [list(s) for s in paths[-1]["segments"]] if paths else []}


def _recorded_step(timelines: list[RankTimeline]) -> int:
    """The recorded step time: from the earliest first-step start to the latest last-step end,
    per step."""
    steps = min(len(tl.windows) for tl in timelines)
    if not steps:
        return 0
    begin = min(tl.windows[0][0] for tl in timelines)
    end = max(tl.windows[steps - 1][1] for tl in timelines)
    return int((end - begin) / steps)


def job_report(tables: list, times: list | None = None, ranks: list[int] | None = None) -> dict:
    """analyze() of a job given as one node table per rank (`ranks`: each table's rank, default
    its index); `times[i]`, where given, the (start, end) ns a simulation gave each node of
    table i instead of the recorded ones."""
    from chakra_core.analysis.rank_timeline import rank_timeline

    ranks = list(range(len(tables))) if ranks is None else ranks
    return analyze([rank_timeline(t, r, None if times is None else times[i])
                    for i, (r, t) in enumerate(zip(ranks, tables))])


def simulated_report(job, system) -> dict:
    """job_report() of the job as the simulator runs it (analysis/predicted.py, timeline recorded
    on a Ring of its NPUs with `system`): the predicted critical path beside the recorded one."""
    from chakra_core.analysis.device_work import simulated_times
    from chakra_core.analysis.predicted import predict

    result = predict(job, system)
    return job_report(job.tables, times=[simulated_times(t, r, result.timeline) for r, t in enumerate(job.tables)])
