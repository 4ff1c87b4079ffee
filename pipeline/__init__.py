"""The fleet pipeline: Ray tasks over many traces, each a thin wrapper over chakra_core plus
Parquet IO. The arrow of imports is flows -> pipeline -> chakra_core."""
