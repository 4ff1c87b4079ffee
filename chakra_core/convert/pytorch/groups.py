"""Process groups: what `## process_group:init ##` says, and the communicator-group file.

The init node's first input is a JSON string: a list of {pg_name, pg_desc, backend_config,
ranks, group_size, group_count}; `ranks` is [] for a group of the whole world, and each rank
lists only the groups it belongs to. ASTRA-sim selects a node's group by its `pg_name`
attribute: "" or "0" is the default group (every NPU), any other value must be a decimal key
of the communicator-group JSON, `{"<pg_name>": [ranks...]}`, keys >= 1
(docs/format.md, 'Communicator groups'). PyTorch names its groups "0", "1", ... in creation order,
the world being "0", so those names are kept; a non-numeric name gets the next free number
and the mapping is recorded in the trace metadata.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import orjson

from chakra_core import limits
from chakra_core.convert.conventions import WORLD_GROUP as WORLD


@dataclass
class ProcessGroup:
    name: str  # as PyTorch named it
    desc: str
    ranks: list[int]  # global ranks, ascending
    backend: str = ""


@dataclass
class ProcessGroups:
    groups: dict[str, ProcessGroup] = field(default_factory=dict)
    world_size: int | None = None
    problems: list[str] = field(default_factory=list)

    def members(self, pg_name: str | None) -> list[int] | None:
        group = self.groups.get(pg_name) if pg_name is not None else None
        return group.ranks if group else None

    def of_rank(self, rank: int) -> list[ProcessGroup]:
        return [g for g in self.groups.values() if rank in g.ranks]

    def merge(self, other: "ProcessGroups") -> None:
        """Union of what several ranks list (each rank lists only its own groups)."""
        if other.world_size and not self.world_size:
            self.world_size = other.world_size
        for name, group in other.groups.items():
            mine = self.groups.get(name)
            if mine is None:
                self.groups[name] = group
            elif mine.ranks != group.ranks:
                self.problems.append(f"process group {name!r} has ranks {mine.ranks} on one rank and {group.ranks}"
                                     " on another")


def parse_pg_init(values: list, world_size_hint: int | None = None) -> ProcessGroups:
    """Groups from the init node's input values (the JSON string, or an already-parsed list)."""
    result = ProcessGroups()
    if not values:
        result.problems.append("## process_group:init ## has no inputs")
        return result
    payload = values[0]
    if isinstance(payload, str):
        try:  # orjson stops at 1024 levels: the scanner's depth limit cannot see inside a string
            payload = orjson.loads(payload)
        except orjson.JSONDecodeError as exc:
            result.problems.append(f"## process_group:init ## input is not JSON: {exc}")
            return result
    if not isinstance(payload, list):
        result.problems.append("## process_group:init ## input is not a list of groups")
        return result
    world = world_size_hint
    for entry in payload:
        if isinstance(entry, dict) and entry.get("pg_name") == WORLD and type(entry.get("group_size")) is int \
                and 0 < entry["group_size"] <= limits.value("npus"):
            world = entry["group_size"]
    result.world_size = world
    for entry in payload:
        if not isinstance(entry, dict) or "pg_name" not in entry:
            result.problems.append(f"## process_group:init ## entry without pg_name: {entry!r}")
            continue
        ranks = entry.get("ranks") or []
        if type(ranks) is not list or not all(type(r) is int for r in ranks):
            result.problems.append(f"## process_group:init ## group {entry['pg_name']!r}: ranks are not a list of"
                                   f" integers: {ranks!r:.80}")
            continue
        if not ranks:
            size = entry.get("group_size") if type(entry.get("group_size")) is int else world
            if size and not 0 < size <= limits.value("npus"):  # a group of every rank: a list that long
                result.problems.append(f"## process_group:init ## group {entry['pg_name']!r}: group_size {size:,}"
                                       f" is not between 1 and {limits.value('npus'):,} ({limits.LIMITS['npus'].env})")
                continue
            ranks = list(range(size)) if size else []
        result.groups[str(entry["pg_name"])] = ProcessGroup(str(entry["pg_name"]), str(entry.get("pg_desc", "")),
                                                            sorted(ranks),
                                                            str(entry.get("backend_config", "")))
    return result


def simulator_names(groups: ProcessGroups) -> dict[str, str]:
    """PyTorch pg_name -> the pg_name written on Chakra nodes (a decimal string; "0" = world)."""
    mapping: dict[str, str] = {}
    used = {name for name in groups.groups if name.isdigit()}
    next_id = 1
    for name in groups.groups:
        if name.isdigit():
            mapping[name] = name
        else:
            while str(next_id) in used:
                next_id += 1
            mapping[name] = str(next_id)
            used.add(str(next_id))
    return mapping


def comm_group_document(groups: ProcessGroups) -> dict[int, list[int]]:
    """The communicator groups for ASTRA-sim: every group but the world, by simulator name
    (written by chakra_core.format.job.write_comm_groups)."""
    names = simulator_names(groups)
    return {int(names[name]): group.ranks for name, group in
            sorted(groups.groups.items(), key=lambda kv: int(names[kv[0]])) if names[name] != WORLD}
