"""Many small local .et files read in one pass: a job's rank files.

Reading a file costs a fixed ~0.5 ms besides its nodes (opening it through fsspec, wrapping
the decoded buffers as Arrow arrays per column), which dominates a job of thousands of rank
files of a few hundred nodes each (16,384 files: ~9 s). Here each local, uncompressed file
is read whole and its global metadata checked as etfile.ETReader does; the node messages of
all of them are decoded by one codec call (on every decoding thread) into one table, and each
file's table is its slice of it, with its own metadata in the schema. Anything else (another
URL scheme, gzip, a damaged file, too many nodes) returns None: the caller reads file by
file, whose errors name the file and offset.
"""

from __future__ import annotations

import io
import os
from collections.abc import Sequence

import pyarrow as pa

from chakra_core import limits
from chakra_core._native import _etcodec
from chakra_core.errors import ChakraFormatError
from chakra_core.format import codec
from chakra_core.format.etfile import parse_metadata, projected_schema, read_frame, with_metadata
from chakra_core.inputs import open_raw

GZIP_MAGIC = b"\x1f\x8b"


MAX_JOINED_BYTES = 64 << 20  # files larger together are read one by one, a batch at a time


def read_local_tables(urls: list[str], columns: Sequence[str] | None = None) -> list[pa.Table] | None:
    """The node table of each file (only `columns` when given), as etfile.read_table would give
    it; None where a file is not a plain local file or does not decode cleanly, or where the
    files hold more than MAX_JOINED_BYTES (then read them one by one)."""
    if not urls or any("://" in url and not url.startswith("file://") for url in urls):
        return None
    paths = [url.removeprefix("file://") for url in urls]
    try:
        size = sum(os.path.getsize(path) for path in paths)
    except OSError:
        return None
    if size > MAX_JOINED_BYTES:
        return None
    joined = bytearray(size)  # every file's bytes, one allocation
    counts, metadata, end = [], [], 0  # joined[:end]: the node messages of the files so far
    max_nodes = limits.value("nodes")
    with memoryview(joined) as view:
        for url, path in zip(urls, paths):
            try:
                with open_raw(path) as f:  # a regular file, or ChakraFormatError (a FIFO is not waited on)
                    size = f.readinto(view[end:])
                data = view[end:end + size]
                payload, offset = read_frame(io.BytesIO(data), url, 0, "global metadata")
                if payload is None or data[:2] == GZIP_MAGIC:
                    return None
                parse_metadata(payload, url)
                nodes, _, whole = _etcodec.scan(data, offset, -1) if offset < size else (0, 0, size)
            except (OSError, ChakraFormatError, _etcodec.FormatError, ValueError):
                return None
            if nodes > max_nodes or whole != size:  # too many nodes, or the last one cut short
                return None
            view[end:end + size - offset] = data[offset:]  # the metadata out, the nodes after the last file's
            end += size - offset
            counts.append(nodes)
            metadata.append(payload)
        return _split(view[:end], counts, metadata, urls, columns)


def _split(data: memoryview, counts: list[int], metadata: list[bytes], urls: list[str],
           columns: Sequence[str] | None) -> list[pa.Table] | None:
    """Decodes the joined node messages and cuts the table at each file's first node."""
    try:
        batches, end = codec.decode(data, 0, 0, 0, max(1, sum(counts)), True, codec.default_decode_threads())
    except codec.FormatError:
        return None
    if end != len(data):
        return None
    whole = pa.Table.from_batches(batches, schema=codec.NODE_SCHEMA) if batches else codec.NODE_SCHEMA.empty_table()
    if whole.num_rows != sum(counts):
        return None
    schema = projected_schema(columns)
    whole = whole.select(schema.names)
    tables, start = [], 0
    for count, payload, url in zip(counts, metadata, urls):
        tables.append(whole.slice(start, count).replace_schema_metadata(
            with_metadata(schema, payload, os.fspath(url)).metadata))
        start += count
    return tables
