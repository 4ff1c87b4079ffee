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

import re
from dataclasses import dataclass

import numpy as np

from chakra_core.convert.jax.hlo import HloModule, Instruction, split_top
from chakra_core.errors import SourceFormatError

KINDS = {"all-reduce": "ALL_REDUCE", "all-gather": "ALL_GATHER", "reduce-scatter": "REDUCE_SCATTER",
         "all-to-all": "ALL_TO_ALL", "collective-broadcast": "BROADCAST", "collective-permute": "PERMUTE"}
PERMUTE = "PERMUTE"
_IOTA = re.compile(r"^\[([\d,\s]+)\]\s*<=\s*\[([\d,\s]+)\](?:\s*T\(([\d,\s]+)\))?$")
_MESH = re.compile(r"^mesh\[(?P<axes>[^\]]*)\]\s*\{(?P<groups>[^}]*)\}$")
_MESH_AXIS = re.compile(r"^'([^']+)'\s*=\s*(\d+)$")


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


def base_opcode(opcode: str) -> tuple[str, str]:
    """('all-reduce', '-start') for 'all-reduce-start'; ('fusion', '') for 'fusion'."""
    for suffix in ("-start", "-done", "-update"):
        if opcode.endswith(suffix):
            return opcode[:-len(suffix)], suffix
    return opcode, ""


def _ints(text: str) -> list[int]:
    try:
        return [int(x) for x in text.replace(" ", "").split(",") if x]
    except ValueError:
        raise CollectiveError(f"expected integers, got {text[:60]!r}") from None


def replica_groups(text: str | None, devices: int) -> tuple[tuple[int, ...], ...]:
    """The device groups of a `replica_groups` value (every form above); None or `{}`: one
    group of all devices."""
    value = (text or "").strip()
    if value in ("", "{}"):
        return (tuple(range(devices)),)
    if value.startswith("{"):
        groups = tuple(tuple(_ints(g.strip().strip("{}"))) for g in split_top(value[1:-1]))
    elif (iota := _IOTA.match(value)) is not None:
        groups = _iota_groups(_ints(iota.group(1)), _ints(iota.group(2)), _ints(iota.group(3) or ""))
    elif (mesh := _MESH.match(value)) is not None:
        groups = _mesh_groups(mesh.group("axes"), mesh.group("groups"))
    else:
        raise CollectiveError(f"replica_groups {value[:80]!r} is in none of the explicit, iota or mesh forms")
    outside = sorted({d for g in groups for d in g if not 0 <= d < devices})
    if outside:
        raise CollectiveError(f"replica_groups {value[:80]!r} names device(s) {outside[:4]} outside 0..{devices - 1}")
    return groups


def _iota_groups(shape: list[int], dims: list[int], perm: list[int]) -> tuple[tuple[int, ...], ...]:
    if len(shape) != 2:
        raise CollectiveError(f"iota replica_groups shape {shape} is not [groups,size]")
    total = int(np.prod(dims))
    if total != shape[0] * shape[1] or (perm and sorted(perm) != list(range(len(dims)))):
        raise CollectiveError(f"iota replica_groups [{shape}]<=[{dims}] T({perm}) do not fit together")
    ids = np.arange(total).reshape(dims)
    if perm:
        ids = ids.transpose(perm)
    return tuple(tuple(int(d) for d in row) for row in ids.reshape(shape))


def _mesh_groups(axes_text: str, chosen_text: str) -> tuple[tuple[int, ...], ...]:
    names, sizes = [], []
    for piece in split_top(axes_text):
        match = _MESH_AXIS.match(piece.strip())
        if match is None:
            raise CollectiveError(f"mesh axis {piece[:40]!r} is not 'name'=size")
        names.append(match.group(1))
        sizes.append(int(match.group(2)))
    chosen = [p.strip().strip("'") for p in split_top(chosen_text)]
    unknown = [c for c in chosen if c not in names]
    if unknown:
        raise CollectiveError(f"mesh replica_groups name axis {unknown[0]!r}, not one of {names}")
    picked = [names.index(c) for c in chosen]
    others = [i for i in range(len(names)) if i not in picked]
    ids = np.arange(int(np.prod(sizes))).reshape(sizes).transpose(others + picked)
    return tuple(tuple(int(d) for d in row) for row in ids.reshape(-1, int(np.prod([sizes[i] for i in picked]))))


def source_target_pairs(text: str | None) -> tuple[tuple[int, int], ...]:
    if not text:
        return ()
    pairs = []
    for piece in split_top(text.strip()[1:-1]):
        values = _ints(piece.strip().strip("{}"))
        if len(values) != 2:
            raise CollectiveError(f"source_target_pairs entry {piece[:40]!r} is not {{source,target}}")
        pairs.append((values[0], values[1]))
    return tuple(pairs)


def describe(module: HloModule, instruction: Instruction, devices: int) -> Collective | None:
    """The collective an instruction starts (a synchronous one, or the start of a pair), else
    None; an attribute that cannot be read is an error naming the file and line."""
    try:
        return _describe(module, instruction, devices)
    except CollectiveError as exc:
        raise SourceFormatError(module.path, f"instruction {instruction.name}: {exc}", line=instruction.line) \
            from None


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
    channel = carrier.attrs.get("channel_id")
    kind = KINDS[opcode]
    pairs = source_target_pairs(carrier.attrs.get("source_target_pairs")) if kind == PERMUTE else ()
    outside = [p for p in pairs if not all(0 <= d < devices for d in p)]
    if outside:
        raise CollectiveError(f"source_target_pairs {outside[0]} name a device outside 0..{devices - 1}")
    groups = () if kind == PERMUTE else replica_groups(carrier.attrs.get("replica_groups"), devices)
    return Collective(kind, size, groups, pairs, int(channel) if channel and channel.isdigit() else None,
                      bool(suffix))


def done_of(instruction: Instruction) -> bool:
    """Whether the instruction ends an asynchronous pair (its operand is the start)."""
    return instruction.opcode == "async-done" or base_opcode(instruction.opcode)[1] == "-done"
