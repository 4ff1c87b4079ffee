"""A sweep file's `where:` conditions: a list of single comparisons, all of which must hold.

    where: ["total_npus <= 4096", "bandwidth_1 <= bandwidth_0", "topology_0 != Switch"]

Each is NAME OP VALUE: NAME a parameter column (`bandwidth_0`, ...) or a derived figure
(`total_npus`, `dims`, `traced_npus`, `mode`, `scaling`), OP one of <= >= < > == !=, VALUE a
number, another name, or text (bare or quoted). Parsed by a regular expression and applied
with the `operator` module: nothing is ever evaluated as code. A condition on a value a point
lacks (bandwidth_1 of a one-dimensional network) holds.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from dataclasses import dataclass

from chakra_core.errors import ChakraError

OPERATORS = {"<=": operator.le, ">=": operator.ge, "<": operator.lt, ">": operator.gt, "==": operator.eq,
             "!=": operator.ne}
_COMPARISON = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(<=|>=|==|!=|<|>)\s*(\S(?:.*\S)?)\s*$")
_QUOTED = re.compile(r"""^(['"])(.*)\1$""")


class WhereError(ChakraError):
    """A condition that cannot be parsed or compared (one line naming it)."""


@dataclass(frozen=True)
class Condition:
    text: str
    name: str
    op: str
    value: float | int | str | None = None  # the literal compared with, or None when other names a value
    other: str | None = None

    def uses(self, name: str) -> bool:
        return name in (self.name, self.other)

    def holds(self, values: dict) -> bool:
        left = values.get(self.name)
        right = values.get(self.other) if self.other else self.value
        if left is None or right is None:
            return True
        try:
            return OPERATORS[self.op](left, right)
        except TypeError:
            raise WhereError(f"where: {self.text!r}: cannot compare {left!r} with {right!r}") from None


def parse_where(path: str, where, is_name: Callable[[str], bool]) -> list[Condition]:
    """The conditions of a `where:` entry (None: none); is_name says which names exist."""
    if where is None:
        return []
    if not isinstance(where, list) or not all(isinstance(w, str) for w in where):
        raise WhereError(f"{path}: where: expected a list of comparisons like \"total_npus <= 4096\"")
    return [_condition(path, i, text, is_name) for i, text in enumerate(where)]


def _condition(path: str, index: int, text: str, is_name: Callable[[str], bool]) -> Condition:
    match = _COMPARISON.match(text)
    if match is None:
        raise WhereError(f"{path}: where[{index}]: {text!r} is not NAME OP VALUE "
                         f"(OP one of {' '.join(OPERATORS)}), e.g. \"total_npus <= 4096\"")
    name, op, right = match.groups()
    if not is_name(name):
        raise WhereError(f"{path}: where[{index}]: {name}: unknown name; a parameter column of the grid "
                         "(e.g. bandwidth_0), total_npus, dims, traced_npus, mode or scaling")
    quoted = _QUOTED.match(right)
    if quoted:
        return Condition(text, name, op, quoted[2])
    if is_name(right):
        return Condition(text, name, op, other=right)
    return Condition(text, name, op, _number(right))


def _number(text: str) -> float | int | str:
    """A number when it reads as one, else the text itself."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text
