"""The Chakra ET format: files (``etfile``: streaming, tables, gzip, fsspec URLs), the node
codec (``codec``, with the C extension in ``chakra_core._native``), the columnar node table
(``columns``, ``normalize``), node types (``nodetypes``), JSON (``jsonio``, with ``protowire``
under it), the protobuf schema (``schema``) and the on-disk layout of a whole job (``job``).
Nothing here knows about simulation or analysis."""
