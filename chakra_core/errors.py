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
        where = [path]
        if offset is not None:
            where.append(f"byte {offset}")
        if node_id is not None:
            where.append(f"node id {node_id}")
        super().__init__(f"{': '.join(where)}: {message}")


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
        where = [path]
        if line is not None:
            where.append(f"line {line}")
        if node is not None:
            where.append(f"node {node}")
        super().__init__(f"{': '.join(where)}: {message}")
