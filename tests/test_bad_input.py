"""Bad input gives a ChakraFormatError that names the file, the byte offset and what is wrong.

Never another exception type, never a crash: truncations, flipped bytes, random bytes,
other formats, damaged gzip, invalid UTF-8, missing files.
"""

from __future__ import annotations

import gzip
import random
import zlib
from pathlib import Path

import et_builders as eb
import fsspec
import pytest
from datapaths import PYTORCH_ET
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chakra_core import ChakraFormatError
from chakra_core.format import etfile
from chakra_core.format.etfile import (
    ETReader,
    iter_nodes,
    read_metadata,
    read_table,
    write_table,
)
from chakra_core.format.schema import et_def_pb2 as pb

PYTORCH_JSON = PYTORCH_ET / "allgather_2ranks.rank0.et.json"
PYTORCH_JSON_GZ = PYTORCH_ET / "resnet_ddp.rank0.et.json.gz"

META = eb.metadata("0.0.4", [eb.attr("schema", "string_val", "1.0.2-chakra.0.0.4")])
SMALL = eb.node(1, "abc", 4)  # 08 01 12 03 'abc' 18 04
LARGE = eb.node(2, "x" * 200, 7, [eb.attr("comm_size", "int64_val", 1 << 20)])  # length prefix is 2 bytes


def _file(tmp_path: Path, data: bytes, name: str = "bad.et") -> str:
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


def _every_reader(url: str) -> list[ChakraFormatError]:
    """The error each reading API raises on the file (they must all raise one)."""
    errors = []
    for read in (read_table, lambda u: list(iter_nodes(u)), _batches_tiny):
        with pytest.raises(ChakraFormatError) as info:
            read(url)
        errors.append(info.value)
    return errors


def _batches_tiny(url: str) -> list:
    with ETReader(url) as reader:
        return list(reader.iter_batches(batch_nodes=1))


def _check(err: ChakraFormatError, url: str, offset: int, *words: str) -> None:
    text = str(err)
    assert err.path == url and url in text
    assert err.offset == offset, text
    assert f"byte {offset}" in text
    for word in words:
        assert word.lower() in text.lower(), text


def _valid() -> bytes:
    return eb.et_bytes(META, [SMALL, LARGE, SMALL])


# ------------------------------------------------------------------ truncation


def test_truncated_inside_metadata(tmp_path):
    data = _valid()
    meta_len = len(META.SerializeToString())
    for cut in (1, 2, meta_len // 2, meta_len):  # inside the metadata message (1-byte prefix)
        url = _file(tmp_path, data[:cut])
        err = pytest.raises(ChakraFormatError, read_table, url).value
        _check(err, url, 0, "truncated", "metadata")
        assert err.node_index is None


def test_truncated_inside_metadata_length_prefix(tmp_path):
    meta = eb.metadata("v" * 300)  # a 2-byte length prefix
    url = _file(tmp_path, eb.et_bytes(meta, [])[:1])
    _check(pytest.raises(ChakraFormatError, read_table, url).value, url, 0, "truncated", "length prefix")


def test_truncated_inside_node_length_prefix(tmp_path):
    data = _valid()
    offsets = eb.frame_offsets(data)
    large_at = offsets[2]
    assert data[large_at] & 0x80  # two-byte prefix
    url = _file(tmp_path, data[:large_at + 1])
    for err in _every_reader(url):
        _check(err, url, large_at, "truncated")
    err = pytest.raises(ChakraFormatError, read_table, url).value
    assert "length prefix" in str(err)
    assert err.node_index == 1


def test_truncated_inside_node(tmp_path):
    data = _valid()
    offsets = eb.frame_offsets(data)
    for k, cut_into in ((1, 3), (2, 50), (3, 1), (3, len(SMALL.SerializeToString()))):
        start = offsets[k]
        url = _file(tmp_path, data[:start + cut_into])
        for err in _every_reader(url):
            _check(err, url, start, "truncated")
        err = pytest.raises(ChakraFormatError, read_table, url).value
        assert err.node_index == k - 1
        assert "declares" in str(err) and "remain" in str(err)


def test_truncated_at_message_boundaries_is_valid(tmp_path):
    data = _valid()
    for n, boundary in enumerate(eb.frame_offsets(data)[1:] + [len(data)]):
        url = _file(tmp_path, data[:boundary])
        assert read_table(url).num_rows == n


def test_truncated_inside_node_with_tiny_chunks(tmp_path, monkeypatch):
    monkeypatch.setattr(etfile, "READ_CHUNK_BYTES", 5)
    data = _valid()
    start = eb.frame_offsets(data)[2]
    url = _file(tmp_path, data[:start + 20])
    _check(pytest.raises(ChakraFormatError, read_table, url).value, url, start, "truncated")


# ------------------------------------------------------------------ corrupt bytes


def test_length_prefix_too_short(tmp_path):
    """A node length that cuts a field in half: the error points at the field that overruns."""
    data = bytearray(_valid())
    start = eb.frame_offsets(bytes(data))[1]
    payload = SMALL.SerializeToString()
    assert payload == b"\x08\x01\x12\x03abc\x18\x04" and data[start] == len(payload)
    data[start] = 5  # the name "abc" now runs past the end of the message
    url = _file(tmp_path, bytes(data))
    err = pytest.raises(ChakraFormatError, read_table, url).value
    _check(err, url, start + 1 + 3, "node name", "overruns")  # at the name's length byte
    assert err.node_index == 0 and err.node_id == 1
    assert "node id 1" in str(err)
    # the protobuf reader reports the message
    err = pytest.raises(ChakraFormatError, lambda: list(iter_nodes(url))).value
    assert err.offset == start


def test_length_prefix_overlong(tmp_path):
    data = _valid()
    start = eb.frame_offsets(data)[1]
    bad = data[:start] + b"\xff" * 11 + data[start + 1:]
    url = _file(tmp_path, bad)
    for err in _every_reader(url):
        _check(err, url, start, "length prefix")
    huge = data[:start] + eb.encode_varint(1 << 40) + data[start + 1:]
    url = _file(tmp_path, huge, "huge.et")
    err = pytest.raises(ChakraFormatError, read_table, url).value
    _check(err, url, start, "length prefix")


def test_metadata_length_prefix_corrupt(tmp_path):
    data = _valid()
    url = _file(tmp_path, b"\xff" * 11 + data[1:])
    _check(pytest.raises(ChakraFormatError, read_table, url).value, url, 0, "length prefix", "metadata")
    url = _file(tmp_path, bytes([data[0] + 40]) + data[1:], "long.et")  # metadata swallows the nodes
    err = pytest.raises(ChakraFormatError, read_table, url).value
    assert err.offset == 0 and "metadata" in str(err)


def test_flipped_tag_wire_type(tmp_path):
    data = bytearray(_valid())
    start = eb.frame_offsets(bytes(data))[1]
    type_tag = start + 1 + 7  # 08 01 12 03 a b c | 18 04
    assert data[type_tag] == 0x18
    data[type_tag] = 0x1B  # field 3 with wire type 3 (a group: not in this schema)
    url = _file(tmp_path, bytes(data))
    err = pytest.raises(ChakraFormatError, read_table, url).value
    _check(err, url, type_tag, "wire type 3")
    assert err.node_id == 1 and err.node_index == 0
    err = pytest.raises(ChakraFormatError, lambda: list(iter_nodes(url))).value
    assert err.offset == start


def test_flipped_tag_field_zero(tmp_path):
    data = bytearray(_valid())
    start = eb.frame_offsets(bytes(data))[3]  # the third node
    data[start + 1] = 0x00  # tag of field 0
    url = _file(tmp_path, bytes(data))
    err = pytest.raises(ChakraFormatError, read_table, url).value
    _check(err, url, start + 1, "field number 0")
    assert err.node_index == 2


def test_bad_attribute_bytes(tmp_path):
    good = eb.attr("comm_size", "int64_val", 5).SerializeToString()
    cases = {
        "attribute has field 40": good + b"\xc0\x02\x01",  # field 40 is not in AttributeProto
        "wire type": good.replace(b"\x48\x05", b"\x4d\x05\x00\x00\x00"),  # int64_val as fixed32
    }
    for words, body in cases.items():
        node = b"\x08\x07" + b"\x52" + bytes([len(body)]) + body
        url = _file(tmp_path, eb.et_bytes(META, [node]))
        start = eb.frame_offsets(eb.et_bytes(META, [node]))[1]
        err = pytest.raises(ChakraFormatError, read_table, url).value
        assert err.offset is not None and start < err.offset < start + 1 + len(node)
        assert words in str(err) and err.node_id == 7


def test_random_bytes(tmp_path):
    for seed in range(20):
        rng = random.Random(seed)
        data = bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 4000)))
        url = _file(tmp_path, data, f"random{seed}.et")
        err = pytest.raises(ChakraFormatError, read_table, url).value
        assert url in str(err) and "byte" in str(err)


def test_garbage_after_valid_nodes(tmp_path):
    data = _valid()
    url = _file(tmp_path, data + b"\x05\x08")
    err = pytest.raises(ChakraFormatError, read_table, url).value
    _check(err, url, len(data), "truncated")
    assert err.node_index == 3


# ------------------------------------------------------------------ other formats, empty, missing


def test_empty_file(tmp_path):
    url = _file(tmp_path, b"")
    for read in (read_table, read_metadata, lambda u: list(iter_nodes(u))):
        err = pytest.raises(ChakraFormatError, read, url).value
        assert "empty" in str(err) and url in str(err)


def test_empty_gzip_file(tmp_path):
    url = _file(tmp_path, gzip.compress(b""), "empty.et.gz")
    assert "empty" in str(pytest.raises(ChakraFormatError, read_table, url).value)


def test_json_file(tmp_path):
    for text in ('{"schema": "1.0.2-chakra.0.0.4", "nodes": []}', '  \n[{"id": 1}]', "{}"):
        url = _file(tmp_path, text.encode(), "trace.et")
        err = pytest.raises(ChakraFormatError, read_table, url).value
        assert "JSON" in str(err) and url in str(err)


@pytest.mark.parametrize("path", [PYTORCH_JSON, PYTORCH_JSON_GZ], ids=["json", "json.gz"])
def test_pytorch_trace_passed_as_et(path):
    err = pytest.raises(ChakraFormatError, read_table, str(path)).value
    assert "JSON" in str(err) and str(path) in str(err)


@pytest.mark.parametrize("size", [91, 123])
def test_et_starting_like_json_is_read(tmp_path, size):
    """A metadata of 91 or 123 bytes makes the file start with "[" or "{": still a valid ET."""
    meta = eb.metadata("v" * (size - 2))
    payload = meta.SerializeToString()
    assert len(payload) == size and chr(eb.frame(payload)[0]) in "[{"
    original = eb.write_et(tmp_path / "a.et", meta, [SMALL])
    table = read_table(str(tmp_path / "a.et"))
    assert etfile.table_metadata(table) == meta
    write_table(table, str(tmp_path / "b.et"))
    assert (tmp_path / "b.et").read_bytes() == original


def test_et_starting_with_whitespace_bytes_is_read(tmp_path):
    for size in (9, 10, 11, 12, 13, 32):  # \t \n \v \f \r and space as the first byte
        meta = eb.metadata("v" * (size - 2))
        eb.write_et(tmp_path / "a.et", meta, [SMALL])
        assert etfile.table_metadata(read_table(str(tmp_path / "a.et"))) == meta


def test_missing_file(tmp_path):
    for url in (str(tmp_path / "nope.et"), str(tmp_path / "no" / "dir.et"), (tmp_path / "x.et.gz").as_uri(),
                "memory://does/not/exist.et"):
        for read in (read_table, read_metadata, lambda u: list(iter_nodes(u)), ETReader):
            err = pytest.raises(ChakraFormatError, read, url).value
            assert "no such file" in str(err) and url in str(err)


def test_directory_is_not_a_trace(tmp_path):
    with pytest.raises(ChakraFormatError):
        read_table(str(tmp_path))


# ------------------------------------------------------------------ damaged gzip


def _gzipped_trace(n_nodes: int = 2000) -> tuple[bytes, bytes]:
    nodes = [eb.node(i, f"node {i} " + "pad" * (i % 17), 4, [eb.attr("comm_size", "int64_val", i * 7919)])
             for i in range(n_nodes)]
    raw = eb.et_bytes(META, nodes)
    return raw, gzip.compress(raw)


def test_truncated_gzip(tmp_path):
    raw, gz = _gzipped_trace()
    for cut in (3, 12, 40, len(gz) // 2, len(gz) - 4):  # header, metadata, mid-stream, trailer
        url = _file(tmp_path, gz[:cut], "cut.et.gz")
        for err in _every_reader(url):
            assert url in str(err)
            assert not isinstance(err.__cause__, (EOFError, zlib.error))


def test_corrupt_gzip_stream(tmp_path):
    raw, gz = _gzipped_trace()
    for at in (15, 30, len(gz) // 3, len(gz) // 2, len(gz) - 6):  # deflate data, then the CRC
        data = bytearray(gz)
        for k in range(4):
            data[at + k] ^= 0x5A
        url = _file(tmp_path, bytes(data), "corrupt.et.gz")
        try:
            table = read_table(url)
        except ChakraFormatError as err:
            assert url in str(err)
        else:  # a flip that still inflates must then fail the gzip CRC check, or give the same data
            pytest.fail(f"corrupt gzip at {at} was read as {table.num_rows} nodes")


def test_corrupt_gzip_via_iter_nodes(tmp_path, monkeypatch):
    raw, gz = _gzipped_trace()
    data = bytearray(gz)
    data[len(gz) // 2] ^= 0xFF
    url = _file(tmp_path, bytes(data), "corrupt.et.gz")
    monkeypatch.setattr(etfile, "READ_CHUNK_BYTES", 1000)
    _every_reader(url)


# ------------------------------------------------------------------ invalid UTF-8


def test_invalid_utf8_node_name(tmp_path):
    node = b"\x08\x03\x12\x02\xff\xfe\x18\x04"
    data = eb.et_bytes(META, [SMALL, node])
    start = eb.frame_offsets(data)[2]
    url = _file(tmp_path, data)
    err = pytest.raises(ChakraFormatError, read_table, url).value
    _check(err, url, start + 1 + 4, "node name", "UTF-8")  # offset of the name bytes
    assert err.node_index == 1 and err.node_id == 3
    err = pytest.raises(ChakraFormatError, lambda: list(iter_nodes(url))).value
    assert err.offset == start


@pytest.mark.parametrize("bad", [b"\xc0\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"a\xe2\x82"],
                         ids=["overlong", "surrogate", "above-max", "cut-off"])
def test_invalid_utf8_strings(tmp_path, bad):
    """Every string field: attribute name, doc, string_val, string_list, IOInfo."""
    def ld(field: int, body: bytes) -> bytes:
        return eb.encode_varint(field << 3 | 2) + eb.encode_varint(len(body)) + body

    attrs = [ld(1, bad) + b"\x48\x01", ld(1, b"a") + ld(2, bad) + b"\x48\x01", ld(1, b"a") + ld(29, bad),
             ld(1, b"a") + ld(30, ld(1, b"ok") + ld(1, bad))]
    nodes = [b"\x08\x01" + ld(10, a) for a in attrs] + [b"\x08\x01" + ld(8, ld(2, bad)), b"\x08\x01" + ld(9, ld(3, bad))]
    for node in nodes:
        url = _file(tmp_path, eb.et_bytes(META, [node]))
        err = pytest.raises(ChakraFormatError, read_table, url).value
        assert "UTF-8" in str(err) and err.offset is not None
    # bytes_val takes any bytes
    url = _file(tmp_path, eb.et_bytes(META, [b"\x08\x01" + ld(10, ld(1, b"a") + ld(31, bad))]))
    assert read_table(url).num_rows == 1


def test_invalid_utf8_in_metadata(tmp_path):
    url = _file(tmp_path, eb.frame(b"\x0a\x02\xff\xfe") + eb.frame(SMALL.SerializeToString()))
    err = pytest.raises(ChakraFormatError, read_table, url).value
    assert err.offset == 0 and "metadata" in str(err)


def test_metadata_with_unknown_fields_is_refused(tmp_path):
    url = _file(tmp_path, eb.frame(b"\x0a\x01v" + b"\x18\x01") + eb.frame(SMALL.SerializeToString()))
    err = pytest.raises(ChakraFormatError, read_table, url).value
    assert "metadata" in str(err) and err.offset == 0


# ------------------------------------------------------------------ property: mutations never crash


def _mutation_base() -> bytes:
    return eb.et_bytes(META, eb.coverage_nodes()[:8] + [SMALL, LARGE])


_BASE = _mutation_base()

mutation = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, len(_BASE) - 1), st.integers(1, 255)),
    st.tuples(st.just("set"), st.integers(0, len(_BASE) - 1), st.integers(0, 255)),
    st.tuples(st.just("cut"), st.integers(0, len(_BASE)), st.just(0)),
    st.tuples(st.just("insert"), st.integers(0, len(_BASE)), st.integers(0, 255)),
    st.tuples(st.just("delete"), st.integers(0, len(_BASE) - 1), st.integers(1, 16)),
)


def _mutate(data: bytes, mutations) -> bytes:
    out = bytearray(data)
    for op, at, arg in mutations:
        at = min(at, len(out))
        if op == "flip" and at < len(out):
            out[at] ^= arg
        elif op == "set" and at < len(out):
            out[at] = arg
        elif op == "cut":
            del out[at:]
        elif op == "insert":
            out[at:at] = bytes([arg])
        elif op == "delete":
            del out[at:at + arg]
    return bytes(out)


def _read_all_ways(url: str) -> None:
    """Decodes (table, small batches, protobuf view); if it decodes, it must also write."""
    try:
        table = read_table(url)
    except ChakraFormatError as err:
        assert url in str(err)
    else:
        write_table(table, "memory://mut/out.et")
    try:
        with ETReader(url) as reader:
            for _ in reader.iter_batches(batch_nodes=2):
                pass
    except ChakraFormatError:
        pass
    try:
        for _ in iter_nodes(url):
            pass
    except ChakraFormatError:
        pass


@pytest.mark.slow
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(mutation, min_size=1, max_size=4))
def test_property_mutated_files_decode_or_raise_format_error(mutations):
    fs = fsspec.filesystem("memory")
    fs.pipe("memory://mut/in.et", _mutate(_BASE, mutations))
    _read_all_ways("memory://mut/in.et")


_GZ_BASE = gzip.compress(_BASE)


@pytest.mark.slow
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(["flip", "cut", "delete", "insert"]), st.integers(0, len(_GZ_BASE)),
                          st.integers(1, 255)), min_size=1, max_size=3))
def test_property_mutated_gzip_decode_or_raise_format_error(mutations):
    fs = fsspec.filesystem("memory")
    fs.pipe("memory://mut/in.et.gz", _mutate(_GZ_BASE, mutations))
    _read_all_ways("memory://mut/in.et.gz")


def test_random_nodes_never_crash(tmp_path):
    """Random payloads inside valid framing: every node decodes or raises ChakraFormatError."""
    rng = random.Random(1234)
    for i in range(300):
        payload = bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 40)))
        url = _file(tmp_path, eb.et_bytes(META, [SMALL, payload]), "r.et")
        try:
            table = read_table(url)
        except ChakraFormatError as err:
            assert err.node_index == 1 and err.offset is not None
        else:
            write_table(table, str(tmp_path / "w.et"))
            expected = pb.Node()
            expected.ParseFromString(payload)  # protobuf accepts what the codec accepts
            _, (_, got) = eb.parse_et((tmp_path / "w.et").read_bytes())
            assert got.id == expected.id and got.name == expected.name and list(got.data_deps) == list(
                expected.data_deps)


# ------------------------------------------------------------------ nothing dropped in silence
def _job_folder(tmp_path: Path, *extra: str) -> Path:
    """A two-rank PyTorch job (the recorded allgather run's rank 0, twice) plus files named `extra`."""
    folder = tmp_path / "job"
    folder.mkdir()
    for name in ("rank0.et.json", "rank1.et.json", *extra):
        (folder / name).write_bytes(PYTORCH_JSON.read_bytes())
    return folder


@pytest.mark.parametrize("odd", ["rank-1.et.json", "rank1e3.et.json", "rank01x.kineto.json", "Rank2.et.json.gz"])
def test_a_rank_file_name_that_does_not_parse_is_an_error_naming_it(tmp_path, odd):
    from chakra_core.convert.pytorch.discover import JobInputError, find_ranks

    with pytest.raises(JobInputError, match=rf"{odd.replace('.', chr(92) + '.')}: not rank<R>\.et\.json"):
        find_ranks(str(_job_folder(tmp_path, odd)), str(tmp_path))


def test_other_files_of_a_job_folder_are_noted_not_ignored(tmp_path):
    from chakra_core.convert.pytorch.discover import find_ranks

    folder = _job_folder(tmp_path, "notes.txt", "rank7.kineto.json")
    (folder / "sub").mkdir()
    inputs = find_ranks(str(folder), str(tmp_path))
    assert [r.rank for r in inputs.ranks] == [0, 1]
    assert [n.split(":")[0] for n in inputs.notes] == ["notes.txt", "sub/", "rank7.kineto.json"]


@pytest.mark.parametrize("keys, message", [(("0", "00"), "members '0' and '00' both name rank 0"),
                                           (("0", str(10**30)), "rank 1,000,000,000,000,000,000,000,000,000,000 is "
                                                                "beyond any job")])
def test_multi_rank_keys_of_one_rank_or_beyond_any_job_are_refused(tmp_path, keys, message):
    import json

    from chakra_core.convert.pytorch.discover import find_ranks
    from chakra_core.errors import ChakraError

    trace = json.loads(PYTORCH_JSON.read_text())
    path = tmp_path / "multi.json"
    path.write_text(json.dumps({key: trace for key in keys}))
    with pytest.raises(ChakraError, match=message):
        find_ranks(str(path), str(tmp_path))


def test_a_rank_of_ten_to_the_thirty_in_a_file_name_is_one_line(tmp_path):
    from chakra_core import limits
    from chakra_core.convert.pytorch.discover import find_ranks

    with pytest.raises(limits.LimitExceeded, match="rank 1,000,000,000,000,000,000,000,000,000,000 is beyond"):
        find_ranks(str(_job_folder(tmp_path, f"rank{10**30}.et.json")), str(tmp_path))


def test_a_file_of_two_json_documents_is_refused_at_the_second(tmp_path):
    from chakra_core.convert.pytorch.et import read_host_trace

    one = PYTORCH_JSON.read_bytes()
    path = tmp_path / "two.et.json"
    path.write_bytes(one + b"\n" + one)
    with pytest.raises(ChakraFormatError, match=rf"two\.et\.json: byte {len(one) + 1}: data after the end of the JSON"):
        read_host_trace(str(path))
    path.write_bytes(one + b" \n\t" * 1000)  # trailing white space is fine
    assert read_host_trace(str(path)) is not None


def test_a_job_of_more_ranks_than_the_network_has_npus_is_refused(tmp_path, capsys):
    from chakra_core.cli import main

    ar = Path(__file__).resolve().parents[1] / "datasets" / "astra-sim-microbenchmarks" / "all_reduce" / "8npus_1MB"
    configs = Path(__file__).resolve().parents[1] / "datasets" / "astra-sim-reference" / "configs"
    two = tmp_path / "two.yml"
    two.write_text((configs / "Ring_4npus.yml").read_text().replace("npus_count: [ 4 ]", "npus_count: [ 2 ]"))
    assert "[ 2 ]" in two.read_text()
    assert main(["simulate", "--workload", str(ar / "all_reduce"), "--network", str(two), "--system",
                 str(configs / "Ring_4chunks.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "all_reduce.2.et[.gz] beyond the 2 read" in err, err
