"""Issue 47, regression 2: a receive that gloo's execution trace records inside a send (an
`irecv` posted right after an `isend`, or `batch_isend_irecv`) is a receive of its own, on real
two-stage pipeline runs recorded with the plain PyTorch recipe (datasets/pytorch-pipeline)."""

from __future__ import annotations

import gzip
import json

import pytest

from chakra_core.cli import main as chakra
from chakra_core.format.etfile import read_table
from datapaths import DATASETS

RUNS = sorted((DATASETS / "pytorch-pipeline").glob("pipeline_*-w2"))


def _recorded(run, rank: int) -> tuple[int, int, int]:
    """(sends, receives, receives nested in a send) of a rank's source ET."""
    with gzip.open(run / f"rank{rank}.et.json.gz") as f:
        nodes = json.load(f)["nodes"]
    name = {n["id"]: n["name"] for n in nodes}
    sends = sum(n["name"] == "c10d::send" for n in nodes)
    recvs = [n for n in nodes if n["name"] == "c10d::recv_"]
    return sends, len(recvs), sum(name.get(n["ctrl_deps"]) == "c10d::send" for n in recvs)


@pytest.mark.parametrize("run", RUNS, ids=lambda p: p.name)
def test_every_receive_nested_in_a_send_is_kept(run, tmp_path, capsys):
    assert len(RUNS) == 2
    assert chakra(["convert", str(run), "-o", str(tmp_path)]) == 0
    assert "collectives match across ranks" in capsys.readouterr().out
    for rank in (0, 1):
        sends, recvs, nested = _recorded(run, rank)
        assert nested >= 1  # the case this run exists for
        table = read_table(str(tmp_path / f"trace.{rank}.et"))
        names = table.column("name").to_pylist()
        assert (names.count("c10d::send"), names.count("c10d::recv_")) == (sends, recvs)
