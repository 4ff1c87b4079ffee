"""Names held as one dictionary (format/nodenames.py): what the analyses compute of them is what
they compute of the same names as strings."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from chakra_core.analysis.kernels import families
from chakra_core.analysis.stats import compute_classes
from chakra_core.format.nodenames import NAMES, NameDictionary, as_strings, on_names
from chakra_core.format.nodetypes import COMP
from chakra_core.format.normalize import normalize_table

BATCHES = [["aten::mm", "ProfilerStep#1", "aten::mm"], ["ncclDevKernel_AllReduce", None, "ProfilerStep#2"], [],
           ["aten::mm", "void gemm_kernel<128>"]]


def _encoded() -> pa.ChunkedArray:
    names = NameDictionary()
    for batch in BATCHES:
        names.encode(pa.array(batch, pa.string()))
    return names.column()


def test_every_batch_shares_one_dictionary_in_first_seen_order():
    column = _encoded()
    assert column.type == NAMES and column.num_chunks == len(BATCHES)
    assert column.chunk(0).dictionary.to_pylist() == ["aten::mm", "ProfilerStep#1", "ncclDevKernel_AllReduce",
                                                      "ProfilerStep#2", "void gemm_kernel<128>"]
    assert all(chunk.dictionary.equals(column.chunk(0).dictionary) for chunk in column.chunks)
    assert as_strings(column).to_pylist() == [name for batch in BATCHES for name in batch]
    assert NameDictionary().column().to_pylist() == []  # a trace without nodes


def test_questions_of_the_names_are_the_same_encoded_or_not():
    encoded, plain = _encoded(), pa.chunked_array([pa.array(b, pa.string()) for b in BATCHES])
    steps = on_names(encoded, lambda names: pc.starts_with(names, "ProfilerStep#"))
    assert steps.to_pylist() == pc.starts_with(plain, "ProfilerStep#").to_pylist() == [
        False, True, False, False, None, True, False, False]
    assert on_names(encoded.chunk(1), pc.utf8_length).to_pylist() == pc.utf8_length(plain.chunk(1)).to_pylist()
    assert list(families(encoded)) == list(families(plain))
    assert families(encoded)[[3, 4, 5]].tolist() == ["communication", "other", "other"]  # a null name: the empty one's
    comp = pc.is_valid(plain)
    assert _classes(pc.filter(encoded, comp)) == _classes(pc.filter(plain, comp)) == [
        "gemm", "other", "gemm", "other", "other", "gemm", "gemm"]


def _classes(names: pa.ChunkedArray) -> list[str]:
    """stats.compute_classes of host compute nodes of these names."""
    n = len(names)
    return compute_classes(pa.table({"name": names, "type": pa.array([COMP] * n, pa.int32()),
                                     "is_cpu_op": [True] * n, "stream": pa.nulls(n, pa.int64())})).to_pylist()


def test_a_question_keeps_the_names_encoded_and_a_writer_gets_strings():
    names = NameDictionary()
    for batch in (["aten::mm", "ProfilerStep#1", "aten::mm"], ["ProfilerStep#2"]):
        names.encode(pa.array(batch, pa.string()))
    table = pa.table({"id": pa.array(range(4), pa.uint64()), "name": names.column()})
    assert normalize_table(table, ["id", "name"]).schema.field("name").type == NAMES
    whole = normalize_table(table)
    assert whole.schema.field("name").type == pa.string()
    assert whole.column("name").to_pylist() == ["aten::mm", "ProfilerStep#1", "aten::mm", "ProfilerStep#2"]
