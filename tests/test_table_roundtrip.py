"""ET -> node table -> ET is byte-identical, for real traces and for generated ones.

Generated traces are built with the protobuf classes (tests/et_builders.py), so the C codec
is checked against protobuf's own encoder; "byte-identical" includes the metadata message.
"""

from __future__ import annotations

import gzip
import math

import et_builders as eb
import fsspec
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chakra_core.format import etfile
from chakra_core.format.columns import NODE_SCHEMA, WELL_KNOWN_BY_NAME
from chakra_core.format.etfile import (
    ETReader,
    ETWriter,
    iter_nodes,
    read_table,
    write_table,
)
from chakra_core.format.normalize import normalize_table
from chakra_core.format.schema import et_def_pb2 as pb


def roundtrip_bytes(src: str, dst: str) -> bytes:
    write_table(read_table(src), dst)
    return eb.read_bytes(dst)


def attrs_of(node: pb.Node) -> dict[str, pb.AttributeProto]:
    return {a.name: a for a in node.attr}


# ------------------------------------------------------------------ reference traces


def test_every_microbenchmark_decodes_and_round_trips(microbenchmark_files, tmp_path):
    assert len(microbenchmark_files) >= 40
    for path in microbenchmark_files:
        original = path.read_bytes()
        table = read_table(str(path))
        assert table.num_rows == 1, path
        assert table.schema.equals(NODE_SCHEMA)
        out = tmp_path / path.name
        write_table(table, str(out))
        assert out.read_bytes() == original, path
        # the protobuf view agrees with the table
        meta, nodes = eb.parse_et(original)
        assert meta.version == "0.0.4"
        assert etfile.table_metadata(table) == meta
        assert list(iter_nodes(str(path))) == nodes
        assert table.column("id").to_pylist() == [n.id for n in nodes]
        assert table.column("comm_size").to_pylist() == [1048576]
        assert table.column("is_cpu_op").to_pylist() == [False]
        assert table.column("other_attrs").to_pylist() == [[]]


def test_all_reduce_rank0(microbenchmark_files):
    path = next(p for p in microbenchmark_files if p.as_posix().endswith("all_reduce/4npus_1MB/all_reduce.0.et"))
    table = read_table(str(path))
    assert table.num_rows == 1
    row = table.to_pylist()[0]
    assert row["type"] == pb.COMM_COLL_NODE
    assert row["comm_type"] == 0
    assert row["comm_size"] == 1048576
    assert row["name"] == "all_reduce_4npus_1MB"
    assert etfile.table_metadata(table).version == "0.0.4"
    assert etfile.read_metadata(str(path)).version == "0.0.4"


def test_comm_types_of_microbenchmarks(microbenchmark_files):
    expected = {"all_reduce": 0, "all_gather": 2, "reduce_scatter": 7, "all_to_all": 6}
    for path in microbenchmark_files:
        collective = path.parent.parent.name
        assert read_table(str(path)).column("comm_type").to_pylist() == [expected[collective]], path


# ------------------------------------------------------------------ generated traces, byte-identical


META = eb.metadata("1.0.0", [eb.attr("schema", "string_val", "1.1.1-chakra.1.0.0"), eb.attr("pid", "uint64_val", 7),
                             eb.attr("nested", "int64_list", [1, -2])])


def test_coverage_nodes_round_trip(tmp_path):
    nodes = eb.coverage_nodes()
    src = tmp_path / "cov.et"
    original = eb.write_et(src, META, nodes)
    assert src.read_bytes() == original
    out = roundtrip_bytes(str(src), str(tmp_path / "out.et"))
    assert out == original
    meta, parsed = eb.parse_et(out)
    assert meta == META
    assert [n.SerializeToString() for n in parsed] == [n.SerializeToString() for n in nodes]


def test_every_value_kind_round_trips_alone(tmp_path):
    """One node per (kind, sample value), so a failure names the kind."""
    for i, a in enumerate(eb.all_kind_attrs()):
        original = eb.write_et(tmp_path / "k.et", eb.metadata(), [eb.node(i + 1, a.name, 4, [a])])
        assert roundtrip_bytes(str(tmp_path / "k.et"), str(tmp_path / "k2.et")) == original, a.name


def test_all_thirty_kinds_are_covered():
    kinds = {a.WhichOneof("value") for a in eb.all_kind_attrs()}
    assert kinds == set(eb.ALL_KINDS) and len(kinds) == 30


def test_all_kinds_values_in_table(tmp_path):
    """The decoded values are the protobuf values (not just re-encoded to the same bytes)."""
    attrs = eb.all_kind_attrs()
    eb.write_et(tmp_path / "a.et", eb.metadata(), [eb.node(1, "n", 4, attrs)])
    (row,) = read_table(str(tmp_path / "a.et")).column("other_attrs").to_pylist()
    assert [e["name"] for e in row] == [a.name for a in attrs]
    value_field = {"double_val": "double", "float_val": "float", "bool_val": "bool", "string_val": "string",
                   "bytes_val": "bytes", "double_list": "double_list", "float_list": "float_list",
                   "bool_list": "bool_list", "string_list": "string_list", "bytes_list": "bytes_list"}
    unsigned = {"uint32", "uint64", "fixed32", "fixed64"}
    for entry, a in zip(row, attrs):
        kind = a.WhichOneof("value")
        assert entry["kind"] == kind
        expected = getattr(a, kind)
        if kind.endswith("_list"):
            expected = list(expected.values)
        scalar = kind.rsplit("_", 1)[0]
        field = value_field.get(kind) or (
            ("uint" if scalar in unsigned else "int") + ("_list" if kind.endswith("_list") else ""))
        got = entry[field]
        if kind.startswith(("double", "float")):
            items = got if isinstance(got, list) else [got]
            want = expected if isinstance(expected, list) else [expected]
            assert len(items) == len(want)
            for g, w in zip(items, want):
                assert (math.isnan(g) and math.isnan(w)) or g == w, a.name
        else:
            assert got == expected, a.name
        # every other value field is null
        for other in ("int", "uint", "double", "float", "bool", "string", "bytes", "int_list", "uint_list",
                      "double_list", "float_list", "bool_list", "string_list", "bytes_list"):
            if other != field:
                assert entry[other] is None, (a.name, other)


def test_well_known_kinds_and_misfits(tmp_path):
    nodes = eb.coverage_nodes()
    eb.write_et(tmp_path / "c.et", eb.metadata(), nodes)
    rows = {r["id"]: r for r in read_table(str(tmp_path / "c.et")).to_pylist()}
    odd = rows[5]
    assert (odd["comm_type"], odd["comm_src"], odd["comm_dst"], odd["comm_tag"]) == (7, 3, 2, -5)
    assert (odd["comm_priority"], odd["tensor_size"], odd["num_ops"], odd["tid"]) == (9, 12, (1 << 63) - 1, -2)
    assert odd["other_attrs"] == []
    misfit = rows[6]
    for name in ("is_cpu_op", "comm_size", "tensor_size", "pg_name", "involved_dim", "comm_type", "num_ops",
                 "op_schema"):
        assert misfit[name] is None, name
    extras = {e["name"]: e for e in misfit["other_attrs"]}
    assert extras["comm_size"]["kind"] == "uint64_val" and extras["comm_size"]["uint"] == 1 << 63
    assert extras["is_cpu_op"]["kind"] == "int32_val" and extras["is_cpu_op"]["int"] == 1
    assert extras["tensor_size"]["int"] == -1
    dups = rows[7]
    assert dups["comm_size"] == 1 and dups["is_cpu_op"] is False
    assert [e["name"] for e in dups["other_attrs"]] == ["comm_size", "comm_size", "is_cpu_op", "no_value", "comm_tag",
                                                        "documented", "", "only doc"]
    assert dups["other_attrs"][3]["kind"] is None
    assert dups["other_attrs"][2]["doc_string"] == "d"
    assert rows[0]["name"] == "" and rows[0]["type"] == 0
    assert rows[42]["type"] == 42 and rows[43]["type"] == -1 and rows[44]["type"] == -(1 << 31)
    assert rows[2]["inputs"] == {"values": "", "shapes": "", "types": ""} and rows[4]["inputs"] is None
    assert rows[3]["inputs"] is None and rows[3]["outputs"] == {"values": "", "shapes": "[]", "types": ""}
    assert rows[45]["comm_src"] == -1


def test_uint64_above_int64_in_int_column(tmp_path):
    """comm_size is an int64 column: a uint64 value > int64 max goes to other_attrs and still round trips."""
    big = (1 << 64) - 1
    nodes = [eb.node(1, "big", 7, [eb.attr("comm_type", "int64_val", 0), eb.attr("comm_size", "uint64_val", big)]),
             eb.node(2, "fits", 7, [eb.attr("comm_size", "uint64_val", 5)])]
    original = eb.write_et(tmp_path / "b.et", eb.metadata(), nodes)
    table = read_table(str(tmp_path / "b.et"))
    assert table.column("comm_size").to_pylist() == [None, 5]
    assert table.column("other_attrs").to_pylist()[0][0]["uint"] == big
    assert roundtrip_bytes(str(tmp_path / "b.et"), str(tmp_path / "c.et")) == original


def test_unknown_node_fields_round_trip(tmp_path):
    base = eb.node(5, "future", 4, [eb.attr("comm_size", "int64_val", 3)]).SerializeToString()
    extra = b"\x78\x05" + b"\x82\x01\x03abc" + b"\x8d\x01\x01\x02\x03\x04" + b"\x89\x01" + bytes(8)
    nodes = [base + extra, base, eb.node(6).SerializeToString() + b"\x78\x00"]
    original = eb.et_bytes(eb.metadata(), nodes)
    (tmp_path / "u.et").write_bytes(original)
    table = read_table(str(tmp_path / "u.et"))
    assert table.column("unknown_fields").to_pylist() == [extra, None, b"\x78\x00"]
    assert roundtrip_bytes(str(tmp_path / "u.et"), str(tmp_path / "v.et")) == original
    # protobuf sees the same unknown field
    _, parsed = eb.parse_et(original)
    assert parsed[0].id == 5


def test_unpacked_deps_are_semantically_equal(tmp_path):
    """Unpacked repeated deps are accepted; the writer emits packed, so compare messages, not bytes."""
    payload = b"\x08\x09" + b"\x20\x01\x20\x02" + b"\x28\x03" + b"\x2a\x02\x04\x05" + b"\x28\x06"
    expected = pb.Node(id=9, ctrl_deps=[1, 2], data_deps=[3, 4, 5, 6])
    parsed = pb.Node()
    parsed.ParseFromString(payload)
    assert parsed == expected
    (tmp_path / "p.et").write_bytes(eb.et_bytes(eb.metadata(), [payload]))
    table = read_table(str(tmp_path / "p.et"))
    assert table.column("ctrl_deps").to_pylist() == [[1, 2]]
    assert table.column("data_deps").to_pylist() == [[3, 4, 5, 6]]
    write_table(table, str(tmp_path / "q.et"))
    _, (node,) = eb.parse_et((tmp_path / "q.et").read_bytes())
    assert node == expected
    assert (tmp_path / "q.et").read_bytes() == eb.et_bytes(eb.metadata(), [expected])


def test_unpacked_list_attribute_is_semantically_equal(tmp_path):
    a = b"\x0a\x01x" + b"\x42\x04" + b"\x08\x01\x08\x7f"  # int32_list, values unpacked
    i = b"\x0a\x0cinvolved_dim" + b"\xe2\x01\x04" + b"\x08\x01\x08\x00"  # bool_list, unpacked
    payload = b"\x08\x01" + b"\x52" + bytes([len(a)]) + a + b"\x52" + bytes([len(i)]) + i
    expected = pb.Node()
    expected.ParseFromString(payload)
    assert list(expected.attr[0].int32_list.values) == [1, 127]
    (tmp_path / "p.et").write_bytes(eb.et_bytes(eb.metadata(), [payload]))
    table = read_table(str(tmp_path / "p.et"))
    assert table.column("involved_dim").to_pylist() == [[True, False]]
    write_table(table, str(tmp_path / "q.et"))
    _, (node,) = eb.parse_et((tmp_path / "q.et").read_bytes())
    assert node == expected


def test_metadata_variants_round_trip(tmp_path):
    for meta in (pb.GlobalMetadata(), eb.metadata(""), META, eb.metadata("x", eb.all_kind_attrs("m"))):
        original = eb.write_et(tmp_path / "m.et", meta, [eb.node(1, "a", 4)])
        table = read_table(str(tmp_path / "m.et"))
        assert etfile.table_metadata(table) == meta
        assert roundtrip_bytes(str(tmp_path / "m.et"), str(tmp_path / "n.et")) == original


def test_metadata_only_file(tmp_path):
    original = eb.write_et(tmp_path / "m.et", META, [])
    table = read_table(str(tmp_path / "m.et"))
    assert table.num_rows == 0 and table.schema.equals(NODE_SCHEMA)
    assert roundtrip_bytes(str(tmp_path / "m.et"), str(tmp_path / "n.et")) == original


def test_write_table_with_explicit_metadata(tmp_path):
    eb.write_et(tmp_path / "a.et", META, [eb.node(1, "a", 4)])
    table = read_table(str(tmp_path / "a.et"))
    other = eb.metadata("9.9.9")
    write_table(table, str(tmp_path / "b.et"), metadata=other)
    assert eb.parse_et((tmp_path / "b.et").read_bytes())[0] == other
    write_table(table, str(tmp_path / "c.et"), metadata=other.SerializeToString())
    assert (tmp_path / "c.et").read_bytes() == (tmp_path / "b.et").read_bytes()


# ------------------------------------------------------------------ storage: parquet, gzip, URLs


def test_parquet_round_trip(tmp_path):
    original = eb.write_et(tmp_path / "a.et", META, eb.coverage_nodes())
    table = read_table(str(tmp_path / "a.et"))
    pq.write_table(table, tmp_path / "a.parquet")
    back = pq.read_table(tmp_path / "a.parquet")
    assert back.num_rows == table.num_rows
    write_table(back, str(tmp_path / "b.et"))
    assert (tmp_path / "b.et").read_bytes() == original


def test_parquet_round_trip_of_microbenchmarks(microbenchmark_files, tmp_path):
    tables = [read_table(str(p)) for p in microbenchmark_files[:4]]
    for path, table in zip(microbenchmark_files, tables):
        pq.write_table(table, tmp_path / "t.parquet")
        write_table(pq.read_table(tmp_path / "t.parquet"), str(tmp_path / "t.et"))
        assert (tmp_path / "t.et").read_bytes() == path.read_bytes()


def test_gzip_in_and_out(tmp_path):
    nodes = eb.coverage_nodes()
    original = eb.et_bytes(META, nodes)
    eb.write_et(tmp_path / "a.et.gz", META, nodes)  # write_messages gzips *.gz
    assert (tmp_path / "a.et.gz").read_bytes()[:2] == b"\x1f\x8b"
    assert gzip.decompress((tmp_path / "a.et.gz").read_bytes()) == original
    table = read_table(str(tmp_path / "a.et.gz"))
    write_table(table, str(tmp_path / "b.et.gz"))
    raw = (tmp_path / "b.et.gz").read_bytes()
    assert raw[:2] == b"\x1f\x8b" and gzip.decompress(raw) == original
    write_table(table, str(tmp_path / "b.et"))
    assert (tmp_path / "b.et").read_bytes() == original
    # gzip is detected by magic, not by name
    (tmp_path / "disguised.et").write_bytes(raw)
    assert roundtrip_bytes(str(tmp_path / "disguised.et"), str(tmp_path / "c.et")) == original
    assert list(iter_nodes(str(tmp_path / "disguised.et"))) == nodes


def test_gzip_of_microbenchmark(microbenchmark_files, tmp_path):
    path = microbenchmark_files[0]
    write_table(read_table(str(path)), str(tmp_path / "x.et.gz"))
    assert gzip.decompress((tmp_path / "x.et.gz").read_bytes()) == path.read_bytes()
    assert roundtrip_bytes(str(tmp_path / "x.et.gz"), str(tmp_path / "y.et")) == path.read_bytes()


def test_memory_and_file_urls(tmp_path, memfs):
    nodes = eb.coverage_nodes()
    original = eb.write_et("memory://in/a.et", META, nodes)
    assert memfs.cat("memory://in/a.et") == original
    table = read_table("memory://in/a.et")
    write_table(table, "memory://out/b.et")
    assert memfs.cat("memory://out/b.et") == original
    write_table(table, "memory://out/b.et.gz")
    assert gzip.decompress(memfs.cat("memory://out/b.et.gz")) == original
    url = (tmp_path / "c.et").as_uri()
    assert url.startswith("file://")
    write_table(read_table("memory://out/b.et.gz"), url)
    assert (tmp_path / "c.et").read_bytes() == original
    assert roundtrip_bytes(url, "memory://out/c.et") == original


# ------------------------------------------------------------------ batching and chunked reads


def _many_nodes(n: int = 40) -> list[pb.Node]:
    out = []
    for i in range(n):
        attrs = [eb.attr("comm_size", "int64_val", i * 1000), eb.attr(f"extra{i % 3}", "string_list", ["a"] * (i % 4))]
        if i % 5 == 0:
            attrs.append(eb.attr("is_cpu_op", "bool_val", i % 2 == 0))
        out.append(eb.node(i, f"node {i}", (i % 7) + 1, attrs, data_deps=list(range(i % 3)),
                           inputs=("v", "s", "t") if i % 2 else None))
    return out


def test_small_batches_give_same_bytes(tmp_path):
    nodes = _many_nodes() + eb.coverage_nodes()
    original = eb.write_et(tmp_path / "a.et", META, nodes)
    with ETReader(str(tmp_path / "a.et")) as reader:
        batches = list(reader.iter_batches(batch_nodes=3))
    assert [b.num_rows for b in batches[:-1]] == [3] * (len(batches) - 1)
    assert sum(b.num_rows for b in batches) == len(nodes)
    with ETWriter(str(tmp_path / "b.et"), META) as writer:
        for batch in batches:
            writer.write_batch(batch)
    assert (tmp_path / "b.et").read_bytes() == original
    whole = read_table(str(tmp_path / "a.et"))
    assert pa.Table.from_batches(batches).column("id").equals(whole.column("id"))
    # and a table of many small chunks
    chunked = pa.Table.from_batches(batches, schema=whole.schema)
    write_table(chunked, str(tmp_path / "c.et"))
    assert (tmp_path / "c.et").read_bytes() == original
    with ETWriter(str(tmp_path / "d.et"), META) as writer:
        writer.write_table(whole, batch_nodes=4)
        assert writer.nodes_written == len(nodes)
    assert (tmp_path / "d.et").read_bytes() == original


@pytest.mark.parametrize("chunk", [1, 7, 64])
def test_tiny_read_chunks(tmp_path, monkeypatch, chunk):
    """Messages (and their length prefixes) straddle chunk boundaries; a node larger than a chunk."""
    big = eb.node(999, "big" * 500, 4, [eb.attr("blob", "bytes_val", bytes(range(256)) * 20)])
    nodes = _many_nodes(25) + [big] + eb.coverage_nodes()
    original = eb.write_et(tmp_path / "a.et", META, nodes)
    monkeypatch.setattr(etfile, "READ_CHUNK_BYTES", chunk)
    for batch_nodes in (1, 3, 1000):
        with ETReader(str(tmp_path / "a.et")) as reader:
            batches = list(reader.iter_batches(batch_nodes=batch_nodes))
        assert sum(b.num_rows for b in batches) == len(nodes)
        with ETWriter(str(tmp_path / "b.et"), META) as writer:
            for batch in batches:
                writer.write_batch(batch)
        assert (tmp_path / "b.et").read_bytes() == original, batch_nodes
    # gzip input through tiny chunks too
    eb.write_et(tmp_path / "a.et.gz", META, nodes)
    assert roundtrip_bytes(str(tmp_path / "a.et.gz"), str(tmp_path / "c.et")) == original


def test_node_bigger_than_default_chunk(tmp_path):
    big = eb.node(1, "huge", 4, [eb.attr("blob", "bytes_val", b"\xab" * (etfile.READ_CHUNK_BYTES + 12345)),
                                 eb.attr("comm_size", "int64_val", 1)])
    nodes = [eb.node(0, "first", 4), big, eb.node(2, "after", 4)]
    original = eb.write_et(tmp_path / "a.et", eb.metadata(), nodes)
    table = read_table(str(tmp_path / "a.et"))
    assert table.column("id").to_pylist() == [0, 1, 2]
    assert roundtrip_bytes(str(tmp_path / "a.et"), str(tmp_path / "b.et")) == original


def test_invalid_batch_nodes(tmp_path):
    eb.write_et(tmp_path / "a.et", eb.metadata(), [eb.node(1)])
    with ETReader(str(tmp_path / "a.et")) as reader:
        with pytest.raises(ValueError):
            next(reader.iter_batches(batch_nodes=0))


# ------------------------------------------------------------------ editing and slicing tables


def test_slices_write_the_right_nodes(tmp_path):
    nodes = _many_nodes(30)
    eb.write_et(tmp_path / "a.et", META, nodes)
    table = read_table(str(tmp_path / "a.et"))
    for offset, length in ((0, 1), (5, 7), (29, 1), (13, 0), (1, 29)):
        write_table(table.slice(offset, length), str(tmp_path / "s.et"))
        assert (tmp_path / "s.et").read_bytes() == eb.et_bytes(META, nodes[offset:offset + length]), (offset, length)
    # a slice of a slice, and concatenations of slices (chunked columns with offsets)
    write_table(table.slice(3, 20).slice(4, 6), str(tmp_path / "s.et"))
    assert (tmp_path / "s.et").read_bytes() == eb.et_bytes(META, nodes[7:13])
    joined = pa.concat_tables([table.slice(20, 5), table.slice(2, 3), table.slice(0, 1)])
    assert joined.column("id").num_chunks == 3
    write_table(joined, str(tmp_path / "j.et"))
    assert (tmp_path / "j.et").read_bytes() == eb.et_bytes(META, nodes[20:25] + nodes[2:5] + nodes[0:1])
    # filtering and taking rows (copies)
    mask = pc.equal(pc.bit_wise_and(table.column("id"), pa.scalar(1, pa.uint64())), pa.scalar(1, pa.uint64()))
    write_table(table.filter(mask), str(tmp_path / "f.et"))
    assert (tmp_path / "f.et").read_bytes() == eb.et_bytes(META, nodes[1::2])
    write_table(table.take([9, 0, 9]), str(tmp_path / "t.et"))
    assert (tmp_path / "t.et").read_bytes() == eb.et_bytes(META, [nodes[9], nodes[0], nodes[9]])


def test_slices_of_coverage_nodes(tmp_path):
    nodes = eb.coverage_nodes()
    eb.write_et(tmp_path / "a.et", META, nodes)
    table = read_table(str(tmp_path / "a.et"))
    for i in range(len(nodes)):
        write_table(table.slice(i, 1), str(tmp_path / "s.et"))
        assert (tmp_path / "s.et").read_bytes() == eb.et_bytes(META, [nodes[i]]), i
    write_table(pa.concat_tables([table.slice(i, 1) for i in reversed(range(len(nodes)))]), str(tmp_path / "r.et"))
    assert (tmp_path / "r.et").read_bytes() == eb.et_bytes(META, nodes[::-1])


def _set_column(table: pa.Table, name: str, values: list) -> pa.Table:
    i = table.schema.get_field_index(name)
    return table.set_column(i, table.schema.field(i), pa.array(values, table.schema.field(i).type))


def test_editing_typed_columns(tmp_path):
    nodes = [
        eb.node(1, "coll", 7, [eb.attr("comm_type", "sint64_val", 2), eb.attr("pg_name", "string_val", "3"),
                               eb.attr("x", "int64_val", 1)]),
        eb.node(2, "coll2", 7, [eb.attr("comm_size", "int32_val", 8), eb.attr("pg_name", "string_val", "4")]),
    ]
    eb.write_et(tmp_path / "a.et", META, nodes)
    table = read_table(str(tmp_path / "a.et"))
    assert table.column("comm_size").to_pylist() == [None, 8]
    table = _set_column(table, "comm_size", [4096, 16])  # set where null, change where present
    table = _set_column(table, "pg_name", [None, "4"])  # remove an attribute
    table = _set_column(table, "comm_type", [5, None])  # change a value kept in a non-default kind
    table = _set_column(table, "is_cpu_op", [None, False])  # add a bool attribute
    write_table(table, str(tmp_path / "b.et"))
    _, (n1, n2) = eb.parse_et((tmp_path / "b.et").read_bytes())
    assert [a.name for a in n1.attr] == ["comm_type", "x", "comm_size"]
    assert n1.attr[0].WhichOneof("value") == "sint64_val" and n1.attr[0].sint64_val == 5  # kind kept
    assert n1.attr[2].WhichOneof("value") == "int64_val" and n1.attr[2].int64_val == 4096  # default kind
    assert [a.name for a in n2.attr] == ["comm_size", "pg_name", "is_cpu_op"]
    assert n2.attr[0].WhichOneof("value") == "int32_val" and n2.attr[0].int32_val == 16
    assert n2.attr[2].WhichOneof("value") == "bool_val" and n2.attr[2].bool_val is False
    # a value too large for the recorded kind falls back to the column's default kind
    table = _set_column(table, "comm_size", [1 << 40, 1 << 40])
    write_table(table, str(tmp_path / "c.et"))
    _, (n1, n2) = eb.parse_et((tmp_path / "c.et").read_bytes())
    assert attrs_of(n2)["comm_size"].WhichOneof("value") == "int64_val"
    assert attrs_of(n2)["comm_size"].int64_val == 1 << 40


def test_editing_node_fields(tmp_path):
    nodes = _many_nodes(5)
    eb.write_et(tmp_path / "a.et", META, nodes)
    table = read_table(str(tmp_path / "a.et"))
    table = _set_column(table, "duration_micros", [10, 0, 0, 0, 7])
    table = _set_column(table, "data_deps", [[], [0], [0, 1], [], [3]])
    table = _set_column(table, "name", ["a", "b", "", "d", "ü"])
    write_table(table, str(tmp_path / "b.et"))
    _, parsed = eb.parse_et((tmp_path / "b.et").read_bytes())
    expected = [pb.Node() for _ in nodes]
    for e, n in zip(expected, nodes):
        e.CopyFrom(n)
    for e, d, deps, name in zip(expected, [10, 0, 0, 0, 7], [[], [0], [0, 1], [], [3]], ["a", "b", "", "d", "ü"]):
        e.duration_micros = d
        del e.data_deps[:]
        e.data_deps.extend(deps)
        e.name = name
    assert parsed == expected


# ------------------------------------------------------------------ hand-built tables


def test_hand_built_table_gets_portable_kinds(tmp_path):
    table = pa.table({
        "id": pa.array([0, 1, 2, 3], pa.int64()),
        "name": ["load", "send", "recv", "coll"],
        "type": ["MEM_LOAD_NODE", "COMM_SEND_NODE", "COMM_RECV_NODE", "COMM_COLL_NODE"],
        "data_deps": [[], [0], [0], [1, 2]],
        "ctrl_deps": [[], [], [], [0]],
        "comm_type": pa.array([None, None, None, 0], pa.int64()),
        "comm_size": [None, 1024, 1024, 1 << 20],
        "comm_src": [None, None, 0, None],
        "comm_dst": [None, 1, None, None],
        "comm_tag": [None, 7, 7, None],
        "is_cpu_op": [None, False, False, False],
        "tensor_size": pa.array([4096, None, None, None], pa.uint64()),
        "pg_name": [None, None, None, "1"],
        "involved_dim": [None, None, None, [True, True]],
    })
    normalized = normalize_table(table)
    assert normalized.schema.equals(NODE_SCHEMA)
    meta = eb.metadata("0.0.4")
    write_table(normalized, str(tmp_path / "h.et"), metadata=meta)
    got_meta, nodes = eb.parse_et((tmp_path / "h.et").read_bytes())
    assert got_meta == meta
    assert [n.id for n in nodes] == [0, 1, 2, 3]
    assert [n.type for n in nodes] == [pb.MEM_LOAD_NODE, pb.COMM_SEND_NODE, pb.COMM_RECV_NODE, pb.COMM_COLL_NODE]
    assert [list(n.data_deps) for n in nodes] == [[], [0], [0], [1, 2]]
    assert list(nodes[3].ctrl_deps) == [0]
    kinds = {(n.id, a.name): (a.WhichOneof("value"), getattr(a, a.WhichOneof("value"))) for n in nodes for a in n.attr}
    assert kinds[(0, "tensor_size")] == ("uint64_val", 4096)
    assert kinds[(1, "comm_dst")] == ("int32_val", 1)
    assert kinds[(1, "comm_tag")] == ("int32_val", 7)
    assert kinds[(1, "comm_size")] == ("int64_val", 1024)
    assert kinds[(1, "is_cpu_op")] == ("bool_val", False)
    assert kinds[(2, "comm_src")] == ("int32_val", 0)
    assert kinds[(3, "comm_type")] == ("int64_val", 0)  # ALL_REDUCE still on the wire
    assert kinds[(3, "pg_name")] == ("string_val", "1")
    assert kinds[(3, "involved_dim")][0] == "bool_list"
    assert list(kinds[(3, "involved_dim")][1].values) == [True, True]
    assert set(kinds) == {(0, "tensor_size"), (1, "comm_dst"), (1, "comm_tag"), (1, "comm_size"), (1, "is_cpu_op"),
                          (2, "comm_src"), (2, "comm_tag"), (2, "comm_size"), (2, "is_cpu_op"), (3, "comm_type"),
                          (3, "comm_size"), (3, "is_cpu_op"), (3, "pg_name"), (3, "involved_dim")}
    # attributes follow the canonical (column) order
    assert [a.name for a in nodes[3].attr] == ["is_cpu_op", "comm_type", "comm_size", "involved_dim", "pg_name"]
    # and write_table normalizes by itself
    write_table(table, str(tmp_path / "h2.et"), metadata=meta)
    assert (tmp_path / "h2.et").read_bytes() == (tmp_path / "h.et").read_bytes()
    # the written file reads back to the same values
    back = read_table(str(tmp_path / "h.et"))
    for name in ("comm_size", "comm_src", "comm_dst", "comm_tag", "is_cpu_op", "tensor_size", "pg_name"):
        assert back.column(name).to_pylist() == normalized.column(name).to_pylist(), name


def test_hand_built_minimal_table(tmp_path):
    table = pa.table({"id": pa.array([5], pa.uint64())})
    write_table(table, str(tmp_path / "m.et"))
    assert (tmp_path / "m.et").read_bytes() == eb.et_bytes(pb.GlobalMetadata(), [pb.Node(id=5)])


def test_default_kinds_match_columns():
    """The well-known attributes' default kinds are the ones both ASTRA-sim feeders read (docs/format.md)."""
    expected = {"is_cpu_op": "bool_val", "comm_type": "int64_val", "comm_size": "int64_val", "comm_src": "int32_val",
                "comm_dst": "int32_val", "comm_tag": "int32_val", "tensor_size": "uint64_val",
                "involved_dim": "bool_list", "pg_name": "string_val"}
    for name, kind in expected.items():
        assert WELL_KNOWN_BY_NAME[name].default_kind == kind


# ------------------------------------------------------------------ property: random nodes round trip

_S = eb.strategies()


@pytest.mark.slow
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(meta=_S["metadata"], nodes=st.lists(_S["node_bytes"], max_size=8), batch_nodes=st.integers(1, 9))
def test_property_random_nodes_round_trip(meta, nodes, batch_nodes):
    """Random nodes (ids, names, types, deps, times, IOInfo, attributes of random kinds and values, well-known
    names with random kinds, unknown fields) -> .et bytes -> table -> .et: the same bytes."""
    fs = fsspec.filesystem("memory")
    original = eb.et_bytes(meta, nodes)
    fs.pipe("memory://prop/in.et", original)
    with ETReader("memory://prop/in.et") as reader:
        batches = list(reader.iter_batches(batch_nodes=batch_nodes))
        assert reader.metadata == meta
    table = pa.Table.from_batches(batches, schema=etfile.with_metadata(NODE_SCHEMA, meta.SerializeToString()))
    assert table.num_rows == len(nodes)
    write_table(table, "memory://prop/out.et")
    assert fs.cat("memory://prop/out.et") == original
    # the protobuf view of the same file agrees
    assert [n.SerializeToString() for n in iter_nodes("memory://prop/in.et")] == [
        eb.parse_et(original)[1][i].SerializeToString() for i in range(len(nodes))]


def test_hand_built_table_errors():
    from chakra_core import ChakraTableError

    ids = pa.array([1, 2], pa.uint64())
    cases = {
        "null value": pa.table({"id": ids, "type": ["COMP_NODE", None]}),
        "unknown node type name": pa.table({"id": ids, "type": ["COMP_NODE", "NOT_A_TYPE"]}),
        "lacks required": pa.table({"name": ["a", "b"]}),
        "not node fields": pa.table({"id": ids, "my_attr": [1, 2]}),
        "cannot store": pa.table({"id": pa.array([-1, 2])}),
    }
    for words, table in cases.items():
        with pytest.raises(ChakraTableError, match=words):
            normalize_table(table)


def test_hand_built_other_attrs(tmp_path):
    """other_attrs given as plain Python dicts (kind as a string) are written with their kinds."""
    entries = [{"name": "x", "kind": "sint32_val", "int": -3}, {"name": "s", "kind": "string_list", "string_list": ["a"]},
               {"name": "u", "kind": "fixed64_val", "uint": 1 << 40}, {"name": "none", "kind": None}]
    table = pa.table({"id": pa.array([1], pa.uint64()), "name": pa.array(["n"], pa.large_string()),
                      "other_attrs": [entries]})
    write_table(table, str(tmp_path / "o.et"))
    _, (node,) = eb.parse_et((tmp_path / "o.et").read_bytes())
    assert node == eb.node(1, "n", 0, [eb.attr("x", "sint32_val", -3), eb.attr("s", "string_list", ["a"]),
                                       eb.attr("u", "fixed64_val", 1 << 40), eb.attr("none")])


def test_hand_built_other_attrs_without_their_value(tmp_path):
    """A kind whose value field is null is an error, not a silently written zero."""
    from chakra_core import ChakraFormatError

    for entry, field in (({"name": "x", "kind": "int32_val", "uint": 5}, "'int'"),
                         ({"name": "y", "kind": "string_val"}, "'string'"),
                         ({"name": "z", "kind": "fixed32_list", "int_list": [1]}, "'uint_list'")):
        table = pa.table({"id": pa.array([1, 2], pa.uint64()),
                          "other_attrs": [[{"name": "ok", "kind": "int64_val", "int": 1}], [entry]]})
        with pytest.raises(ChakraFormatError, match=f"other_attrs entry '{entry['name']}'.*{field}"):
            write_table(table, str(tmp_path / "x.et"))
        # rows without the bad entry still write (the check covers only the rows being written)
        write_table(table.slice(0, 1), str(tmp_path / "ok.et"))
        _, (node,) = eb.parse_et((tmp_path / "ok.et").read_bytes())
        assert node == eb.node(1, attrs=[eb.attr("ok", "int64_val", 1)])


# ------------------------------------------------------------------ attribute order from node to node


def test_attribute_order_changing_between_nodes(tmp_path):
    """The decoder first tries the well-known column that the previous node had at the same
    attribute position: nodes whose order shifts, repeats a name, or puts an unknown name or
    a misfit kind at a remembered position must still land in the right columns."""
    layouts = [
        [("rf_id", "int64_val", 1), ("tid", "int64_val", 2), ("op_schema", "string_val", "s")],
        [("tid", "int64_val", 3), ("rf_id", "int64_val", 4), ("op_schema", "string_val", "t")],
        [("rf_ix", "int64_val", 5), ("tid", "uint64_val", 6), ("op_schema", "int64_val", 7)],
        [("rf_id", "int64_val", 8), ("rf_id", "int64_val", 9), ("comm_size", "int32_val", -1)],
        [("comm_siz", "int64_val", 10), ("rf_id", "sint64_val", -11), ("is_cpu_op", "bool_val", True)],
        [("rf_id", "string_val", "x"), ("tid", "int64_val", 12)],
        [],
        [("rf_id", "int64_val", 13), ("tid", "int64_val", 14), ("op_schema", "string_val", "u")],
    ]
    nodes = [eb.node(i, f"n{i}", 4, [eb.attr(*a) for a in layout]) for i, layout in enumerate(layouts * 300)]
    original = eb.write_et(str(tmp_path / "a.et"), eb.metadata(), nodes)
    table = read_table(str(tmp_path / "a.et"))
    rows = table.slice(0, len(layouts)).to_pylist()
    assert [r["rf_id"] for r in rows] == [1, 4, None, 8, -11, None, None, 13]
    assert [r["tid"] for r in rows] == [2, 3, 6, None, None, 12, None, 14]
    assert [r["op_schema"] for r in rows] == ["s", "t", None, None, None, None, None, "u"]
    assert [r["comm_size"] for r in rows] == [None, None, None, -1, None, None, None, None]
    assert [[(e["name"], e["kind"]) for e in r["other_attrs"]] for r in rows] == [
        [], [], [("rf_ix", "int64_val"), ("op_schema", "int64_val")], [("rf_id", "int64_val")],
        [("comm_siz", "int64_val")], [("rf_id", "string_val")], [], []]
    assert roundtrip_bytes(str(tmp_path / "a.et"), str(tmp_path / "b.et")) == original


def test_converted_real_trace_round_trips(tmp_path):
    """The ResNet PyTorch trace converted to a Chakra ET (many attributes and tensor text a
    node): byte-identical through the table, with one and with two decoding threads."""
    from datapaths import PYTORCH_ET

    from chakra_core.convert.pytorch.job import convert_job

    result = convert_job(str(PYTORCH_ET / "resnet_ddp.rank0.et.json.gz"), str(tmp_path / "job"), "resnet")
    src = result.et_files[0]
    original = eb.read_bytes(src)
    tables = []
    for threads in (1, 2):
        with ETReader(src) as reader:
            tables.append(pa.Table.from_batches(list(reader.iter_batches(threads=threads))))
    assert tables[0].equals(tables[1])
    assert tables[0].num_rows > 14000
    assert roundtrip_bytes(src, str(tmp_path / "again.et")) == original
    _, nodes = eb.parse_et(original)
    sample = range(0, len(nodes), 997)
    assert [tables[0].column("id")[i].as_py() for i in sample] == [nodes[i].id for i in sample]
    rf_ids = tables[0].column("rf_id")
    assert [rf_ids[i].as_py() for i in sample] == [attrs_of(nodes[i])["rf_id"].int64_val for i in sample]


# ------------------------------------------------------------------ attr_layout left null, remembered shapes


def _canonical_bytes(table: pa.Table, path: str) -> list[bytes]:
    """Each node's bytes when the table is written with a null attr_layout (the canonical order and kinds)."""
    nulls = pa.nulls(table.num_rows, table.schema.field("attr_layout").type)
    write_table(table.set_column(table.schema.get_field_index("attr_layout"), "attr_layout", nulls), path)
    return [n.SerializeToString() for n in eb.parse_et(eb.read_bytes(path))[1]]


def test_attr_layout_is_null_exactly_for_canonical_nodes(tmp_path):
    """The decoder leaves attr_layout null for a node whose attributes the encoder writes back
    from the columns alone (well-known ones in column order with the kinds it picks, then the
    other_attrs entries), and records it for every other node: nodes that only differ in
    order, kind, a repeat, a doc string or an unknown name in between."""
    variants = [
        [("is_cpu_op", "bool_val", True), ("rf_id", "int64_val", 1), ("op_schema", "string_val", "s")],
        [("rf_id", "int64_val", 1), ("is_cpu_op", "bool_val", True)],  # order
        [("comm_src", "int32_val", 3), ("comm_dst", "int32_val", 4)],  # the default kind
        [("comm_src", "int64_val", 3)],  # a kind other than the one the encoder picks
        [("comm_src", "int64_val", 1 << 40)],  # int64: too large for the int32 default, so canonical
        [("tensor_size", "uint64_val", 7), ("tensor_size", "uint64_val", 8)],  # a repeat: an other_attrs entry
        [("rf_id", "int64_val", 1), ("custom", "string_val", "x")],  # other_attrs after the well-known
        [("custom", "string_val", "x"), ("rf_id", "int64_val", 1)],  # ... and before one
        [("custom", "string_val", "x"), ("other", "double_val", 0.5)],
        [],
        [("rf_id", "uint64_val", 5)],  # an int64 column holding another integer kind
    ]
    nodes = [eb.node(i, f"n{i}", 4, [eb.attr(*a) for a in v]) for i, v in enumerate(variants * 50)]
    nodes.append(eb.node(999, "doc", 4, [eb.attr("rf_id", "int64_val", 1, doc="d")]))
    original = eb.write_et(str(tmp_path / "a.et"), eb.metadata(), nodes)
    table = read_table(str(tmp_path / "a.et"))
    assert roundtrip_bytes(str(tmp_path / "a.et"), str(tmp_path / "b.et")) == original
    canonical = _canonical_bytes(table, str(tmp_path / "c.et"))
    layout_null = table.column("attr_layout").is_null().to_pylist()
    for node, null, again in zip(nodes, layout_null, canonical):
        assert null == (node.SerializeToString() == again), (node, null)
    assert layout_null[:len(variants)] == [True, False, True, False, True, True, True, False, True, True, False]


def test_attribute_shapes_across_kinds_of_nodes(tmp_path):
    """Nodes of two kinds alternating (one adds attributes after the first): the attribute that
    follows another is remembered per attribute, and every value still lands in its column;
    values of every integer width, long strings (two-byte lengths) and negative int64s."""
    def attrs(i: int, wide: bool):
        out = [eb.attr("is_cpu_op", "bool_val", i % 3 == 0)]
        if wide:
            out += [eb.attr("num_ops", "int64_val", i << 30), eb.attr("tensor_size", "uint64_val", (1 << 64) - 1 - i)]
        out += [eb.attr("comm_src", "int32_val", -i), eb.attr("rf_id", "int64_val", i * 1000003),
                eb.attr("seq_id", "int64_val", -i), eb.attr("op_schema", "string_val", "é" * (i % 150))]
        if i % 11 == 5:  # out of column order: recorded
            out.reverse()
        return out
    nodes = [eb.node(i, f"n{i}", 4, attrs(i, i % 7 in (2, 3)), ctrl_deps=[i - 1] if i else []) for i in range(3000)]
    original = eb.write_et(str(tmp_path / "a.et"), eb.metadata(), nodes)
    table = read_table(str(tmp_path / "a.et"))
    assert table.column("seq_id").to_pylist() == [-i for i in range(3000)]
    assert table.column("comm_src").to_pylist() == [-i for i in range(3000)]
    assert table.column("rf_id").to_pylist() == [i * 1000003 for i in range(3000)]
    assert table.column("op_schema").to_pylist() == ["é" * (i % 150) for i in range(3000)]
    assert table.column("num_ops").to_pylist() == [i << 30 if i % 7 in (2, 3) else None for i in range(3000)]
    assert table.column("tensor_size").to_pylist() == [
        (1 << 64) - 1 - i if i % 7 in (2, 3) else None for i in range(3000)]
    canonical = _canonical_bytes(table, str(tmp_path / "c.et"))
    layout_null = table.column("attr_layout").is_null().to_pylist()
    assert layout_null == [n.SerializeToString() == again for n, again in zip(nodes, canonical)]
    assert layout_null == [i % 11 != 5 for i in range(3000)]
    assert roundtrip_bytes(str(tmp_path / "a.et"), str(tmp_path / "b.et")) == original


def test_repeated_inputs_merge_after_a_direct_write(tmp_path):
    """The first inputs/outputs of a node go straight into their columns; a second one in the
    same node merges into it (protobuf's rule for a repeated message field)."""
    node = eb.node(1, "a", 4, inputs=("[1]", "[[2]]", "['T']"), outputs=("o", "s", "t"))
    extra_in = pb.Node(inputs=pb.IOInfo(shapes="[[9]]"))
    extra_out = pb.Node(outputs=pb.IOInfo(values="v2", types="t2"))
    merged = pb.Node()
    merged.ParseFromString(node.SerializeToString() + extra_in.SerializeToString() + extra_out.SerializeToString())
    plain = eb.node(2, "b", 4, inputs=("x", "y", "z"))
    data = eb.et_bytes(eb.metadata(), [plain]) + eb.frame(
        node.SerializeToString() + extra_in.SerializeToString() + extra_out.SerializeToString())
    data += eb.frame(plain.SerializeToString())
    (tmp_path / "a.et").write_bytes(data)
    table = read_table(str(tmp_path / "a.et"))
    assert table.column("inputs").to_pylist() == [
        {"values": "x", "shapes": "y", "types": "z"},
        {"values": "[1]", "shapes": "[[9]]", "types": "['T']"},
        {"values": "x", "shapes": "y", "types": "z"}]
    assert table.column("outputs").to_pylist() == [None, {"values": "v2", "shapes": "s", "types": "t2"}, None]
    write_table(table, str(tmp_path / "b.et"))
    assert eb.parse_et(eb.read_bytes(str(tmp_path / "b.et")))[1][1] == merged
