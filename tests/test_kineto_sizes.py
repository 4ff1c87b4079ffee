"""Issue 47: sizes no tensor has, in a Kineto trace alone or an execution trace, are refused in
one line naming the file and the event, node or key. They used to be ignored (an `In msg nelems`
of 2**70 where a tensor inside the op sized it), to change the bytes unsaid (a 2**40 x 2**40
tensor overflowed numpy's int64 product to a smaller size) or to end in an OverflowError
traceback (an operation count no int64 holds)."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest
from datapaths import DATASETS

from chakra_core.cli import main

NCCL_RANK = DATASETS / "kineto-nccl" / "recsys-w16-rank0" / "rank0.kineto.json.gz"
GLOO_RUN = DATASETS / "pytorch-gloo" / "mlp_ddp-w2"
HUGE = [2**40, 2**40]


def _edited_kineto(folder: Path, edit) -> Path:
    """The NCCL rank's Kineto trace with `edit(event)` applied to its first matching event."""
    trace = json.loads(gzip.decompress(NCCL_RANK.read_bytes()))
    assert any(edit(e) for e in trace["traceEvents"])
    folder.mkdir()
    (folder / "rank0.kineto.json").write_text(json.dumps(trace))
    return folder


def _huge_nccl_tensor(e: dict) -> bool:
    if not str(e.get("name", "")).startswith("nccl:all_reduce"):
        return False
    e["args"]["Input Dims"] = [HUGE]
    return True


def _huge_message(e: dict) -> bool:
    if e.get("name") != "record_param_comms":
        return False
    e["args"]["In msg nelems"] = 2**70
    return True


def _huge_matmul(e: dict) -> bool:
    if e.get("name") != "aten::mm":
        return False
    e["args"]["Input Dims"] = [HUGE, HUGE]
    return True


def _refused(capsys, source: Path, out: Path) -> str:
    assert main(["convert", str(source), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("edit, says", [
    (_huge_nccl_tensor, "c10d::allreduce_: communication size 4835703278458516698824704 is not a byte count"),
    (_huge_message, "record_param_comms event at ts"),
    (_huge_matmul, "aten::mm: its shapes make 2.66e+36 operations, beyond 2**63"),
])
def test_a_kineto_trace_alone_with_a_size_no_tensor_has_is_one_line(tmp_path, capsys, edit, says):
    err = _refused(capsys, _edited_kineto(tmp_path / "in", edit), tmp_path / "out")
    assert "rank0.kineto.json" in err and says in err
    if edit is _huge_message:
        assert "In msg nelems 1.1805916207174113e+21 is not an element count" in err


def test_an_execution_trace_with_an_operation_count_no_int64_holds_is_one_line(tmp_path, capsys):
    job = tmp_path / "job"
    shutil.copytree(GLOO_RUN, job)
    trace = json.loads(gzip.decompress((job / "rank0.et.json.gz").read_bytes()))
    node = next(n for n in trace["nodes"] if n["name"] == "aten::addmm")
    node["inputs"]["shapes"][1:3] = [HUGE, HUGE]
    (job / "rank0.et.json.gz").write_bytes(gzip.compress(json.dumps(trace).encode()))
    err = _refused(capsys, job, tmp_path / "out")
    assert "rank0.et.json.gz" in err and "aten::addmm: its shapes make" in err and "beyond 2**63" in err
