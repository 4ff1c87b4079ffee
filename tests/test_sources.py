"""The registry of trace sources (chakra_core/convert/sources.py): every source's conversion keeps
the conventions (convert/conventions.py), its inputs are told apart by content and by name, and
a new source is one module plus one entry, converted by `chakra convert` and the nightly flow."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest
import toy_source
from datapaths import DATASETS

from chakra_core.cli import main
from chakra_core.convert import conventions, sources
from chakra_core.convert.sources import SourceOptions, convert_source
from chakra_core.format.job import Job
from chakra_core.generate.workloads import generate
from pipeline.nightly.drop import list_day
from pipeline.nightly.jobs import process_job
from pipeline.layout import filesystem, join

GLOO = DATASETS / "pytorch-gloo"
GPU = DATASETS / "gpu-h200"
OTHER = DATASETS / "other-formats"


def _chakra_job(folder: Path) -> str:
    generate("mlp", 4).write(str(folder), "mlp")
    return str(folder)


def _kineto_only(run: Path) -> Callable[[Path], str]:
    """A recorded run's folder without its execution traces."""
    def copy(folder: Path) -> str:
        folder.mkdir(parents=True)
        for f in run.glob("rank*.kineto.json.gz"):
            shutil.copy(f, folder / f.name)
        return str(folder)
    return copy


# One example input per source, each with its options: a source without one fails the first test.
EXAMPLES = {
    "pytorch": [lambda tmp: str(GLOO / "mlp_ddp-w2"), lambda tmp: str(GPU / "mlp_gloo2")],
    "chakra": [_chakra_job],
    "flexflow": [lambda tmp: str(OTHER / "flexflow" / "alexnet.4.graph")],
    "text": [lambda tmp: str(OTHER / "text" / "DLRM_HybridParallel.txt")],
    "kineto": [_kineto_only(GLOO / "mlp_ddp-w2"), _kineto_only(GPU / "mlp_gloo2"),
               lambda tmp: str(GPU / "mlp_tiny" / "rank0.kineto.json.gz")],
    "jax": [lambda tmp: str(DATASETS / "jax-cpu" / "tp_mlp"), lambda tmp: str(DATASETS / "jax-gpu-h200" / "mlp2_dp")],
}
OPTIONS = {"text": SourceOptions(npus=8)}


def test_every_source_of_the_registry_has_an_example_here():
    assert set(EXAMPLES) == set(sources.names())


@pytest.mark.parametrize("name, example", [(n, e) for n, es in EXAMPLES.items() for e in es],
                         ids=[f"{n}-{i}" for n, es in EXAMPLES.items() for i in range(len(es))])
def test_each_source_is_detected_and_keeps_the_conventions(tmp_path, name, example):
    src = example(tmp_path / "in")
    assert sources.detect_format(src) == name
    result = convert_source(src, str(tmp_path / "out"), "job", options=OPTIONS.get(name, SourceOptions()))
    job = Job.read(str(tmp_path / "out" / "job"))
    assert job.npus == len(result.et_files) > 0
    assert conventions.problems(job) == []


def test_the_conventions_catch_a_kernel_without_its_launcher(tmp_path):
    convert_source(str(GPU / "mlp_gloo2"), str(tmp_path), "job")
    job = Job.read(str(tmp_path / "job"))
    table = job.tables[0]
    kernels = [i for i, (cpu, stream) in enumerate(zip(table.column("is_cpu_op").to_pylist(),
                                                       table.column("stream").to_pylist())) if cpu is False and stream]
    assert kernels
    deps = table.column("data_deps").to_pylist()
    deps[kernels[0]] = []
    broken = table.set_column(table.column_names.index("data_deps"), "data_deps",
                              pa.array(deps, table.schema.field("data_deps").type))
    found = conventions.problems(Job([broken, *job.tables[1:]], job.comm_groups, "broken"))
    assert found == ["rank 0: 1 device kernel(s) whose first data dependency is not a host node (the first: "
                     f"{table.column('name')[kernels[0]].as_py()!r})"]


@pytest.mark.parametrize("name, expected", [
    ("rank0.et.json.gz", "pytorch_et"), ("rank12.kineto.json", "kineto"), ("rank3.timing.json", "timing"),
    ("mlp.3.et", "chakra_et"), ("mlp.comm_groups.json", "comm_groups"), ("alexnet.4.graph", "flexflow"),
    ("notes.txt", None), ("rank0.et.json.bz2", None)])
def test_a_file_kind_is_told_by_its_name_and_a_text_workload_by_its_content_too(name, expected):
    assert sources.kind_of(name, lambda: b"just some notes\n") == expected
    assert sources.kind_of("dlrm.txt", lambda: (OTHER / "text" / "DLRM_HybridParallel.txt").read_bytes()[:4096]) \
        == "text_workload"


def test_options_of_another_source_are_refused_and_a_required_one_is_asked_for():
    with pytest.raises(sources.SourceOptionError, match="--npus does not apply to a flexflow input"):
        sources.check_options(sources.source("flexflow"), SourceOptions(npus=4))
    with pytest.raises(sources.SourceOptionError, match=r"needs --npus N \(the NPUs to run it on\)"):
        sources.check_options(sources.source("text"), SourceOptions())
    with pytest.raises(sources.SourceOptionError, match="unknown source format 'tensorflow'"):
        sources.source("tensorflow")


TOY = "TOY 4\nembed 30\nmlp 120\n"


@pytest.fixture
def with_toy(monkeypatch):
    """The registry with one more entry: the toy source of tests/toy_source.py."""
    monkeypatch.setattr(sources, "SOURCES", (*sources.SOURCES, toy_source.SOURCE))


def test_a_new_source_is_converted_by_chakra_convert(with_toy, tmp_path, capsys):
    (tmp_path / "w.toy").write_text(TOY)
    assert main(["convert", str(tmp_path / "w.toy"), "-o", str(tmp_path / "out"), "--prefix", "w"]) == 0
    assert "wrote 4 trace(s)" in capsys.readouterr().out
    job = Job.read(str(tmp_path / "out" / "w"))
    assert job.npus == 4 and conventions.problems(job) == []
    assert [n for n in job.tables[0].column("name").to_pylist()] == ["embed", "mlp", "allreduce"]
    assert main(["convert", str(tmp_path / "w.toy"), "--from", "toy", "-o", str(tmp_path / "again")]) == 0
    assert main(["convert", str(tmp_path / "w.toy"), "--npus", "4", "-o", str(tmp_path / "x")]) == 2


def test_a_new_source_is_converted_by_the_nightly_flow(with_toy, memfs):
    date, drop, warehouse = "2026-11-25", "memory://toy-drops", "memory://toy-wh"
    fs, folder = filesystem(join(drop, date, "toyjob"))
    fs.makedirs(folder, exist_ok=True)
    fs.pipe_file(f"{folder}/w.toy", TOY.encode())
    fs.pipe_file(f"{folder}/job.json", json.dumps({"job_id": "toyjob"}).encode())
    fs.pipe_file(f"{folder}/rank0.kineto.json", b"{}")  # a Kineto trace beside a toy workload: of no use
    job = next(j for j in list_day(drop, date)[0] if j.job_id == "toyjob")
    assert job.trace_format == "toy_workload"
    outcome = process_job(job, date, warehouse, "r1")
    assert outcome.ranks == 4
    assert {r["source_format"] for r in outcome.traces} == {"toy_workload"}
    assert sorted((r["file"], r["kind"]) for r in outcome.ingest) == [("toyjob/job.json", "job_json"),
                                                                      ("toyjob/w.toy", "toy_workload")]
    assert [r["reason"] for r in outcome.rejects] == [
        "toyjob/rank0.kineto.json: a Kineto trace beside a toy workload, which has no use for it"]
    assert conventions.problems(Job.read(outcome.prefix)) == []
