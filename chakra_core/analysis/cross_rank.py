"""The critical path of a multi-rank job across its ranks (docs/cli.md, 'chakra stragglers').

The ranks' timelines (analysis/rank_timeline.py) are replayed together: each rank runs its work in
order; a communication is released when its last member arrives (that member closes the join),
and completes on each member its own transfer later, the transfer being what the recording shows
after the release (completion minus the last arrival). A rank that waits for a communication
resumes at its completion. Replaying the recorded work gives back the recorded steps (the report's
`replay` says how closely); replaying it with one rank's work changed answers what-if questions
(analysis/stragglers.py).

The critical path of a step is walked back from the rank that ends it last: through that rank's
work (by kind), into a communication it waited for (its transfer), then onto the member that
closed that join, at its arrival, and so on until the step's start on the rank reached. Its
parts add up to its length. Each member's time in a communication splits into its wait for the
last member (release minus its arrival) and its own transfer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from chakra_core.analysis.rank_timeline import RankTimeline

COMMUNICATION = "communication"


@dataclass
class Join:
    members: list  # ranks
    arrivals: dict  # rank -> recorded arrival ns
    transfer: dict  # rank -> own transfer ns (recorded completion minus the last arrival)
    closer: int = -1


@dataclass
class Replay:
    times: dict  # rank -> list of event start times (ns), parallel to the rank's events
    resumed: dict  # rank -> {event index: completion it waited for}
    arrivals: dict  # key -> {rank: replayed arrival}
    release: dict  # key -> replayed release ns
    step_ends: dict = field(default_factory=dict)  # step -> latest end over the ranks
    step_starts: dict = field(default_factory=dict)  # step -> earliest start over the ranks


def match_joins(timelines: list[RankTimeline]) -> dict:
    """key -> Join over the ranks holding it."""
    joins: dict = {}
    for tl in timelines:
        for key, comm in tl.comms.items():
            join = joins.setdefault(key, Join([], {}, {}))
            join.members.append(tl.rank)
            join.arrivals[tl.rank] = comm.arrival
    completions = {tl.rank: tl.comms for tl in timelines}
    for key, join in joins.items():
        last = max(join.arrivals.values())
        join.closer = max(join.arrivals, key=lambda r: (join.arrivals[r], -r))
        own = {r: max(0, completions[r][key].completion - last) for r in join.members
               if completions[r][key].completion >= 0}
        typical = int(np.median(list(own.values()))) if own else 0
        join.transfer = {r: own.get(r, typical) for r in join.members}
    return joins


def replay(timelines: list[RankTimeline], joins: dict, events: dict | None = None) -> Replay:
    """Run the ranks' events together (module docstring); `events` (rank -> event list) replaces
    some ranks' recorded ones. A wait on a join some member never reaches is released by the
    members that did."""
    events = {tl.rank: (events or {}).get(tl.rank, tl.events) for tl in timelines}
    state = {tl.rank: [0, tl.start] for tl in timelines}  # next event, clock
    out = Replay({r: [] for r in events}, {r: {} for r in events}, {}, {})
    pending = {key: len(join.members) for key, join in joins.items()}
    force = False  # after a round in which no rank moved: release the waits with the members arrived
    while any(state[r][0] < len(events[r]) for r in events):
        progressed = False
        for rank, evs in events.items():
            progressed |= _advance(rank, evs, state[rank], out, joins, pending, force)
        force = not progressed
    return out


def _advance(rank, evs, st, out: Replay, joins, pending, force: bool) -> bool:
    """Run one rank's events until it waits on an unreleased join; whether it moved."""
    moved = False
    times, resumed = out.times[rank], out.resumed[rank]
    while st[0] < len(evs):
        kind, *rest = evs[st[0]]
        if kind == "wait":
            key = rest[0]
            if key not in out.release:
                if not force:
                    return moved
                out.release[key] = max(out.arrivals.get(key, {rank: st[1]}).values())
            done = out.release[key] + joins[key].transfer.get(rank, 0)
            times.append(st[1])
            if done > st[1]:
                resumed[st[0]] = done
                st[1] = done
        else:
            times.append(st[1])
            if kind == "work":
                st[1] += rest[0]
            elif kind == "issue":
                _arrive(rest[0], rank, st[1], out, pending)
            elif kind == "step":
                out.step_starts[rest[0]] = min(out.step_starts.get(rest[0], st[1]), st[1])
            elif kind == "end":
                out.step_ends[rest[0]] = max(out.step_ends.get(rest[0], st[1]), st[1])
        st[0] += 1
        moved = True
    return moved


def _arrive(key, rank, t, out: Replay, pending) -> None:
    out.arrivals.setdefault(key, {})[rank] = t
    pending[key] -= 1
    if pending[key] == 0:
        out.release[key] = max(out.arrivals[key].values())


def step_times(rp: Replay) -> list[int]:
    """Each step's time: from the previous step's end (the first: its earliest start) to its end."""
    steps = sorted(rp.step_ends)
    ends = [rp.step_ends[s] for s in steps]
    begins = [rp.step_starts.get(steps[0], ends[0])] + ends[:-1]
    return [max(0, e - b) for b, e in zip(begins, ends)]


def marks_index(timelines: list[RankTimeline]) -> dict:
    """rank -> {event: index} of its issue and end events (where the walk lands)."""
    return {tl.rank: {e: i for i, e in enumerate(tl.events) if e[0] in ("issue", "end")} for tl in timelines}


def walk(timelines: list[RankTimeline], rp: Replay, marks: dict, step: int) -> dict:
    """The critical path of one step on the replay (module docstring): length, parts (rank, kind)
    -> ns, the joins it crossed with their closers, and its segments in time for drawing. `marks`:
    marks_index(timelines)."""
    by_rank = {tl.rank: tl for tl in timelines}
    ends = {r: marks[r][("end", step)] for r in by_rank if ("end", step) in marks[r]}
    rank = max(ends, key=lambda r: (rp.times[r][ends[r]], -r))
    index, end_time = ends[rank], rp.times[rank][ends[rank]]
    parts: dict = {}
    crossed, segments = [], []
    t = end_time
    while index > 0:
        index -= 1
        kind, *rest = by_rank[rank].events[index]
        if kind == "step" or kind == "end":  # the step's start on this rank
            break
        if kind == "work":
            for label, ns in rest[1].items():
                parts[(rank, label)] = parts.get((rank, label), 0) + ns
            segments.append((rank, _dominant(rest[1]), t - rest[0], t))
            t -= rest[0]
        elif kind == "wait" and index in rp.resumed[rank]:
            key = rest[0]
            release = rp.release[key]
            parts[(rank, COMMUNICATION)] = parts.get((rank, COMMUNICATION), 0) + (t - release)
            segments.append((rank, COMMUNICATION, release, t))
            closer = max(rp.arrivals[key], key=lambda r: (rp.arrivals[key][r], -r))
            crossed.append({"join": _join_name(key), "closer": closer, "from_rank": rank})
            rank, t = closer, release
            index = marks[rank][("issue", key)]
    return {"length_ns": end_time - t, "parts": parts, "joins": crossed[::-1], "segments": segments[::-1],
            "ends_on": rank}


def _dominant(parts: dict) -> str:
    return max(parts, key=parts.get) if parts else "host"


def _join_name(key: tuple) -> str:
    if key[0] == "collective":
        return f"collective pg {key[1] or '-'} #{key[2]}"
    return f"p2p {key[1]}<->{key[2]} tag {key[3]} {key[4]} #{key[5]}"


def waits_by_rank(joins: dict) -> dict:
    """rank -> own transfer ns, wait ns, and {closer: ns waited for it} over the recorded joins."""
    out: dict = {}
    for join in joins.values():
        last = join.arrivals[join.closer]
        for r in join.members:
            row = out.setdefault(r, {"transfer_ns": 0, "wait_ns": 0, "waited_for": {}})
            row["transfer_ns"] += join.transfer[r]
            wait = last - join.arrivals[r]
            if wait > 0:
                row["wait_ns"] += wait
                row["waited_for"][join.closer] = row["waited_for"].get(join.closer, 0) + wait
    return out
