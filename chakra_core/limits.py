"""Limits that bound what bad input can cost in memory and time.

Each limit has a default that no real trace of the sizes this project is benchmarked on comes
near, an environment variable that raises (or lowers) it, and a clear error naming the file,
the limit and the variable when it is crossed (docs/limits.md lists them).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from chakra_core.errors import ChakraError


@dataclass(frozen=True)
class Limit:
    env: str          # the environment variable that sets it
    default: int
    what: str         # what it bounds, for the error message and the docs


LIMITS: dict[str, Limit] = {
    "nodes": Limit("CHAKRA_MAX_NODES", 20_000_000,
                   "nodes (or events) in one trace file"),
    "expansion": Limit("CHAKRA_MAX_EXPANSION", 250,
                       "x expansion of a gzip file (judged from 256 KiB decompressed on; real traces stay under 40x)"),
    "json_depth": Limit("CHAKRA_MAX_JSON_DEPTH", 64,
                        "levels of nesting in JSON and YAML input (traces, configurations, sweep files)"),
    "element_bytes": Limit("CHAKRA_MAX_ELEMENT_BYTES", 64 << 20,
                           "bytes in one element of a JSON trace (a node, an event or a top-level member)"),
    "config_bytes": Limit("CHAKRA_MAX_CONFIG_BYTES", 16 << 20,
                          "bytes in one configuration file (network, system, communicator groups, sweep)"),
    "chunks": Limit("CHAKRA_MAX_CHUNKS", 4096,
                    "chunks, active chunks or queues of one collective or dimension (preferred-dataset-splits, "
                    "active-chunks-per-dimension, --num-queues-per-dim)"),
    "npus": Limit("CHAKRA_MAX_NPUS", 65_536, "NPUs of one simulated network"),
    "source_bytes": Limit("CHAKRA_MAX_SOURCE_BYTES", 256 << 20,
                          "bytes of a FlexFlow task graph or an ASTRA-sim 1.0 text workload (read whole)"),
}

# Below this many decompressed bytes a gzip file is never judged by its ratio: tiny, very
# regular files compress far better than any trace of real size. Small, so that a bomb is
# stopped after a fraction of a second even on the slow per-message path (jsonize).
EXPANSION_FLOOR = 256 << 10


class LimitExceeded(ChakraError):
    """Input beyond a limit: names the source, the limit and how to raise it."""

    def __init__(self, source: str, name: str, found: str):
        limit = LIMITS[name]
        super().__init__(f"{source}: {found} (the limit is {value(name):,} {limit.what}; "
                         f"raise {limit.env} if the input is genuine)")


def value(name: str) -> int:
    """The limit in force: the environment variable when set, else the default."""
    limit = LIMITS[name]
    text = os.environ.get(limit.env)
    if text is None or not text.strip():
        return limit.default
    try:
        number = int(float(text))
    except ValueError:
        raise ChakraError(f"{limit.env}={text!r}: expected a positive number") from None
    if number <= 0:
        raise ChakraError(f"{limit.env}={text!r}: expected a positive number")
    return number


def check_depth(document, source: str) -> None:
    """Refuses a parsed JSON/YAML document nested deeper than the `json_depth` limit (walked
    without recursion, so the check itself cannot overflow the stack)."""
    most = value("json_depth")
    stack = [(document, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        for child in children:
            if isinstance(child, (dict, list)):
                if depth + 1 > most:
                    raise LimitExceeded(source, "json_depth", f"nested more than {most} levels deep")
                stack.append((child, depth + 1))
