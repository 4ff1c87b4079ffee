"""chakra_core.format.etfile: the reader/writer API, framing, gzip handling, streaming memory."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import textwrap

import et_builders as eb
import pyarrow as pa
import pytest

from chakra_core.format import etfile
from chakra_core.format.columns import NODE_SCHEMA
from chakra_core.format.etfile import (
    ETReader,
    ETWriter,
    encode_varint,
    iter_nodes,
    open_binary,
    read_metadata,
    read_table,
    write_messages,
    write_table,
)
from chakra_core.format.schema import et_def_pb2 as pb

META = eb.metadata("1.0.0", [eb.attr("schema", "string_val", "1.0.2-chakra.1.0.0"), eb.attr("pid", "uint64_val", 1)])


@pytest.mark.parametrize("value", [0, 1, 127, 128, 300, 16383, 16384, (1 << 32) - 1, (1 << 63), (1 << 64) - 1])
def test_encode_varint_matches_protobuf(value):
    # protobuf's own encoding of a uint64 field = tag byte + varint
    assert b"\x08" + encode_varint(value) == pb.Node(id=value).SerializeToString() or value == 0
    assert encode_varint(value)[-1] < 0x80 and all(b >= 0x80 for b in encode_varint(value)[:-1])


def test_file_layout_is_length_prefixed_messages(tmp_path):
    """Fact 1.1/1.2: no header or trailer; varint length + GlobalMetadata, then varint length + Node."""
    nodes = [eb.node(1, "all_reduce_4npus_1MB", 7, [eb.attr("is_cpu_op", "bool_val", False),
                                                     eb.attr("comm_type", "int64_val", 0),
                                                     eb.attr("comm_size", "int64_val", 1048576)])]
    table = pa.table({"id": pa.array([1], pa.uint64()), "name": ["all_reduce_4npus_1MB"], "type": [7],
                      "is_cpu_op": [False], "comm_type": [0], "comm_size": [1048576]})
    write_table(table, str(tmp_path / "a.et"), metadata=eb.metadata("0.0.4"))
    data = (tmp_path / "a.et").read_bytes()
    assert data == eb.et_bytes(eb.metadata("0.0.4"), nodes)
    assert data[:9] == b"\x07\x0a\x05" + b"0.0.4" + b"\x4a"  # length 7, field 1 wire type 2 (version) "0.0.4"; then the node, length 74
    assert len(data) == 83
    assert b"\x0a\x09comm_type\x48\x00" in data  # ALL_REDUCE (0) is on the wire


def test_reader_metadata_and_context(tmp_path):
    eb.write_et(tmp_path / "a.et", META, [eb.node(1), eb.node(2)])
    with ETReader(str(tmp_path / "a.et")) as reader:
        assert reader.metadata == META
        assert reader.metadata_bytes == META.SerializeToString()
        table = reader.read_table()
    assert reader._file.closed
    assert table.schema.equals(NODE_SCHEMA)
    assert etfile.table_metadata(table) == META
    assert table.schema.metadata[etfile.SOURCE_KEY] == str(tmp_path / "a.et").encode()
    assert read_metadata(str(tmp_path / "a.et")) == META


def test_empty_metadata_message_is_accepted(tmp_path):
    """Fact 1.1: a zero-length GlobalMetadata is valid (Python tools' decodeMessage returns False on it)."""
    (tmp_path / "a.et").write_bytes(b"\x00" + eb.frame(eb.node(3, "x", 4).SerializeToString()))
    table = read_table(str(tmp_path / "a.et"))
    assert table.column("id").to_pylist() == [3]
    assert etfile.table_metadata(table) == pb.GlobalMetadata()
    write_table(table, str(tmp_path / "b.et"))
    assert (tmp_path / "b.et").read_bytes() == (tmp_path / "a.et").read_bytes()


def test_zero_length_node_is_a_node(tmp_path):
    """A node with every field at its default is an empty message (length 0), not the end of the file."""
    data = eb.et_bytes(META, [pb.Node(), eb.node(5, "after", 4), pb.Node()])
    assert data.count(b"\x00") >= 2
    (tmp_path / "a.et").write_bytes(data)
    table = read_table(str(tmp_path / "a.et"))
    assert table.column("id").to_pylist() == [0, 5, 0]
    assert [n.id for n in iter_nodes(str(tmp_path / "a.et"))] == [0, 5, 0]
    write_table(table, str(tmp_path / "b.et"))
    assert (tmp_path / "b.et").read_bytes() == data


def test_writer_counts_and_batches(tmp_path):
    eb.write_et(tmp_path / "a.et", META, [eb.node(i, str(i), 4) for i in range(10)])
    table = read_table(str(tmp_path / "a.et"))
    with ETWriter(str(tmp_path / "b.et"), META) as writer:
        writer.write_table(table.slice(0, 4))
        writer.write_batch(table.slice(4).to_batches()[0])
        assert writer.nodes_written == 10
    assert (tmp_path / "b.et").read_bytes() == (tmp_path / "a.et").read_bytes()
    with ETWriter(str(tmp_path / "c.et")) as writer:  # no metadata: an empty message
        pass
    assert (tmp_path / "c.et").read_bytes() == b"\x00"
    assert read_table(str(tmp_path / "c.et")).num_rows == 0


def test_write_messages_and_iter_nodes(tmp_path):
    nodes = eb.coverage_nodes()
    assert write_messages(str(tmp_path / "a.et"), META, nodes) == len(nodes)
    assert (tmp_path / "a.et").read_bytes() == eb.et_bytes(META, nodes)
    assert list(iter_nodes(str(tmp_path / "a.et"))) == nodes
    assert write_messages(str(tmp_path / "b.et.gz"), META, iter(nodes)) == len(nodes)
    assert gzip.decompress((tmp_path / "b.et.gz").read_bytes()) == eb.et_bytes(META, nodes)
    assert list(iter_nodes(str(tmp_path / "b.et.gz"))) == nodes


def test_open_binary_gzip_by_magic_and_suffix(tmp_path):
    with open_binary(str(tmp_path / "x.gz"), "wb") as f:
        f.write(b"hello")
    assert (tmp_path / "x.gz").read_bytes()[:2] == b"\x1f\x8b"
    with open_binary(str(tmp_path / "x.gz")) as f:
        assert f.read() == b"hello"
    with open_binary(str(tmp_path / "plain.et"), "wb") as f:
        f.write(b"\x1f")  # a single magic byte is not gzip
    with open_binary(str(tmp_path / "plain.et")) as f:
        assert f.read() == b"\x1f"
    (tmp_path / "gz.bin").write_bytes(gzip.compress(b"abc"))
    with open_binary(str(tmp_path / "gz.bin")) as f:
        assert f.read() == b"abc"


def test_concatenated_gzip_members(tmp_path):
    """gzip readers accept multi-member files (e.g. `cat a.gz b.gz`); so does the ET reader."""
    data = eb.et_bytes(META, [eb.node(i, "n", 4) for i in range(20)])
    (tmp_path / "m.et.gz").write_bytes(gzip.compress(data[:37]) + gzip.compress(data[37:]))
    assert [n.id for n in iter_nodes(str(tmp_path / "m.et.gz"))] == list(range(20))
    write_table(read_table(str(tmp_path / "m.et.gz")), str(tmp_path / "out.et"))
    assert (tmp_path / "out.et").read_bytes() == data


@pytest.mark.slow
def test_threaded_decoding_same_as_sequential(tmp_path):
    """Enough nodes for the decoder to split a chunk across threads: same batches, same bytes."""
    nodes = [eb.node(i, f"n{i}", 4, [eb.attr("comm_size", "int64_val", i), eb.attr(f"a{i % 5}", "int32_val", -i)],
                     data_deps=[i - 1] if i else []) for i in range(40000)]
    original = eb.write_et(tmp_path / "a.et", META, nodes)
    outputs = []
    for threads in (1, 4):
        with ETReader(str(tmp_path / "a.et")) as reader:
            batches = list(reader.iter_batches(threads=threads))
        assert sum(b.num_rows for b in batches) == len(nodes)
        with ETWriter(str(tmp_path / f"t{threads}.et"), META) as writer:
            for b in batches:
                writer.write_batch(b)
        outputs.append((tmp_path / f"t{threads}.et").read_bytes())
    assert outputs[0] == outputs[1] == original


def test_threaded_decoding_reports_first_error(tmp_path):
    nodes = [eb.node(i, f"n{i}", 4) for i in range(40000)]
    data = bytearray(eb.et_bytes(META, nodes))
    offsets = eb.frame_offsets(bytes(data))
    for k in (30000, 10000):  # two bad nodes; the error is the one earlier in the file
        data[offsets[k + 1] + 1] = 0x00  # tag of field 0
    (tmp_path / "bad.et").write_bytes(bytes(data))
    for threads in (1, 4):
        with ETReader(str(tmp_path / "bad.et")) as reader:
            with pytest.raises(etfile.ChakraFormatError) as info:
                for _ in reader.iter_batches(threads=threads):
                    pass
        assert info.value.offset == offsets[10001] + 1 and info.value.node_index == 10000


# ------------------------------------------------------------------ streaming memory


STREAM_SCRIPT = textwrap.dedent("""
    import json, resource, sys
    from chakra_core.format.etfile import ETReader

    def peak():
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    path, batch_nodes = sys.argv[1], int(sys.argv[2])
    with ETReader(path) as reader:  # warm up: lazy imports, first allocations
        next(reader.iter_batches(batch_nodes=64))
    with ETReader(path) as reader:
        before = peak()
        rows = 0
        for batch in reader.iter_batches(batch_nodes=batch_nodes):
            rows += batch.num_rows  # and drop it
    print(json.dumps({"rows": rows, "growth": peak() - before}))
""")


def _big_file(path, target_bytes: int) -> tuple[int, int]:
    """A file of about target_bytes: one encoded run of nodes repeated. Returns (size, nodes)."""
    nodes = [eb.node(i, f"node_{i}_" + "n" * (i % 40), 4 + i % 4,
                     [eb.attr("comm_size", "int64_val", i * 1024), eb.attr("is_cpu_op", "bool_val", False),
                      eb.attr("op", "string_val", "aten::mm" * (i % 3)), eb.attr("shape", "int64_list", [i, 2, 3])],
                     data_deps=[i - 1, i - 2] if i > 1 else [], dur=i, inputs=("[1]", "[[2, 3]]", "['Tensor']"))
             for i in range(4096)]
    block = eb.et_bytes(META, nodes)[len(eb.frame(META.SerializeToString())):]
    repeat = max(1, target_bytes // len(block))
    with open(path, "wb") as f:
        f.write(eb.frame(META.SerializeToString()))
        for _ in range(repeat):
            f.write(block)
    return path.stat().st_size, repeat * len(nodes)


def _stream(path, batch_nodes: int) -> dict:
    proc = subprocess.run([sys.executable, "-c", STREAM_SCRIPT, str(path), str(batch_nodes)], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.slow
def test_streaming_memory_stays_bounded(tmp_path):
    """Reading a ~200 MB trace batch by batch: peak RSS grows by a small, size-independent amount."""
    big, small = tmp_path / "big.et", tmp_path / "small.et"
    big_size, big_nodes = _big_file(big, 200 << 20)
    small_size, small_nodes = _big_file(small, 40 << 20)
    assert big_size > 190 << 20
    batch_nodes = 16384
    big_run, small_run = _stream(big, batch_nodes), _stream(small, batch_nodes)
    assert (big_run["rows"], small_run["rows"]) == (big_nodes, small_nodes)
    mib = 1 << 20
    # about two read chunks plus a few batches, nothing like the file (or its ~3x larger table)
    assert big_run["growth"] < big_size // 2, f"peak RSS grew {big_run['growth'] / mib:.0f} MiB for a " \
                                              f"{big_size / mib:.0f} MiB file"
    # and it does not grow with the file: 5x the bytes, about the same memory
    assert big_run["growth"] < small_run["growth"] + 32 * mib, (big_run, small_run)


def test_iter_batches_starts_over_on_each_call(tmp_path, monkeypatch):
    monkeypatch.setattr(etfile, "READ_CHUNK_BYTES", 64)
    nodes = [eb.node(i, f"n{i}", 4) for i in range(50)]
    original = eb.write_et(tmp_path / "a.et", META, nodes)
    for name in ("a.et", "a.et.gz"):
        if name.endswith(".gz"):
            eb.write_et(tmp_path / name, META, nodes)
        with ETReader(str(tmp_path / name)) as reader:
            partial = reader.iter_batches(batch_nodes=7)
            next(partial)
            next(partial)  # the file position is now well past the first nodes
            table = reader.read_table()
            assert table.column("id").to_pylist() == list(range(50))
            again = [b for b in reader.iter_batches(batch_nodes=50)]
            assert sum(b.num_rows for b in again) == 50
        write_table(table, str(tmp_path / "out.et"))
        assert (tmp_path / "out.et").read_bytes() == original


def test_small_file_reads_fast(tmp_path):
    """A tiny trace does not pay for a chunk-sized buffer (many small files are common: one per rank)."""
    import time

    eb.write_et(tmp_path / "a.et", META, [eb.node(1, "x", 7)])
    read_table(str(tmp_path / "a.et"))
    t0 = time.perf_counter()
    for _ in range(200):
        read_table(str(tmp_path / "a.et"))
    assert (time.perf_counter() - t0) / 200 < 0.01


# ------------------------------------------------------------------ decoding threads: guessed starts


def _threads_agree(path, threads=(1, 2, 4), batch_nodes=65536):
    """Batches of every thread count hold the same rows; returns the one-thread table."""
    tables = []
    for t in threads:
        with ETReader(str(path)) as reader:
            tables.append(pa.Table.from_batches(list(reader.iter_batches(batch_nodes=batch_nodes, threads=t))))
    for other in tables[1:]:
        assert other.equals(tables[0])
    return tables[0]


def test_threads_start_where_the_data_only_looks_like_a_message(tmp_path):
    """A later thread starts at a guessed message boundary; names made of fake length-prefixed
    messages (that look like nodes) must not fool it: the result is the one-thread result."""
    fake = "\x05\x08\x01\x12\x01a"  # a 5-byte "message" starting like a node (with its id), repeated
    nodes = [eb.node(i, fake * (150 + i % 40) if i % 5 else f"n{i}", 4,
                     [eb.attr("rf_id", "int64_val", i)], data_deps=[i - 1]) for i in range(1, 6001)]
    original = eb.write_et(tmp_path / "a.et", META, nodes)
    assert len(original) > 4 << 20
    table = _threads_agree(tmp_path / "a.et")
    assert table.column("id").to_pylist() == list(range(1, 6001))
    with ETWriter(str(tmp_path / "b.et"), META) as writer:
        writer.write_table(table)
    assert (tmp_path / "b.et").read_bytes() == original


def test_threads_on_a_large_file_of_mixed_nodes(tmp_path):
    """Enough bytes for every thread to start at a guessed boundary: same rows, same bytes,
    with small batches too (a thread that fills its batch before the next start ends the run)."""
    nodes = [eb.node(i, f"node_{i}_" + "x" * (i % 200), 4 + i % 4,
                     [eb.attr("comm_size", "int64_val", i), eb.attr("op", "string_val", "y" * (i % 90))],
                     data_deps=[i - 1] if i else [], inputs=("[1]", "[[2, 3]]", "['T']") if i % 3 else None)
             for i in range(30000)]
    original = eb.write_et(tmp_path / "a.et", META, nodes)
    assert len(original) > 5 << 20
    for batch_nodes in (65536, 5000):
        table = _threads_agree(tmp_path / "a.et", batch_nodes=batch_nodes)
        assert table.num_rows == 30000
    with ETWriter(str(tmp_path / "b.et"), META) as writer:
        writer.write_table(table)
    assert (tmp_path / "b.et").read_bytes() == original


@pytest.mark.parametrize("where", [0.7, 0.95])
def test_threads_report_an_error_past_a_guessed_start(tmp_path, where):
    """An error in a run that began at a guessed boundary: the same error (message, offset,
    node index, node id) as one thread reports, its node counted from the file's start."""
    nodes = [eb.node(i, f"n{i}" + "z" * (i % 300), 4, [eb.attr("rf_id", "int64_val", i)]) for i in range(20000)]
    data = bytearray(eb.et_bytes(META, nodes))
    payloads = [payload for _, payload, _ in eb._frames(bytes(data))]
    k = int(len(nodes) * where)
    data[payloads[k + 1]] = 0x00  # the first tag of node k: field 0
    (tmp_path / "bad.et").write_bytes(bytes(data))
    assert len(data) > 3 << 20
    seen = [(str(e), e.offset, e.node_index, e.node_id) for e in _errors_with_1_2_4_threads(tmp_path / "bad.et")]
    assert seen[0][1:4] == (payloads[k + 1], k, None)
    assert seen[1] == seen[0] and seen[2] == seen[0]


def test_threads_report_a_truncated_file(tmp_path):
    nodes = [eb.node(i, f"n{i}" + "z" * (i % 300), 4) for i in range(20000)]
    data = eb.et_bytes(META, nodes)
    (tmp_path / "cut.et").write_bytes(data[:-7])
    seen = [(str(e), e.offset, e.node_index) for e in _errors_with_1_2_4_threads(tmp_path / "cut.et")]
    assert seen[1] == seen[0] and seen[2] == seen[0]
    assert "truncated" in seen[0][0] and seen[0][2] == 19999


def _errors_with_1_2_4_threads(path) -> list:
    """The ChakraFormatError a full read raises with 1, 2 and 4 decoding threads."""
    errors = []
    for threads in (1, 2, 4):
        with ETReader(str(path)) as reader:
            with pytest.raises(etfile.ChakraFormatError) as info:
                for _ in reader.iter_batches(threads=threads):
                    pass
        errors.append(info.value)
    return errors


def test_decoded_buffers_return_to_the_pool(tmp_path):
    """Column buffers of dropped batches are kept for reuse (up to the pool's limit) and the
    pool can be emptied; reading again gives the same table."""
    from chakra_core.format import codec

    nodes = [eb.node(i, f"n{i}" + "z" * (i % 300), 4, [eb.attr("rf_id", "int64_val", i)]) for i in range(20000)]
    eb.write_et(tmp_path / "a.et", META, nodes)
    blocks, held, keep = codec._etcodec.pool()
    try:
        first = read_table(str(tmp_path / "a.et"))
        expected = first.to_pylist()
        del first
        blocks, held, _ = codec._etcodec.pool()
        assert blocks > 0 and held > 0
        assert read_table(str(tmp_path / "a.et")).to_pylist() == expected
        assert codec._etcodec.pool(0)[:2] == (0, 0)
        assert read_table(str(tmp_path / "a.et")).to_pylist() == expected  # nothing kept: fresh memory
    finally:
        codec._etcodec.pool(keep)
