"""Reading and writing Chakra ET files (.et): streaming, gzip, any fsspec URL.

A file is a varint-length-prefixed GlobalMetadata message followed by varint-length-prefixed
Node messages (docs/format.md, 'File framing'). Readers detect gzip by its magic bytes, as the
reference C++ reader does; writers gzip when the URL ends in ".gz".

Two views of the same stream:
- node tables (Arrow record batches, decoded in C): `ETReader.iter_batches`, `read_table`,
  `ETWriter.write_batch`, `write_table`;
- protobuf messages, one Python object per node: `iter_nodes`, `write_messages`; simple
  and slow, for JSON conversion and for code that wants the generated classes.
"""

from __future__ import annotations

import base64
import contextlib
import gzip
import itertools
import mmap
import zlib
from collections.abc import Iterable, Iterator, Sequence
from typing import BinaryIO

import pyarrow as pa
from google.protobuf import unknown_fields
from google.protobuf.message import DecodeError

from chakra_core import limits
from chakra_core.errors import ChakraFormatError
from chakra_core.format import codec
from chakra_core.format.names import is_kineto_head, is_pytorch_et_head
from chakra_core.format.normalize import normalize_table
from chakra_core.format.schema import et_def_pb2 as pb
from chakra_core.inputs import open_input
from chakra_core.outputs import open_output

READ_CHUNK_BYTES = 4 << 20
MAX_WINDOW_BYTES = 32 << 20  # of a memory-mapped file decoded at once (see ETReader._iter_mapped)
DEFAULT_BATCH_NODES = 65536
# Written in smaller batches: a batch's encoded bytes (about 400 per node) and the arrays the
# codec reads are held until written, on top of the table being written.
WRITE_BATCH_NODES = 16384
METADATA_KEY = b"chakra.global_metadata"  # base64 of the serialized GlobalMetadata message
SOURCE_KEY = b"chakra.source"
MAX_METADATA_BYTES = 1 << 30


@contextlib.contextmanager
def open_binary(url: str, mode: str = "rb") -> Iterator[BinaryIO]:
    """On read, the input's bytes (chakra_core/inputs.py: a regular file, gunzipped within the
    expansion limit when it starts with the gzip magic); on write, gzipped for *.gz and written
    atomically (chakra_core/outputs.py)."""
    if "r" not in mode:
        with open_output(url, "wb") as f:
            yield f
        return
    with open_input(url) as f:
        yield f


# What reading a damaged stream raises: I/O errors, a gzip stream cut short (EOFError) or
# corrupt inside (zlib.error, which is not an OSError).
READ_ERRORS = (OSError, EOFError, zlib.error)


def _looks_like_json(head: bytes) -> bool:
    return head.lstrip()[:1] in (b"{", b"[")


def encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def read_frame(f: BinaryIO, path: str, offset: int, what: str) -> tuple[bytes | None, int]:
    """Reads one length-prefixed message at `offset`; returns (payload or None at EOF, next offset)."""
    length = shift = 0
    pos = offset
    while True:
        byte = f.read(1)
        if not byte:
            if pos == offset:
                return None, offset
            raise ChakraFormatError(path, f"truncated file: the length prefix of the {what} is cut off", offset)
        pos += 1
        length |= (byte[0] & 0x7F) << shift
        if not byte[0] & 0x80:
            break
        shift += 7
        if shift >= 70:
            raise ChakraFormatError(path, f"corrupt length prefix of the {what} (not a Chakra ET, or damaged)", offset)
    if length > MAX_METADATA_BYTES:
        raise ChakraFormatError(path, f"corrupt length prefix of the {what}: {length} bytes", offset)
    payload = f.read(length)
    if len(payload) < length:
        raise ChakraFormatError(
            path, f"truncated file: the {what} declares {length} bytes but only {len(payload)} remain", offset
        )
    return payload, pos + length


def parse_metadata(payload: bytes, path: str) -> pb.GlobalMetadata:
    """GlobalMetadata from its bytes; strict, so that a file of another format is refused here."""
    meta = pb.GlobalMetadata()
    try:
        meta.ParseFromString(payload)
    except DecodeError as exc:
        raise ChakraFormatError(path, f"not a Chakra ET: the global metadata does not decode ({exc})", 0) from None
    unknown = [field for field, _ in _unknown_field_numbers(meta)]
    if unknown:
        raise ChakraFormatError(
            path, f"not a Chakra ET: the global metadata has fields {unknown} that the schema does not define", 0
        )
    return meta


def _unknown_field_numbers(meta: pb.GlobalMetadata) -> list[tuple[int, int]]:
    found = [(f.field_number, f.wire_type) for f in unknown_fields.UnknownFieldSet(meta)]
    for attr in meta.attr:
        found += [(f.field_number, f.wire_type) for f in unknown_fields.UnknownFieldSet(attr)]
    return found


def _what_json_is(file) -> str:
    """What to run on a JSON file given where a Chakra ET was expected."""
    file.seek(0)
    head = file.read(4096)
    if is_kineto_head(head):
        return ("not a Chakra ET: this is a Kineto trace (the PyTorch profiler's JSON): convert it first: chakra convert "
                "FILE_OR_FOLDER -o DIR (docs/gpu.md)")
    if is_pytorch_et_head(head):
        return ("not a Chakra ET: this is a PyTorch execution trace (JSON): convert it first: chakra convert "
                "FILE_OR_FOLDER -o DIR, with rank<R>.kineto.json[.gz] beside it for times and kernels (docs/ingestion.md)")
    return "not a Chakra ET: this is JSON (a jsonized ET? chakra unjsonize turns it back)"


class ETReader:
    """Streams one .et file: the metadata on open, then node batches of bounded size.

    with ETReader("s3://bucket/trace.0.et") as reader:
        reader.metadata            # GlobalMetadata message
        for batch in reader.iter_batches():   # pyarrow.RecordBatch, NODE_SCHEMA
            ...
    """

    def __init__(self, url: str):
        self.url = url
        self._stack = contextlib.ExitStack()
        try:  # whatever goes wrong while opening closes the file again
            try:
                self._file = self._stack.enter_context(open_binary(url))
                head = self._file.read(64)
                self._file.seek(0)
            except FileNotFoundError:
                raise ChakraFormatError(url, "no such file") from None
            except READ_ERRORS as exc:
                raise ChakraFormatError(url, f"cannot read: {exc}") from None
            try:
                payload, self._offset = self._read_metadata_frame()
                self.metadata = parse_metadata(payload, url)
            except ChakraFormatError:
                # Only a diagnosis: a valid ET may start with "{" or "[" too (a 123- or 91-byte metadata).
                if _looks_like_json(head):
                    raise ChakraFormatError(url, _what_json_is(self._file), 0) from None
                raise
            self.metadata_bytes = payload
        except BaseException:
            self._stack.close()
            raise

    def _read_metadata_frame(self) -> tuple[bytes, int]:
        try:
            payload, offset = read_frame(self._file, self.url, 0, "global metadata")
        except READ_ERRORS as exc:  # e.g. a damaged gzip stream
            raise ChakraFormatError(self.url, f"cannot read: {exc}", 0) from None
        if payload is None:
            raise ChakraFormatError(self.url, "empty file: a Chakra ET starts with a global metadata message", 0)
        return payload, offset

    def __enter__(self) -> ETReader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._stack.close()

    def _fill(self, buf: bytearray, filled: int, want: int, base: int) -> tuple[bytearray, int, bool]:
        """Reads up to `want` bytes after buf[:filled]; returns (buf, new filled, eof).

        Reads straight into buf when it has room, else appends (buf then grows in place), so
        memory stays near two chunks without the transient copies that deleting from the front
        of a bytearray and appending to it cost; a small file never gets a chunk-sized buffer.
        `base` is the file offset of buf[0] (uncompressed, for gzip), for error messages.
        """
        try:
            readinto = getattr(self._file, "readinto", None)
            if readinto is not None and len(buf) - filled >= want:
                with memoryview(buf) as view, view[filled:filled + want] as room:
                    n = readinto(room)
            else:
                data = self._file.read(want)
                n = len(data)
                buf[filled:] = data
        except READ_ERRORS as exc:
            raise ChakraFormatError(self.url, f"cannot read (damaged compression?): {exc}", base + filled) from None
        return buf, filled + n, not n

    def iter_batches(self, batch_nodes: int = DEFAULT_BATCH_NODES, threads: int | None = None
                     ) -> Iterator[pa.RecordBatch]:
        """Node batches in file order, from the first node on every call.

        Memory stays near two read chunks plus the batches of one chunk. Each read chunk is
        decoded by `threads` threads (default: codec.default_decode_threads()), giving up to
        that many batches per chunk.
        """
        if batch_nodes < 1:  # 0 would decode nothing and loop forever
            raise ValueError(f"batch_nodes must be at least 1, got {batch_nodes}")
        threads = threads or codec.default_decode_threads()
        self._max_nodes = limits.value("nodes")
        mapped = self._map()
        if mapped is not None:
            yield from self._iter_mapped(mapped, batch_nodes, threads)
            return
        try:
            self._file.seek(self._offset)  # a second call starts over instead of misreading
        except READ_ERRORS as exc:
            raise ChakraFormatError(self.url, f"cannot read (damaged compression?): {exc}", self._offset) from None
        buf = bytearray()
        filled = 0  # buf[:filled] holds the file's bytes from offset `base`; the rest is room
        base = self._offset
        pos = 0
        node_index = 0
        eof = False
        while True:
            if not eof and filled - pos < READ_CHUNK_BYTES:
                if pos:
                    buf[:filled - pos] = buf[pos:filled]  # move the unread tail to the front (no resize)
                    base += pos
                    filled -= pos
                    pos = 0
                buf, filled, eof = self._fill(buf, filled, READ_CHUNK_BYTES, base)
            if pos == filled and eof:
                return
            with memoryview(buf) as view, view[:filled] as data:
                batches, end = self._decode(data, pos, base, node_index, batch_nodes, eof, threads)
            for batch in batches:
                if batch.num_rows:
                    node_index = self._counted(node_index, batch.num_rows)
                    yield batch
            batches = batch = None  # not kept alive while the next chunk decodes
            if end == pos and not eof:
                # one message larger than what is buffered: read more before decoding again
                buf, filled, eof = self._fill(buf, filled, max(READ_CHUNK_BYTES, filled), base)
            pos = end

    def _counted(self, nodes_before: int, batch_rows: int) -> int:
        """Nodes read so far, refused past the `nodes` limit (a file of empty messages is ~1 byte a node)."""
        nodes = nodes_before + batch_rows
        if nodes > self._max_nodes:
            raise limits.LimitExceeded(self.url, "nodes", "too many nodes")
        return nodes

    def _decode(self, data, pos: int, base: int, node_index: int, batch_nodes: int, final: bool, threads: int):
        try:
            return codec.decode(data, pos, base, node_index, batch_nodes, final, threads)
        except codec.FormatError as exc:
            message, offset, _msg_offset, index, node_id = exc.args
            raise ChakraFormatError(self.url, message, offset, node_index=index, node_id=node_id) from None

    def _map(self) -> mmap.mmap | None:
        """A read-only map of the file when it is local and uncompressed, else None."""
        if isinstance(self._file, gzip.GzipFile):
            return None
        try:
            return mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_READ)
        except (AttributeError, OSError, ValueError):  # not a local file (memory://, s3://), or empty
            return None

    def _iter_mapped(self, mapped: mmap.mmap, batch_nodes: int, threads: int) -> Iterator[pa.RecordBatch]:
        """iter_batches for a local file: decodes straight from the page cache, no copy.

        Each chunk's pages are dropped from this process once decoded (the batches own their
        data), so resident memory stays near one chunk however large the file. A chunk is
        one READ_CHUNK_BYTES per thread at first, then about as many bytes as batch_nodes nodes
        a thread take (as measured so far): wrapping a batch in Arrow costs the same however
        large it is, so fewer, fuller batches cost less; batch_nodes bounds the memory either way.
        """
        total, pos, node_index, released = len(mapped), self._offset, 0, 0
        window = READ_CHUNK_BYTES * threads
        try:
            with memoryview(mapped) as view:
                while pos < total:
                    limit = min(total, pos + window)
                    with view[:limit] as data:
                        batches, end = self._decode(data, pos, 0, node_index, batch_nodes, limit == total, threads)
                    if end == pos:  # one message longer than a chunk
                        batches, end = self._decode(view, pos, 0, node_index, batch_nodes, True, threads)
                    for batch in batches:
                        node_index = self._counted(node_index, batch.num_rows)
                        yield batch
                    batches = batch = None
                    pos = end
                    if node_index:  # room for about batch_nodes nodes a thread (a little less: none is cut short)
                        window = max(READ_CHUNK_BYTES * threads, min(
                            MAX_WINDOW_BYTES, (pos - self._offset) * batch_nodes * threads * 7 // (node_index * 8)))
                    decoded = pos // mmap.PAGESIZE * mmap.PAGESIZE
                    if decoded > released:
                        mapped.madvise(mmap.MADV_DONTNEED, released, decoded - released)
                        released = decoded
        finally:
            mapped.close()

    def read_table(self, batch_nodes: int = DEFAULT_BATCH_NODES, columns: Sequence[str] | None = None) -> pa.Table:
        """The whole node table; with `columns`, only those (in that order), each batch cut down
        as it is decoded, so that memory holds the columns a question reads, not the trace."""
        schema = projected_schema(columns)
        batches = [batch if columns is None else batch.select(schema.names) for batch in self.iter_batches(batch_nodes)]
        return pa.Table.from_batches(batches, schema=with_metadata(schema, self.metadata_bytes, self.url))


def projected_schema(columns: Sequence[str] | None) -> pa.Schema:
    """NODE_SCHEMA, or its fields named in `columns` (in that order); ValueError for a name it lacks."""
    if columns is None:
        return codec.NODE_SCHEMA
    unknown = [name for name in columns if codec.NODE_SCHEMA.get_field_index(name) < 0]
    if unknown:
        raise ValueError(f"not node-table columns: {unknown}")
    return pa.schema([codec.NODE_SCHEMA.field(name) for name in dict.fromkeys(columns)])


def with_metadata(schema: pa.Schema, metadata_bytes: bytes, source: str | None = None) -> pa.Schema:
    """The schema carrying the trace's GlobalMetadata (kept as bytes, so it round-trips exactly)."""
    extra = {METADATA_KEY: base64.b64encode(metadata_bytes)}
    if source is not None:
        extra[SOURCE_KEY] = source.encode()
    return schema.with_metadata({**(schema.metadata or {}), **extra})


def table_source(table: pa.Table, default: str) -> str:
    """The URL a table was read from (for messages), or `default` for a table built in memory."""
    source = (table.schema.metadata or {}).get(SOURCE_KEY)
    return source.decode() if source is not None else default


def table_metadata_bytes(table: pa.Table) -> bytes:
    """The serialized GlobalMetadata a table carries; an empty message if it carries none."""
    stored = (table.schema.metadata or {}).get(METADATA_KEY)
    return base64.b64decode(stored) if stored is not None else b""


def table_metadata(table: pa.Table) -> pb.GlobalMetadata:
    meta = pb.GlobalMetadata()
    meta.ParseFromString(table_metadata_bytes(table))
    return meta


class ETWriter:
    """Writes a .et file: the metadata first, then node batches (or whole tables)."""

    def __init__(self, url: str, metadata: pb.GlobalMetadata | bytes | None = None, into: BinaryIO | None = None):
        """into: a file to write into (its owner closes it) instead of url, which then only names it."""
        self.url = url
        self._stack = contextlib.ExitStack()
        self._file = into if into is not None else self._stack.enter_context(open_binary(url, "wb"))
        if isinstance(metadata, pb.GlobalMetadata):
            metadata = metadata.SerializeToString()
        payload = metadata or b""
        self._file.write(encode_varint(len(payload)) + payload)
        self.nodes_written = 0

    def __enter__(self) -> ETWriter:
        return self

    def __exit__(self, *exc) -> None:
        # the exception reaches open_output, which then discards the unfinished file
        self._stack.__exit__(*exc)

    def close(self) -> None:
        self._stack.close()

    def write_batch(self, batch: pa.RecordBatch) -> None:
        """Writes a batch that already has the node-table schema (see normalize_table for others)."""
        try:
            self._file.write(codec.encode_batch(batch))
        except ValueError as exc:
            raise ChakraFormatError(self.url, f"cannot encode: {exc}") from None
        self.nodes_written += batch.num_rows

    def write_table(self, table: pa.Table, batch_nodes: int = WRITE_BATCH_NODES) -> None:
        for batch in normalize_table(table).to_batches(max_chunksize=batch_nodes):
            self.write_batch(batch)


def read_table(url: str, columns: Sequence[str] | None = None) -> pa.Table:
    """The node table of one .et file (any fsspec URL, plain or gzip), its metadata in the schema;
    with `columns`, only those columns (read batch by batch: see ETReader.read_table)."""
    with ETReader(url) as reader:
        return reader.read_table(columns=columns)


def write_table(table: pa.Table, url: str, metadata: pb.GlobalMetadata | bytes | None = None) -> None:
    """Writes a node table as a .et file; metadata defaults to what the table carries."""
    if metadata is None:
        metadata = table_metadata_bytes(table)
    with ETWriter(url, metadata) as writer:
        writer.write_table(table)


def read_metadata(url: str) -> pb.GlobalMetadata:
    with ETReader(url) as reader:
        return reader.metadata


def iter_nodes(url: str) -> Iterator[pb.Node]:
    """Every node as a protobuf message, in file order (after checking the metadata)."""
    with ETReader(url) as reader:
        f, offset, max_nodes = reader._file, reader._offset, limits.value("nodes")
        for count in itertools.count():
            frame_offset = offset
            try:
                payload, offset = read_frame(f, url, offset, "node")
            except READ_ERRORS as exc:
                raise ChakraFormatError(url, f"cannot read: {exc}", frame_offset) from None
            if payload is None:
                return
            if count == max_nodes:
                raise limits.LimitExceeded(url, "nodes", "too many nodes")
            node = pb.Node()
            try:
                node.ParseFromString(payload)
            except DecodeError as exc:
                raise ChakraFormatError(url, f"node does not decode ({exc})", frame_offset) from None
            yield node


def write_messages(url: str, metadata: pb.GlobalMetadata, nodes: Iterable[pb.Node]) -> int:
    """Writes protobuf messages as a .et file; returns the node count."""
    count = 0
    with open_binary(url, "wb") as f:
        payload = metadata.SerializeToString()
        f.write(encode_varint(len(payload)) + payload)
        for node in nodes:
            payload = node.SerializeToString()
            f.write(encode_varint(len(payload)) + payload)
            count += 1
    return count
