"""HLO collectives: which instructions are collectives, of what kind, how many bytes each device
passes in, over which groups of devices, and collective-permute's source-target pairs.

`replica_groups` comes in three printed forms, all meaning a list of device groups:
explicit `{{0,1},{2,3}}` (`{}`: every device in one group); iota `[G,S]<=[N]`, the devices
0..N-1 reshaped into G groups of S, optionally `[G,S]<=[d0,d1,...]T(p0,p1,...)`: 0..N-1
reshaped to the dims, transposed by the permutation, then cut into G groups; and mesh axes
`mesh['a'=2,'b'=2] {'b'}`: the devices laid out row-major on the named mesh, one group per
position along the other axes, running along the listed ones. Ids are taken as device ordinals
(SPMD partitions on one replica, as `jax.jit` compiles; docs/jax.md, limits).

Asynchronous collectives are a `-start`/`-done` pair (`all-reduce-start`, ...), or an
`async-start` whose called computation holds the collective; the pair is one collective,
placed at its start, and what uses the `-done` waits for it.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from chakra_core.convert.jax.hlo import HloModule, Instruction, split_top
from chakra_core.convert.jax.hlo_shapes import MAX_BYTES
from chakra_core.errors import SourceFormatError

KINDS = {"all-reduce": "ALL_REDUCE", "all-gather": "ALL_GATHER", "reduce-scatter": "REDUCE_SCATTER",
         "all-to-all": "ALL_TO_ALL", "collective-broadcast": "BROADCAST", "collective-permute": "PERMUTE"}
PERMUTE = "PERMUTE"
_IOTA = re.compile(r"^\[([\d,\s]+)\]\s*<=\s*\[([\d,\s]+)\](?:\s*T\(([\d,\s]+)\))?$")
_MESH = re.compile(r"^mesh\[(?P<axes>[^\]]*)\]\s*\{(?P<groups>[^}]*)\}$")
_MESH_AXIS = re.compile(r"^'([^']+)'\s*=\s*(\d+)$")
_NUMBER = re.compile(r"[0-9]{1,18}")
MAX_AXES = 32  # dimensions of an iota's reshape or a mesh (numpy takes at most 64; XLA's have a few)


class CollectiveError(ValueError):
    """A collective attribute this parser cannot read (the caller names file and line)."""


@dataclass(frozen=True)
class Collective:
    kind: str  # a CollectiveCommType name, or PERMUTE
    bytes: int  # what each device passes in: its operands' bytes, a tuple's summed
    groups: tuple[tuple[int, ...], ...]  # device groups (empty for PERMUTE)
    pairs: tuple[tuple[int, int], ...]  # (source, target) of a PERMUTE
    channel_id: int | None
    is_async: bool
    # each device's place, so that a device finds its own without a scan (a group may hold them all)
    member_of: dict[int, int] = field(default_factory=dict, compare=False)  # device -> index of its group
    pairs_of: dict[int, tuple[tuple[int, int], ...]] = field(default_factory=dict, compare=False)  # its pairs, in order


def base_opcode(opcode: str) -> tuple[str, str]:
    """('all-reduce', '-start') for 'all-reduce-start'; ('fusion', '') for 'fusion'."""
    for suffix in ("-start", "-done", "-update"):
        if opcode.endswith(suffix):
            return opcode[:-len(suffix)], suffix
    return opcode, ""


def _ints(text: str) -> list[int]:
    """Whole numbers from 0, of at most 18 digits each (ids, sizes, axes)."""
    items = text.replace(" ", "").split(",")
    if not all(_NUMBER.fullmatch(x) for x in items if x):
        raise CollectiveError(f"expected whole numbers of at most 18 digits, got {text[:60]!r}")
    return [int(x) for x in items if x]


def replica_groups(text: str | None, devices: int) -> tuple[tuple[int, ...], ...]:
    """The device groups of a `replica_groups` value (every form above); None or `{}`: one
    group of all devices. Sizes are checked against the devices before a group is built, and
    every group must be non-empty and name each device at most once."""
    value = (text or "").strip()
    if value in ("", "{}"):
        return (tuple(range(devices)),)
    try:
        groups = _groups(value, devices)
        _check_groups(groups, devices)
    except CollectiveError as exc:
        raise CollectiveError(f"replica_groups {value[:80]!r}: {exc}") from None
    return groups


def _groups(value: str, devices: int) -> tuple[tuple[int, ...], ...]:
    if value.startswith("{") and value.endswith("}"):
        _check_count(sum(1 for _ in re.finditer(r"[0-9]+", value)), devices)  # counted, not built
        return tuple(tuple(_ints(g.strip().strip("{}"))) for g in split_top(value[1:-1]))
    if (iota := _IOTA.match(value)) is not None:
        return _iota_groups(_ints(iota.group(1)), _ints(iota.group(2)), _ints(iota.group(3) or ""), devices)
    if (mesh := _MESH.match(value)) is not None:
        return _mesh_groups(mesh.group("axes"), mesh.group("groups"), devices)
    raise CollectiveError("in none of the explicit, iota or mesh forms")


def _check_count(count: int, devices: int) -> None:
    """Groups may name each device once: more names than devices are refused before they are built."""
    if count > devices:
        raise CollectiveError(f"{count:,} devices named, but the run has {devices:,} (each may be named once)")


def _check_groups(groups: tuple[tuple[int, ...], ...], devices: int) -> None:
    if not groups or not all(groups):
        raise CollectiveError("an empty group (no device to communicate with)")
    outside = sorted({d for g in groups for d in g if not 0 <= d < devices})
    if outside:
        raise CollectiveError(f"device(s) {outside[:4]} outside 0..{devices - 1}")
    seen: set[int] = set()
    for device in (d for g in groups for d in g):
        if device in seen:
            raise CollectiveError(f"device {device} named twice")
        seen.add(device)


def _iota_groups(shape: list[int], dims: list[int], perm: list[int], devices: int) -> tuple[tuple[int, ...], ...]:
    if len(shape) != 2 or 0 in shape:
        raise CollectiveError(f"iota shape {shape} is not [groups,size] of at least 1 each")
    if len(dims) > MAX_AXES:
        raise CollectiveError(f"an iota reshaped to {len(dims)} dimensions (at most {MAX_AXES})")
    total = math.prod(dims)
    if total != shape[0] * shape[1] or (perm and sorted(perm) != list(range(len(dims)))):
        raise CollectiveError(f"iota {shape}<={dims[:8]} T({perm[:8]}) do not fit together")
    _check_count(total, devices)
    ids = np.arange(total).reshape(dims)
    if perm:
        ids = ids.transpose(perm)
    return tuple(tuple(int(d) for d in row) for row in ids.reshape(shape))


def _mesh_axes(axes_text: str) -> tuple[list[str], list[int]]:
    names, sizes = [], []
    for piece in split_top(axes_text):
        match = _MESH_AXIS.match(piece.strip())
        if match is None or not _NUMBER.fullmatch(match.group(2)) or int(match.group(2)) < 1:
            raise CollectiveError(f"mesh axis {piece[:40]!r} is not 'name'=size (a size from 1)")
        if match.group(1) in names:
            raise CollectiveError(f"mesh axis {match.group(1)[:40]!r} is named twice")
        names.append(match.group(1))
        sizes.append(int(match.group(2)))
    if len(names) > MAX_AXES:
        raise CollectiveError(f"a mesh of {len(names)} axes (at most {MAX_AXES})")
    return names, sizes


def _mesh_groups(axes_text: str, chosen_text: str, devices: int) -> tuple[tuple[int, ...], ...]:
    names, sizes = _mesh_axes(axes_text)
    chosen = [p.strip().strip("'") for p in split_top(chosen_text)]
    unknown = [c for c in chosen if c not in names]
    if unknown or len(set(chosen)) < len(chosen):
        raise CollectiveError(f"axis {(unknown or chosen)[0][:40]!r} is not one of the mesh's {names[:8]} (or is"
                              " named twice)")
    _check_count(math.prod(sizes), devices)
    picked = [names.index(c) for c in chosen]
    others = [i for i in range(len(names)) if i not in picked]
    ids = np.arange(math.prod(sizes)).reshape(sizes).transpose(others + picked)
    return tuple(tuple(int(d) for d in row) for row in ids.reshape(-1, math.prod(sizes[i] for i in picked)))


def source_target_pairs(text: str | None, devices: int) -> tuple[tuple[int, int], ...]:
    """(source, target) pairs, each device a source at most once and a target at most once (so
    no more pairs than devices: counted before they are built)."""
    if not text:
        return ()
    if text.count("{") - 1 > devices:
        raise CollectiveError(f"source_target_pairs {text[:60]!r} hold more pairs than the run's {devices:,} devices")
    pairs = []
    for piece in split_top(text.strip()[1:-1]):
        values = _ints(piece.strip().strip("{}"))
        if len(values) != 2:
            raise CollectiveError(f"source_target_pairs entry {piece[:40]!r} is not {{source,target}}")
        pairs.append((values[0], values[1]))
    outside = [p for p in pairs if not all(0 <= d < devices for d in p)]
    if outside:
        raise CollectiveError(f"source_target_pairs {outside[0]} name a device outside 0..{devices - 1}")
    for end, what in ((0, "source"), (1, "target")):
        twice = [d for d, n in Counter(p[end] for p in pairs).items() if n > 1]
        if twice:
            raise CollectiveError(f"source_target_pairs name device {twice[0]} as a {what} twice")
    return tuple(pairs)


def describe(module: HloModule, instruction: Instruction, devices: int) -> Collective | None:
    """The collective an instruction starts (a synchronous one, or the start of a pair), else
    None; an attribute that cannot be read is an error naming the file and line. Worked out once
    per instruction: every device asks, at every step."""
    key = (instruction.name, devices)
    if key not in module.described:
        try:
            module.described[key] = _describe(module, instruction, devices)
        except CollectiveError as exc:
            raise SourceFormatError(module.path, f"instruction {instruction.name}: {exc}", line=instruction.line) \
                from None
    return module.described[key]


def _describe(module: HloModule, instruction: Instruction, devices: int) -> Collective | None:
    opcode, suffix = base_opcode(instruction.opcode)
    carrier = instruction
    if instruction.opcode == "async-start":
        carrier = next((i for c in instruction.called if c in module.computations
                        for i in module.computations[c].instructions if base_opcode(i.opcode)[0] in KINDS), None)
        if carrier is None:
            return None
        opcode, suffix = base_opcode(carrier.opcode)[0], "-start"
    if opcode not in KINDS or suffix not in ("", "-start"):
        return None
    computation = next(c for c in module.computations.values() if c.by_name.get(instruction.name) is instruction)
    size = sum(computation.by_name[o].bytes for o in instruction.operands)
    if size > MAX_BYTES:
        raise CollectiveError(f"its operands hold {size:.3g} bytes, beyond 2**63")
    channel = carrier.attrs.get("channel_id")
    kind = KINDS[opcode]
    pairs = source_target_pairs(carrier.attrs.get("source_target_pairs"), devices) if kind == PERMUTE else ()
    groups = () if kind == PERMUTE else replica_groups(carrier.attrs.get("replica_groups"), devices)
    pairs_of: dict[int, list[tuple[int, int]]] = {}
    for pair in pairs:
        for device in dict.fromkeys(pair):
            pairs_of.setdefault(device, []).append(pair)
    return Collective(kind, size, groups, pairs, int(channel) if channel and _NUMBER.fullmatch(channel) else None,
                      bool(suffix), {d: i for i, g in enumerate(groups) for d in g},
                      {d: tuple(p) for d, p in pairs_of.items()})


def done_of(instruction: Instruction) -> bool:
    """Whether the instruction ends an asynchronous pair (its operand is the start)."""
    return instruction.opcode == "async-done" or base_opcode(instruction.opcode)[1] == "-done"
