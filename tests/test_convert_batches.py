"""A rank's conversion is written batch by batch as its rows are made (pytorch/job.py,
noderows.NodeRows.batches), never as one whole table: the same bytes whatever the batch size,
an unfinished file left nowhere, the codec's buffer pool not growing with the batches written,
and `chakra convert` not keeping the tables it wrote."""

from __future__ import annotations

import pytest
from datapaths import GPU_H200

from chakra_core.cli import main
from chakra_core.convert.common import result as result_module
from chakra_core.convert.pytorch.conversion import RankConversion
from chakra_core.convert.pytorch.et import read_host_trace
from chakra_core.convert.pytorch.kineto import read_kineto
from chakra_core.convert.sources import convert_source
from chakra_core.format import codec
from chakra_core.format.etfile import ETWriter, read_table, write_table

RUN = GPU_H200 / "gpt"  # host nodes, device kernels and a collective or two


def _conversion() -> RankConversion:
    return RankConversion(read_host_trace(str(RUN / "rank0.et.json.gz")),
                          read_kineto(str(RUN / "rank0.kineto.json.gz")), 0)


@pytest.mark.parametrize("batch_nodes", [1, 777, 16384])
def test_rows_written_in_batches_of_any_size_are_the_whole_tables_bytes(tmp_path, batch_nodes):
    table, metadata = _conversion().emit()
    write_table(table, str(tmp_path / "whole.et"), metadata)
    rows, metadata = _conversion().emit_rows()
    assert len(rows.kernels) > 0 and len(rows.comm) > 0
    with ETWriter(str(tmp_path / "batches.et"), metadata) as writer:
        for batch in rows.batches(batch_nodes):
            assert batch.num_rows <= batch_nodes
            writer.write_batch(batch)
    assert writer.nodes_written == table.num_rows
    assert (tmp_path / "batches.et").read_bytes() == (tmp_path / "whole.et").read_bytes()


def test_a_writer_left_by_an_error_leaves_no_file(tmp_path):
    table, metadata = _conversion().emit()
    with pytest.raises(RuntimeError):
        with ETWriter(str(tmp_path / "a.et"), metadata) as writer:
            writer.write_table(table.slice(0, 10))
            raise RuntimeError("stopped half way")
    assert list(tmp_path.iterdir()) == []


def test_encoding_batch_after_batch_reuses_the_pools_blocks():
    """Output buffers grow by doubling: each encode must take back the blocks the last one gave
    the pool, not leave one more of its final size there each time (the whole file, at the end)."""
    batch = _conversion().emit()[0].to_batches()[0]
    for _ in range(3):
        size = len(codec.encode_batch(batch))
    _, held, _ = codec._etcodec.pool()
    for _ in range(20):
        codec.encode_batch(batch)
    assert codec._etcodec.pool()[1] <= held + size  # not 20 more buffers of the output's size


def test_chakra_convert_keeps_no_tables_where_the_nightly_keeps_them(tmp_path, monkeypatch, capsys):
    kept = {}
    real = convert_source

    def spied(*args, **kwargs):
        kept["result"] = real(*args, **kwargs)
        return kept["result"]

    monkeypatch.setattr("chakra_core.convert.sources.convert_source", spied)
    assert main(["convert", str(RUN), "-o", str(tmp_path / "cli")]) == 0
    assert kept["result"].tables == [] and kept["result"].nodes > 0
    assert result_module.tables_wanted()  # as it was outside the command
    result = convert_source(str(RUN), str(tmp_path / "lib"), "trace")
    assert [t.num_rows for t in result.tables] == [result.nodes]
    assert result.tables[0].equals(read_table(result.et_files[0]).replace_schema_metadata(None))
