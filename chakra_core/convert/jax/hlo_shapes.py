"""HLO shapes as XLA prints them: `f32[64,1024]{1,0}`, `pred[]`, `(f32[2], s32[])`, dynamic
dimensions `f32[<=8]`, tiled layouts `{1,0:T(8,128)}`. Only the bytes matter here: a tuple's
bytes are its elements' summed (what a collective over a tuple moves)."""

from __future__ import annotations

import re

# bits per element of each XLA primitive type (sub-byte types are packed)
ELEMENT_BITS: dict[str, int] = {
    "pred": 8, "s2": 2, "u2": 2, "s4": 4, "u4": 4, "s8": 8, "u8": 8, "s16": 16, "u16": 16, "s32": 32, "u32": 32,
    "s64": 64, "u64": 64, "f16": 16, "bf16": 16, "f32": 32, "f64": 64, "c64": 64, "c128": 128,
    "f4e2m1fn": 4, "f8e3m4": 8, "f8e4m3": 8, "f8e4m3fn": 8, "f8e4m3b11fnuz": 8, "f8e4m3fnuz": 8, "f8e5m2": 8,
    "f8e5m2fnuz": 8, "f8e8m0fnu": 8, "token": 0,
}
_ARRAY = re.compile(r"([a-z][a-z0-9]*)\[([^\]]*)\]")


class ShapeError(ValueError):
    """A shape this parser does not understand (the caller names the file and line)."""


def arrays(shape: str) -> list[tuple[str, tuple[int, ...]]]:
    """(element type, dimensions) of every array in the shape, a tuple's flattened in order."""
    found = []
    for match in _ARRAY.finditer(_without_layouts(shape)):
        element, dims = match.group(1), match.group(2).strip()
        if element not in ELEMENT_BITS:
            raise ShapeError(f"unknown element type {element!r} in shape {shape[:80]!r}")
        try:
            sizes = tuple(int(d.strip().removeprefix("<=")) for d in dims.split(",")) if dims else ()
        except ValueError:
            raise ShapeError(f"bad dimensions [{dims[:40]}] in shape {shape[:80]!r}") from None
        found.append((element, sizes))
    if not found and shape.strip() not in ("()", ""):
        raise ShapeError(f"no array in shape {shape[:80]!r}")
    return found


def _without_layouts(shape: str) -> str:
    """The shape with its `{...}` layouts removed (their tiles look like dimensions)."""
    out, depth = [], 0
    for ch in shape:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth = max(0, depth - 1)
        elif not depth:
            out.append(ch)
    return "".join(out)


def array_bytes(element: str, dims: tuple[int, ...]) -> int:
    count = 1
    for d in dims:
        count *= d
    return (count * ELEMENT_BITS[element] + 7) // 8


def shape_bytes(shape: str) -> int:
    """Bytes of the shape (a tuple's elements summed)."""
    return sum(array_bytes(e, d) for e, d in arrays(shape))
