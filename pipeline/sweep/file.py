"""Sweep files: named systems and grids of ASTRA-sim parameters, expanded into the points a
sweep simulates every job on (docs/sweeps.md has the format with examples).

    system: ring_system.json       # base system JSON for the keys not in the grid (default: the reference system)
    network: Ring_8npus.yml        # base network YAML for the network keys not in the grid (optional)
    grid:                          # every combination is one point; a list of such mappings is their union
      topology: [[Ring], [Switch], [Ring, Switch]]   # a value per dimension, or one value for every dimension
      npus_count: [8, 64, 512]
      bandwidth: [50, 200, 800]
      all-reduce-implementation: [ring, direct]
      mode: [unaware, aware]
    where: ["total_npus <= 4096", "total_npus >= traced_npus"]
    cost: {bandwidth: 0.01}
    systems: [{name, network, system}]      # named systems, as in default.yaml

Every problem is a ChakraError: one line naming the file and the key.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from chakra_core.errors import ChakraError
from chakra_core.sim import reference
from chakra_core.sim.backends import DEFAULT_MODE
from chakra_core.sim.config import ASTRA_SIM_SYSTEM_KEYS, network_from_document, read_document, system_from_document
from chakra_core.sim.placement import PLACEMENTS, computed
from pipeline.sweep_point import (
    COLOCATION_KEYS,
    DEFAULT_COPIES,
    NETWORK_KEYS,
    OPTIONS,
    PER_DIMENSION_SYSTEM_KEYS,
    SweepPoint,
    column_name,
    condition_values,
    network_values,
    parameter_columns,
    split_column,
)
from pipeline.sweep.where import Condition, parse_where

DEFAULT_MAX_POINTS = 10_000
NATIVE_RING = "native-ring"  # a named system's network: a Ring with exactly the job's rank count
REFERENCE = "reference"  # a named system's (or the grid's) system: chakra_core/sim/reference.py's
GRID_KEYS = (*NETWORK_KEYS, *ASTRA_SIM_SYSTEM_KEYS, *OPTIONS, *COLOCATION_KEYS)
# the network keys a grid need not give: the reference network's (npus_count has no default)
NETWORK_DEFAULTS = {"topology": "Ring", "bandwidth": reference.BANDWIDTH_GBPS, "latency": reference.LATENCY_NS}
# a grid this many times the limit is refused before expanding it: `where` could not prune it in time
EXPANSION_FACTOR = 10


class SweepError(ChakraError):
    """A sweep that cannot run: one line naming the file (or option) and the key."""


class _FileModel(BaseModel):
    """Frozen, no unknown keys, no conversions (a bandwidth of "50" or a mode of 1 is an error)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)


class _NamedSystem(_FileModel):
    model_config = ConfigDict(coerce_numbers_to_str=True)

    name: str = Field(strict=False, description="the row's `system`; a number is taken as its text")
    network: str = Field(description=f"a network file, or {NATIVE_RING}: a Ring of the job's own ranks")
    system: str = Field(description=f"a system file, or {REFERENCE}: chakra_core/sim/reference.py's")
    mode: Literal[OPTIONS["mode"]] = "unaware"
    scaling: Literal[OPTIONS["scaling"]] = "weak"


class _Cost(_FileModel):
    npus: float | None = Field(None, ge=0, description="price of an NPU")
    bandwidth: float | None = Field(None, ge=0, description="price of a GB/s of one NPU's link, per dimension")


class _SweepFile(_FileModel):
    """The sweep file's keys (the module's docstring); a grid's shape is checked by _check_grid
    and its values by the simulator's own models, when its points are made."""

    systems: list[_NamedSystem] | None = None
    grid: Any = None
    system: str = REFERENCE
    network: str | None = None
    where: Any = None  # sweep_where.parse_where's
    cost: _Cost | None = None

    @model_validator(mode="after")
    def _something_to_simulate(self) -> _SweepFile:
        if self.systems is None and self.grid is None:
            raise ValueError("expected `systems: [{name, network, system}, ...]` or `grid: {key: [values]}`")
        return self


def _validated(path: str, document) -> _SweepFile:
    """The file's model; SweepError: every problem on one line, each named by its key's path."""
    try:
        return _SweepFile.model_validate(document)
    except ValidationError as err:
        problems = []
        for e in err.errors(include_url=False):
            key = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in e["loc"]).lstrip(".")
            if e["type"] == "extra_forbidden":
                message = "unknown key" + ("" if len(e["loc"]) > 1 else
                                           f"; a sweep file has {', '.join(_SweepFile.model_fields)}")
            elif e["type"] == "missing":
                message = "missing"
            else:
                message = e["msg"].removeprefix("Value error, ")
                if "input" in e and not isinstance(e["input"], (dict, list)) and e["type"] != "value_error":
                    message += f", got {e['input']!r}"
            problems.append(f"{key}: {message}" if key else message)
        raise SweepError(f"{path}: " + "; ".join(problems)) from None


@dataclass(frozen=True)
class _Draft:
    """A system as the sweep file spells it (network and system documents under ASTRA-sim's keys),
    before the simulator's loaders make its objects: grids are expanded and pruned in this form, so
    that a combination `where` removes is never built (nor refused for a value over a limit)."""

    name: str
    network: dict | None  # None: a native ring
    system: dict
    mode: str = DEFAULT_MODE
    scaling: str = "weak"
    swept: tuple[str, ...] = ()
    placement: str | None = None
    copies: int = 1

    @property
    def key(self) -> str:
        colocated = [self.placement, self.copies] if self.placement else []  # (a point alone keeps its old key)
        text = json.dumps([self.network, self.system, self.mode, self.scaling, *colocated], sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()

    def where_values(self) -> dict:
        params = parameter_columns({**(self.network or {}), **self.system}, self.swept)
        npus = math.prod(self.network["npus_count"]) if self.network else None
        return condition_values(params, npus, len(self.network["topology"]) if self.network else 1, self.mode,
                                self.scaling)


@dataclass(frozen=True)
class Sweep:
    points: list[SweepPoint]
    where: list[Condition]  # the conditions on traced_npus, checked per job (the others pruned the grid)
    columns: list[str]  # the parameter columns, in grid order
    cost: dict[str, float]

    def points_for(self, traced_npus: int) -> list[SweepPoint]:
        """The points a job of `traced_npus` ranks is simulated on."""
        if not self.where:
            return self.points
        return [p for p in self.points
                if all(c.holds({**p.where_values(), "traced_npus": traced_npus}) for c in self.where)]


def load_sweep_file(path: str, max_points: int = DEFAULT_MAX_POINTS) -> Sweep:
    """The sweep file's points, checked: unknown keys, dimension counts, values (by the simulator's
    own config loaders) and the point limit."""
    try:
        _, document = read_document(path)
    except ChakraError as exc:
        raise SweepError(str(exc)) from None
    spec = _validated(path, document)
    base = os.path.dirname(os.path.abspath(path)) if "://" not in path else path.rsplit("/", 1)[0]
    conditions = parse_where(path, spec.where, _is_name)
    points = _named_points(path, base, spec.systems or [])
    if spec.grid is not None:
        points += _grid_points(path, base, spec, [c for c in conditions if not c.uses("traced_npus")], max_points)
    unique: dict[str, _Draft] = {}
    for p in points:  # one of each configuration (grids may overlap), the first kept
        unique.setdefault(p.key, p)
    drafts = list(unique.values())
    if not drafts:
        raise SweepError(f"{path}: where: no point of the grid meets every condition; nothing would be simulated")
    if len(drafts) > max_points:
        raise SweepError(f"{path}: {len(drafts):,} points exceed the limit of {max_points:,} (--max-points raises it)")
    points = _configured(path, drafts)
    columns = _in_order(list(dict.fromkeys(c for p in points for c in p.params)))
    return Sweep(points, [c for c in conditions if c.uses("traced_npus")], columns,
                 spec.cost.model_dump(exclude_none=True) if spec.cost else {})


def _is_name(name: str) -> bool:
    """Whether `where` may name it: a parameter column, a derived figure or traced_npus."""
    if name in ("total_npus", "dims", "traced_npus", *OPTIONS):
        return True
    key, dimension = split_column(name)
    per_dimension = {column_name(k) for k in (*NETWORK_KEYS, *PER_DIMENSION_SYSTEM_KEYS)}
    scalar = {column_name(k) for k in ASTRA_SIM_SYSTEM_KEYS if k not in PER_DIMENSION_SYSTEM_KEYS}
    return (dimension is not None and key in per_dimension) or name in scalar


def _in_order(columns: list[str]) -> list[str]:
    """Per-dimension columns together: topology_0, topology_1, npus_count_0, ..."""
    keys = list(dict.fromkeys(split_column(c)[0] for c in columns))
    return sorted(columns, key=lambda c: (keys.index(split_column(c)[0]), split_column(c)[1] or 0))


def _read(path: str, base: str, name: str, what: str) -> dict:
    """A network or system document named in the sweep file (relative to it), or the reference system's."""
    if what == "system" and name == REFERENCE:
        return dict(reference.SYSTEM)
    url = name if "://" in name or os.path.isabs(name) else f"{base}/{name}"
    try:
        document = read_document(url)[1]
    except ChakraError as exc:
        raise SweepError(f"{path}: {what} {name}: {exc}") from None
    return document


def _base_network(path: str, base: str, name: str) -> dict:
    """A grid's base network under ASTRA-sim's keys (a file in the project's form read through its object)."""
    document = _read(path, base, name, "network")
    if "dims" not in document:
        return document  # ASTRA-sim's keys; it may give only some of them
    return network_values(_made(path, name, "network", document, network_from_document))


def _named_points(path: str, base: str, systems: list[_NamedSystem]) -> list[_Draft]:
    points = [_Draft(entry.name, None if entry.network == NATIVE_RING else _read(path, base, entry.network, "network"),
                     _read(path, base, entry.system, "system"), entry.mode, entry.scaling) for entry in systems]
    names = [p.name for p in points]
    twice = next((n for n in names if names.count(n) > 1), None)
    if twice:
        raise SweepError(f"{path}: systems: the name {twice!r} is used twice")
    return points


def _option(path: str, key: str, value) -> str:
    name = key.rsplit(".", 1)[-1]
    if value not in OPTIONS[name]:
        raise SweepError(f"{path}: {key}: {value!r} is not one of {', '.join(OPTIONS[name])}")
    return value


def _grid_points(path: str, base: str, spec: _SweepFile, conditions: list[Condition], max_points: int
                 ) -> list[_Draft]:
    grids = spec.grid if isinstance(spec.grid, list) else [spec.grid]
    system = _read(path, base, spec.system, "system")
    network = _base_network(path, base, spec.network) if spec.network is not None else {}
    for i, grid in enumerate(grids):
        _check_grid(path, f"grid[{i}]" if len(grids) > 1 else "grid", grid)
    swept = tuple(dict.fromkeys(k for grid in grids for k in grid
                                if k not in OPTIONS and k not in COLOCATION_KEYS))  # columns of every point
    points = []
    for i, grid in enumerate(grids):
        where = f"grid[{i}]" if len(grids) > 1 else "grid"
        combinations = math.prod(len(v) for v in grid.values())
        if combinations > EXPANSION_FACTOR * max_points:
            raise SweepError(f"{path}: {where}: {combinations:,} combinations; the limit is {max_points:,} "
                             "simulations (--max-points raises it)")
        for values in itertools.product(*grid.values()):
            p = _grid_point(path, where, dict(zip(grid, values)), network, system, swept)
            if all(c.holds(p.where_values()) for c in conditions):
                points.append(p)
    return points


def _check_grid(path: str, where: str, grid) -> None:
    if not isinstance(grid, dict) or not grid:
        raise SweepError(f"{path}: {where}: expected a mapping of keys to lists of values")
    for key, values in grid.items():
        if key not in GRID_KEYS:
            raise SweepError(f"{path}: {where}: {key}: unknown key (a typo?); grid keys: {', '.join(GRID_KEYS)}")
        if not isinstance(values, list) or not values:
            raise SweepError(f"{path}: {where}: {key}: expected a non-empty list of values, got {values!r}")
        per_dimension = key in NETWORK_KEYS or key in PER_DIMENSION_SYSTEM_KEYS
        for value in values:
            if key in OPTIONS:
                _option(path, f"{where}.{key}", value)
            if key in COLOCATION_KEYS:
                _colocation(path, f"{where}.{key}", key, value)
            items = value if isinstance(value, list) and per_dimension else [value]
            if not items or any(isinstance(v, (dict, list)) or v is None for v in items):
                raise SweepError(f"{path}: {where}: {key}: {value!r}: expected a value"
                                 + (" or a list of one per dimension" if per_dimension else ""))


def _grid_point(path: str, where: str, values: dict, base_network: dict, base_system: dict,
                swept: tuple[str, ...]) -> _Draft:
    """The system of one combination. A list is a value per dimension; a single value (or a
    base file's one-entry list) is every dimension's."""
    network_values = {k: values[k] if k in values else _every_dimension(base_network.get(k, NETWORK_DEFAULTS.get(k)))
                      for k in NETWORK_KEYS}
    if network_values["npus_count"] is None:
        raise SweepError(f"{path}: {where}: npus_count: missing; give it in the grid or a base `network:`")
    dims = _dimensions(path, where, network_values)
    network = {k: _spread(v, dims) for k, v in network_values.items()}
    system = {**base_system, **{k: v for k, v in values.items() if k in ASTRA_SIM_SYSTEM_KEYS}}
    for key in PER_DIMENSION_SYSTEM_KEYS:
        if key in system:
            system[key] = _spread(system[key] if key in values else _every_dimension(system[key]), dims)
    name = " ".join(f"{k}={','.join(map(str, v)) if isinstance(v, list) else v}" for k, v in values.items())
    options = {k: values[k] for k in OPTIONS if k in values}
    if "placement" in values or "copies" in values:
        options.update(placement=values.get("placement", "packed"), copies=values.get("copies", DEFAULT_COPIES))
    return _Draft(name, network, system, swept=swept, **options)


def _colocation(path: str, key: str, name: str, value) -> None:
    """A placement of the simulator's (but a file: a sweep places copies of one job) or a copy count."""
    if name == "copies":
        if type(value) is not int or value < 1:
            raise SweepError(f"{path}: {key}: {value!r}: expected a whole number of copies, 1 or more")
        return
    if not isinstance(value, str) or not computed(value):
        raise SweepError(f"{path}: {key}: {value!r}: expected {', '.join(PLACEMENTS[:4])}")


def _every_dimension(value):
    return value[0] if isinstance(value, list) and len(value) == 1 else value


def _dimensions(path: str, where: str, network_values: dict) -> int:
    """The dimension count of a combination: its topology's, else that of its other lists, which must agree."""
    lists = {k: v for k, v in network_values.items() if isinstance(v, list)}
    if not lists:
        return 1
    shape = "topology" if "topology" in lists else next(iter(lists))
    dims = len(lists[shape])
    for key, value in lists.items():
        if len(value) != dims:
            raise SweepError(f"{path}: {where}: {key}: {value} has {len(value)} dimension(s) but {shape} "
                             f"{lists[shape]} has {dims}; values of different dimension counts need grids of "
                             "their own (grid: [{...}, {...}])")
    return dims


def _spread(value, dims: int) -> list:
    return list(value) if isinstance(value, list) else [value] * dims


def _configured(path: str, drafts: list[_Draft]) -> list[SweepPoint]:
    """The systems with their network and system objects, each distinct configuration made once by
    the simulator's own validation (so that a bad value is found before any simulation, named by
    its key)."""
    made: dict[str, object] = {}

    def config(p: _Draft, what: str, document: dict, make):
        text = json.dumps([what, document], sort_keys=True)
        if text not in made:
            made[text] = _made(path, p.name, what, document, make)
        return made[text]

    return [SweepPoint(p.name, None if p.network is None else config(p, "network", p.network, network_from_document),
                            config(p, "system", p.system, system_from_document), p.mode, p.scaling, p.swept, p.key,
                            p.placement, p.copies)
            for p in drafts]


def _made(path: str, name: str, what: str, document: dict, make):
    try:
        return make(path, document)
    except ChakraError as exc:
        key = getattr(exc, "key", None)
        detail = f"{key}: {exc.message}" if key else getattr(exc, "message", str(exc))
        raise SweepError(f"{path}: {name}: {what} {detail}") from None
