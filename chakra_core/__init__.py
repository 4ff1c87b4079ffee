"""chakra_core: the Chakra execution-trace library.

    import chakra_core
    table = chakra_core.read_table("s3://bucket/job.0.et")   # pyarrow.Table, one row per node
    chakra_core.write_table(table, "out/job.0.et.gz")          # byte-identical nodes, gzipped

See chakra_core.format.columns for the table's columns, chakra_core.format.etfile for streaming access.
"""

from __future__ import annotations

import importlib

from chakra_core.errors import ChakraError, ChakraFormatError, ChakraTableError

# The rest is imported on first use (PEP 562): importing pyarrow, fsspec and protobuf costs
# ~0.2 s, which every `chakra` command and every `import chakra_core.x` would pay before
# doing anything; `chakra --help` needs none of it.
_LAZY = {
    "NODE_SCHEMA": "chakra_core.format.columns",
    "WELL_KNOWN_ATTRIBUTES": "chakra_core.format.columns",
    "ETReader": "chakra_core.format.etfile",
    "ETWriter": "chakra_core.format.etfile",
    "iter_nodes": "chakra_core.format.etfile",
    "read_metadata": "chakra_core.format.etfile",
    "read_table": "chakra_core.format.etfile",
    "table_metadata": "chakra_core.format.etfile",
    "write_messages": "chakra_core.format.etfile",
    "write_table": "chakra_core.format.etfile",
    "normalize_table": "chakra_core.format.normalize",
}

__all__ = ["ChakraError", "ChakraFormatError", "ChakraTableError", *_LAZY]


def __getattr__(name: str):
    if name not in _LAZY:
        # also how `from chakra_core import limits` falls through to importing the submodule
        raise AttributeError(f"module 'chakra_core' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value  # once found, an ordinary attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
