"""Scheduled HLO text (what `--xla_dump_hlo_as_text` and `compiled.as_text()` print), parsed
just enough for conversion: every computation's instructions in schedule order, each with its
name, shape, opcode, operands (by name) and attributes as text.

The grammar, as XLA prints it: a module header `HloModule NAME, key=value, ...`; computations
`[ENTRY ]%NAME (PARAMS) -> SHAPE {` ... `}`; one instruction a line,
`[ROOT ]%NAME = SHAPE OPCODE(OPERANDS), key=value, ...`. Operands are `%name` (older printers put
the operand's shape before it, newer ones `%name#i` for an element of a tuple); values nest `{}`, `[]`, `()` and quoted strings, so lines are
cut at top-level commas only. Other sections of a dump (FileNames, StackFrames, ...) are skipped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from chakra_core.convert.jax.hlo_shapes import ShapeError, shape_bytes
from chakra_core.errors import SourceFormatError

_MODULE = re.compile(r"^HloModule\s+([^\s,]+)")
_COMPUTATION = re.compile(r"^(ENTRY\s+)?%?([^\s(]+)\s*\(")  # the head; `-> SHAPE {` is checked by _computation
_INSTRUCTION = re.compile(r"^\s*(ROOT\s+)?%?([^\s=]+)\s*=\s*")
_OPCODE = re.compile(r"\s*([a-z][a-z0-9\-_]*)\(")
_OPEN = {"(": ")", "{": "}", "[": "]"}


@dataclass
class Instruction:
    name: str
    shape: str
    opcode: str
    operands: list[str]
    attrs: dict[str, str]
    line: int
    root: bool = False
    bytes: int = 0  # the shape's (a tuple's summed), at most int64

    @property
    def called(self) -> list[str]:
        """Computations it runs (a fusion's body, an async op's wrapped computation)."""
        names = []
        for key in ("calls", "to_apply", "body", "condition", "branch_computations"):
            names += [n.strip().lstrip("%") for n in self.attrs.get(key, "").strip("{}").split(",") if n.strip()]
        return names


@dataclass
class Computation:
    name: str
    instructions: list[Instruction] = field(default_factory=list)
    by_name: dict[str, Instruction] = field(default_factory=dict)
    position: dict[str, int] = field(default_factory=dict)  # schedule order


@dataclass
class HloModule:
    name: str
    path: str
    computations: dict[str, Computation]
    entry: str
    header: dict[str, str]
    described: dict = field(default_factory=dict)  # collectives.describe's answers, by instruction (asked per device)
    _within: dict[str, frozenset[str]] = field(default_factory=dict)  # opcodes_within's answers

    @property
    def entry_computation(self) -> Computation:
        return self.computations[self.entry]

    def opcodes_within(self, instruction: Instruction) -> frozenset[str]:
        """The instruction's opcode and, for a fusion or custom call, those of the computations it
        calls, nested: walked without recursion (a chain of calls may be deep) and once per
        instruction (every device asks, at every step)."""
        if instruction.name not in self._within:
            found, seen, pending = {instruction.opcode}, set(), [instruction]
            while pending:
                caller = pending.pop()
                if caller.opcode not in ("fusion", "custom-call"):
                    continue
                for name in caller.called:
                    if name in self.computations and name not in seen:
                        seen.add(name)
                        found.update(i.opcode for i in self.computations[name].instructions)
                        pending.extend(self.computations[name].instructions)
            self._within[instruction.name] = frozenset(found)
        return self._within[instruction.name]

    def instruction(self, name: str) -> tuple[Computation, Instruction] | None:
        """The instruction of that name in any computation (names are unique in a module)."""
        for computation in self.computations.values():
            found = computation.by_name.get(name)
            if found is not None:
                return computation, found
        return None


def _unquoted(text: str, start: int = 0):
    """(index, character) of text from start, leaving out quoted strings (escapes included)."""
    i, quote = start, None
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\":
                i += 1
            elif ch == quote:
                quote = None
        elif ch in "\"'":
            quote = ch
        else:
            yield i, ch
        i += 1


def _closing(text: str, start: int) -> int:
    """Index just past the group that opens at text[start] (nested brackets, quoted strings)."""
    stack = []
    for i, ch in _unquoted(text, start):
        if ch in _OPEN:
            stack.append(_OPEN[ch])
        elif ch in ")}]":
            if not stack or stack.pop() != ch:
                raise ValueError(f"unbalanced {ch!r} at column {i + 1}")
            if not stack:
                return i + 1
    raise ValueError("unclosed bracket or quote")


def split_top(text: str) -> list[str]:
    """Pieces of text between commas that are not inside brackets or quotes."""
    pieces, depth, start = [], 0, 0
    for i, ch in _unquoted(text):
        if ch in _OPEN:
            depth += 1
        elif ch in ")}]":
            depth -= 1
        elif ch == "," and depth == 0:
            pieces.append(text[start:i].strip())
            start = i + 1
    tail = text[start:].strip()
    return pieces + [tail] if tail else pieces


def _attributes(text: str) -> dict[str, str]:
    attrs = {}
    for piece in split_top(text):
        key, sep, value = piece.partition("=")
        if sep:
            attrs[key.strip()] = value.strip()
    return attrs


def _operand_name(piece: str, opcode: str) -> str | None:
    """The name an operand piece refers to (`%x` or `f32[2]{0} %x`); None for a literal."""
    if opcode in ("constant", "parameter", "iota", "rng-get-and-update-state"):
        return None
    token = piece.split()[-1] if piece.split() else ""
    token = re.sub(r"#\d+$", "", token)  # `%x#0`: an element of a tuple-shaped operand (newer printers)
    if token.startswith("%"):
        return token[1:]
    return token if re.fullmatch(r"[A-Za-z_][\w.\-]*", token) else None


def _without_comments(line: str) -> str:
    """The line without its `/*...*/` comments, found with str.find: linear, where a pattern
    would scan to the end from each unclosed `/*`."""
    pieces, at = [], 0
    while (start := line.find("/*", at)) >= 0 and (end := line.find("*/", start + 2)) >= 0:
        pieces.append(line[at:start])
        at = end + 2
    pieces.append(line[at:])
    return "".join(pieces)


def _computation(line: str) -> re.Match | None:
    """The head of `[ENTRY ]%NAME (PARAMS) -> SHAPE {`, when the line is one (checked without a
    backtracking `.*->.*{` pattern, quadratic on a line of many `->`)."""
    head = _COMPUTATION.match(line)
    return head if head and line.endswith("{") and "->" in line[head.end():-1] else None


def parse_instruction(line: str, number: int) -> Instruction:
    """One instruction line; ValueError (or a ShapeError) says what is wrong with it."""
    text = _without_comments(line)
    head = _INSTRUCTION.match(text)
    if head is None:
        raise ValueError("not an instruction `%name = SHAPE opcode(...)`")
    pos = head.end()
    if text[pos:pos + 1] == "(":
        shape_end = _closing(text, pos)
    else:
        match = re.compile(r"[a-z][a-z0-9]*\[[^\]]*\]").match(text, pos)
        if match is None:
            raise ValueError(f"no shape after '=' (found {text[pos:pos + 20]!r})")
        shape_end = _closing(text, match.end()) if text[match.end():match.end() + 1] == "{" else match.end()
    shape = text[pos:shape_end]
    opcode = _OPCODE.match(text, shape_end)
    if opcode is None:
        raise ValueError(f"no opcode after the shape (found {text[shape_end:shape_end + 20]!r})")
    args_end = _closing(text, opcode.end() - 1)
    pieces = split_top(text[opcode.end():args_end - 1])
    operands = [n for n in (_operand_name(p, opcode.group(1)) for p in pieces) if n is not None]
    attrs = _attributes(text[args_end:].lstrip().removeprefix(","))
    try:
        size = shape_bytes(shape)
    except ShapeError as exc:
        raise ShapeError(f"instruction {head.group(2)[:80]}: {exc}") from None
    return Instruction(head.group(2), shape.strip(), opcode.group(1), operands, attrs, number, bool(head.group(1)),
                       size)


def parse_hlo(path: str, text: str) -> HloModule:
    """The module in `text` (read from `path`, which errors name with the line)."""
    name, header, entry, current = None, {}, None, None
    computations: dict[str, Computation] = {}
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if name is None:
            match = _MODULE.match(stripped)
            if match:
                name = match.group(1)
                header = _attributes(stripped[match.end():].lstrip().removeprefix(","))
            elif stripped:
                raise SourceFormatError(path, "not HLO text: the first line is not `HloModule NAME, ...`", line=number)
            continue
        if current is None:
            match = _computation(stripped)
            if match:
                current = Computation(match.group(2).lstrip("%"))
                if current.name in computations:
                    raise SourceFormatError(path, f"computation {current.name} is defined twice", line=number)
                computations[current.name] = current
                entry = current.name if match.group(1) else entry
            continue
        if stripped == "}":
            current = None
            continue
        if not stripped:
            continue
        try:
            instruction = parse_instruction(stripped, number)
        except ValueError as exc:  # ShapeError too
            raise SourceFormatError(path, f"bad instruction in computation {current.name}: {exc}", line=number) \
                from None
        current.instructions.append(instruction)
        current.position[instruction.name] = len(current.instructions) - 1
        current.by_name[instruction.name] = instruction
    if name is None:
        raise SourceFormatError(path, "empty: no `HloModule` line")
    if current is not None:
        raise SourceFormatError(path, f"computation {current.name} is not closed with '}}' (truncated?)")
    if entry is None:
        raise SourceFormatError(path, "no ENTRY computation")
    _check_operands(path, computations)
    return HloModule(name, path, computations, entry, header)


def _check_operands(path: str, computations: dict[str, Computation]) -> None:
    """Every operand names an instruction of its own computation (what dependencies are made of)."""
    for computation in computations.values():
        for instruction in computation.instructions:
            missing = next((o for o in instruction.operands if o not in computation.by_name), None)
            if missing is not None:
                raise SourceFormatError(path, f"instruction {instruction.name} uses %{missing}, which computation"
                                        f" {computation.name} does not define", line=instruction.line)
