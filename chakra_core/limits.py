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
                   "nodes (or events) in one trace file (and in one generated job, all ranks together)"),
    "expansion": Limit("CHAKRA_MAX_EXPANSION", 250,
                       "x expansion of a gzip file or an archive (judged from 256 KiB decompressed on; real traces "
                       "stay under 40x)"),
    "json_depth": Limit("CHAKRA_MAX_JSON_DEPTH", 64,
                        "levels of nesting in JSON and YAML input (traces, configurations, sweep files)"),
    "element_bytes": Limit("CHAKRA_MAX_ELEMENT_BYTES", 64 << 20,
                           "bytes in one element of a JSON trace (a node, an event or a top-level member)"),
    "config_bytes": Limit("CHAKRA_MAX_CONFIG_BYTES", 16 << 20,
                          "bytes in one configuration file (network, system, communicator groups, sweep)"),
    "chunks": Limit("CHAKRA_MAX_CHUNKS", 4096,
                    "chunks, active chunks or queues of one collective or dimension (preferred-dataset-splits, "
                    "active-chunks-per-dimension, --num-queues-per-dim)"),
    "npus": Limit("CHAKRA_MAX_NPUS", 65_536, "NPUs of one simulated network (and ranks of one job)"),
    "config_values": Limit("CHAKRA_MAX_CONFIG_VALUES", 1_000_000,
                           "values of one configuration document, counting each YAML alias as the values it "
                           "repeats"),
    "archive_members": Limit("CHAKRA_MAX_ARCHIVE_MEMBERS", 100_000, "members of one .zip or .tar job bundle"),
    "log_lines": Limit("CHAKRA_MAX_LOG_LINES", 500_000, "issue/callback lines of one simulator log"),
    "source_nodes": Limit("CHAKRA_MAX_SOURCE_NODES", 4_000_000,
                          "nodes of a job built node by node from an ASTRA-sim text workload or a JAX run, over all "
                          "NPUs (about 370 bytes each while built: 4,000,000 take about 1.6 GB)"),
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
    found = environment_int(limit.env, 1, 2**62 - 1, "a positive whole number below 2**62")
    return limit.default if found is None else found


def environment_int(env: str, low: int, high: int, expected: str | None = None) -> int | None:
    """The whole number an environment variable holds, from low to high; None when it is unset.
    ASCII digits only (int() would read `١` as 1, float() `1e3` and `1.5`), at most 19 of them
    (never thousands of digits), else one line naming the variable."""
    text = os.environ.get(env)
    if text is None or not text.strip():
        return None
    digits = text.strip()
    if not (digits.isascii() and digits.isdigit() and len(digits) <= 19 and low <= int(digits) <= high):
        raise ChakraError(f"{env}={text[:40]!r}: expected {expected or f'a whole number from {low:,} to {high:,}'}")
    return int(digits)


# chakra query's bounds on one query (options raise them: docs/cli.md): DuckDB's memory, beyond
# which it spills into a scratch folder of its own, at most QUERY_SPILL there; its time.
QUERY_MEMORY = "2GB"
QUERY_SPILL = "8GB"
QUERY_TIMEOUT_S = 300.0

