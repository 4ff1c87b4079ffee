"""Errors that name what went wrong and where: the file, the byte offset, the node."""

from __future__ import annotations


class ChakraError(Exception):
    """Base of every error the library raises on bad input."""


class ChakraFormatError(ChakraError):
    """Bytes that are not well-formed input (a Chakra ET, or a JSON trace being converted):
    truncated, corrupt, or another format."""

    def __init__(self, path: str, message: str, offset: int | None = None, node_index: int | None = None,
                 node_id: int | None = None):
        self.path = path
        self.message = message
        self.offset = offset
        self.node_index = node_index
        self.node_id = node_id
        super().__init__(_located(path, message, ("byte", offset), ("node id", node_id)))


def _located(path: str, message: str, *places: tuple[str, object]) -> str:
    """`path: <what> <value>: ...: message`, the places whose value is known."""
    return ": ".join([path, *(f"{what} {value}" for what, value in places if value is not None), message])


class ChakraTableError(ChakraError):
    """A node table that cannot be written as a Chakra ET (missing or mistyped columns)."""


class SourceFormatError(ChakraError):
    """A FlexFlow task graph or an ASTRA-sim 1.0 text workload that cannot be converted: the
    message names the file and the line (or the graph's node) on one line."""

    def __init__(self, path: str, message: str, line: int | None = None, node: str | None = None):
        self.path = path
        self.message = message
        self.line = line
        self.node = node
        super().__init__(_located(path, message, ("line", line), ("node", node)))
