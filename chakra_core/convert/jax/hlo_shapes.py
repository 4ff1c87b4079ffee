"""HLO shapes as XLA prints them: `f32[64,1024]{1,0}`, `pred[]`, `(f32[2], s32[])`, dynamic
dimensions `f32[<=8]`, tiled layouts `{1,0:T(8,128)}`. Only the bytes matter here: a tuple's
bytes are its elements' summed (what a collective over a tuple moves). Parsing is linear in the
shape's length; a negative dimension, or bytes beyond int64, are a ShapeError."""

from __future__ import annotations

import re

# bits per element of each XLA primitive type (sub-byte types are packed)
ELEMENT_BITS: dict[str, int] = {
    "pred": 8, "s2": 2, "u2": 2, "s4": 4, "u4": 4, "s8": 8, "u8": 8, "s16": 16, "u16": 16, "s32": 32, "u32": 32,
    "s64": 64, "u64": 64, "f16": 16, "bf16": 16, "f32": 32, "f64": 64, "c64": 64, "c128": 128,
    "f4e2m1fn": 4, "f8e3m4": 8, "f8e4m3": 8, "f8e4m3fn": 8, "f8e4m3b11fnuz": 8, "f8e4m3fnuz": 8, "f8e5m2": 8,
    "f8e5m2fnuz": 8, "f8e8m0fnu": 8, "token": 0,
}
# an array starts at a word (so a run of letters is scanned once, not from each of its letters);
# dimensions hold no bracket (so each stretch between brackets is scanned once): linear in the shape
_ARRAY = re.compile(r"(?<![a-z0-9])([a-z][a-z0-9]*+)\[([^\[\]]*+)\]")
_DIMENSION = re.compile(r"(?:<=)?\s*([0-9]{1,18})")  # static, or the bound of a dynamic one (`<=8`)
MAX_BYTES = 2**63 - 1  # sizes become int64 (comm_size)


class ShapeError(ValueError):
    """A shape this parser does not understand (the caller names the file and line)."""


def arrays(shape: str) -> list[tuple[str, tuple[int, ...]]]:
    """(element type, dimensions) of every array in the shape, a tuple's flattened in order."""
    found = []
    for match in _ARRAY.finditer(_without_layouts(shape)):
        element, dims = match.group(1), match.group(2).strip()
        if element not in ELEMENT_BITS:
            raise ShapeError(f"unknown element type {element[:20]!r} in shape {shape[:80]!r}")
        found.append((element, tuple(_dimension(d, shape) for d in dims.split(",")) if dims else ()))
    if not found and shape.strip() not in ("()", ""):
        raise ShapeError(f"no array in shape {shape[:80]!r}")
    return found


def _dimension(text: str, shape: str) -> int:
    match = _DIMENSION.fullmatch(text.strip())
    if match is None:
        what = "is negative" if text.strip().startswith("-") else "is not a size"
        raise ShapeError(f"dimension {text.strip()[:20]!r} {what} in shape {shape[:80]!r}")
    return int(match.group(1))


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
    """Bytes of the array, or ShapeError once they pass MAX_BYTES (before the product grows)."""
    count = 1
    for d in dims:
        count *= d
        if count * max(ELEMENT_BITS[element], 1) > 8 * MAX_BYTES:  # token[] too: the product stays small
            raise ShapeError(f"{element}[{','.join(map(str, dims))[:60]}] holds over 2**63 bytes")
    return (count * ELEMENT_BITS[element] + 7) // 8


def shape_bytes(shape: str) -> int:
    """Bytes of the shape (a tuple's elements summed), at most MAX_BYTES."""
    total = 0
    for element, dims in arrays(shape):
        total += array_bytes(element, dims)
        if total > MAX_BYTES:
            raise ShapeError(f"shape {shape[:80]!r} holds over 2**63 bytes")
    return total
