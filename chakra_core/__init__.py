"""chakra_core: the Chakra execution-trace library.

    import chakra_core
    table = chakra_core.read_table("s3://bucket/job.0.et")   # pyarrow.Table, one row per node
    chakra_core.write_table(table, "out/job.0.et.gz")          # byte-identical nodes, gzipped

See chakra_core.format.columns for the table's columns, chakra_core.format.etfile for streaming access.
"""

from chakra_core.errors import ChakraError, ChakraFormatError, ChakraTableError
from chakra_core.format.columns import NODE_SCHEMA, WELL_KNOWN_ATTRIBUTES
from chakra_core.format.etfile import (
    ETReader,
    ETWriter,
    iter_nodes,
    read_metadata,
    read_table,
    table_metadata,
    write_messages,
    write_table,
)
from chakra_core.format.normalize import normalize_table

__all__ = [
    "NODE_SCHEMA",
    "WELL_KNOWN_ATTRIBUTES",
    "ChakraError",
    "ChakraFormatError",
    "ChakraTableError",
    "ETReader",
    "ETWriter",
    "iter_nodes",
    "normalize_table",
    "read_metadata",
    "read_table",
    "table_metadata",
    "write_messages",
    "write_table",
]
