"""The nightly pipeline takes job folders of other sources (issue 30): a FlexFlow task graph or an
ASTRA-sim 1.0 text workload (its options in job.json) converts like a PyTorch job, and what does
not make one job is rejected with a reason, every file accounted for once."""

from __future__ import annotations

import json

from datapaths import DATASETS, JAX_CPU
from flexflow_graphs import ALEXNET, TEXT

from chakra_core.format.etfile import read_table
from pipeline.nightly.drop import list_day
from pipeline.nightly.jobs import process_job
from pipeline.layout import filesystem, join, traces_dir
from tools import make_drop as md

DATE = "2026-11-22"
SOURCE, WAREHOUSE = "memory://other-drops", "memory://other-wh"
DLRM = TEXT / "DLRM_HybridParallel.txt"
GLOO_RANK = md.REAL_DIR / "mlp_ddp-w2" / "rank0.et.json.gz"


def put(job: str, files: dict[str, bytes]) -> None:
    fs, base = filesystem(join(SOURCE, DATE, job))
    fs.makedirs(base, exist_ok=True)
    for name, data in files.items():
        fs.pipe_file(f"{base}/{name}", data)


def run(job: str):
    job_input = next(j for j in list_day(SOURCE, DATE)[0] if j.job_id == job)
    outcome = process_job(job_input, DATE, WAREHOUSE, "r1")
    logged = [r["file"] for r in outcome.ingest] + [r["file"] for r in outcome.rejects]
    assert sorted(logged) == sorted(f.name for f in job_input.files)  # every file exactly once
    return outcome, {r["file"].split("/", 1)[1]: r["reason"] for r in outcome.rejects}


def job_json(**fields) -> bytes:
    return json.dumps(fields).encode()


def test_a_drop_with_other_formats_converts_both_jobs():
    summary = md.make_drop(SOURCE, "2026-11-23", generated_jobs=0, copies_of_real=0, corrupt=False,
                           other_formats=True)
    assert summary["jobs_by_source"] == {"other-formats": 2}
    jobs = {j.job_id: j for j in list_day(SOURCE, "2026-11-23")[0]}
    assert {j: job.trace_format for j, job in jobs.items()} == {"flexflow-alexnet-n4": "flexflow",
                                                                "text-dlrm-n8": "text_workload"}
    for job_id, npus in (("flexflow-alexnet-n4", 4), ("text-dlrm-n8", 8)):
        outcome = process_job(jobs[job_id], "2026-11-23", WAREHOUSE, "r1")
        assert not outcome.rejects and outcome.ranks == npus
        assert {r["source_format"] for r in outcome.traces} == {jobs[job_id].trace_format}
        assert {r["status"] for r in outcome.ingest} == {"processed"}


def test_a_text_workload_takes_npus_and_passes_from_job_json():
    put("dlrm", {"DLRM_HybridParallel.txt": DLRM.read_bytes(), "job.json": job_json(npus=4, passes=3)})
    outcome, rejects = run("dlrm")
    assert not rejects and outcome.ranks == 4
    table = read_table(outcome.traces[0]["path"])
    assert table.column("name").to_pylist().count("Embedding fwd ALL_TO_ALL #2") == 1  # the third pass


def test_a_text_workload_without_npus_is_rejected_naming_job_json():
    put("no-npus", {"DLRM_HybridParallel.txt": DLRM.read_bytes(), "job.json": job_json(model="dlrm")})
    outcome, rejects = run("no-npus")
    assert outcome.prefix is None
    assert "job.json" in rejects["DLRM_HybridParallel.txt"] and "npus" in rejects["DLRM_HybridParallel.txt"]


def test_a_graph_with_a_note_converts_and_the_note_alone_is_rejected():
    put("noted", {"alexnet.4.graph": ALEXNET.read_bytes(), "notes.txt": b"rerun with a larger batch\n",
                  "alexnet.comm_groups.json": b'{"1": [0, 1]}'})
    outcome, rejects = run("noted")
    assert outcome.ranks == 4
    assert set(rejects) == {"notes.txt", "alexnet.comm_groups.json"}
    assert "unknown file type" in rejects["notes.txt"]
    assert "beside a FlexFlow task graph" in rejects["alexnet.comm_groups.json"]
    fs, path = filesystem(traces_dir(WAREHOUSE, DATE, "noted"))
    assert sorted(p.rsplit("/", 1)[1] for p in fs.ls(path, detail=False) if p.endswith(".et")) == \
        [f"noted.{r}.et" for r in range(4)]


def test_jobs_that_are_not_one_job_are_rejected_whole():
    graph = ALEXNET.read_bytes()
    put("two-graphs", {"a.graph": graph, "b.dot": graph})
    put("mixed", {"alexnet.4.graph": graph, "rank0.et.json.gz": GLOO_RANK.read_bytes()})
    put("broken", {"alexnet.4.graph": graph[:len(graph) // 2]})
    _, rejects = run("two-graphs")
    assert "two-graphs/a.graph and two-graphs/b.dot both describe the job" in rejects["b.dot"]
    _, rejects = run("mixed")
    assert "a FlexFlow task graph beside PyTorch traces" in rejects["alexnet.4.graph"]
    assert "alexnet.4.graph of this job was rejected" in rejects["rank0.et.json.gz"]
    outcome, rejects = run("broken")
    assert outcome.prefix is None and "alexnet.4.graph: line" in rejects["alexnet.4.graph"]


def test_a_jax_run_folder_is_a_job_and_its_unused_files_are_rejected_with_why():
    folder = JAX_CPU / "tp_mlp"
    put("jax-tp", {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()})
    job = next(j for j in list_day(SOURCE, DATE)[0] if j.job_id == "jax-tp")
    assert job.trace_format == "jax_profile"
    outcome, rejects = run("jax-tp")
    assert outcome.ranks == 4 and {r["source_format"] for r in outcome.traces} == {"jax_profile"}
    processed = {r["file"].split("/", 1)[1]: r["kind"] for r in outcome.ingest}
    assert processed["timing.json"] == "jax_timing"
    assert sorted(k for k, v in processed.items() if v == "jax_profile") == \
        [p for p in processed if p.endswith("vm.xplane.pb")]
    assert [k for k, v in processed.items() if v == "hlo_text"] == ["hlo/module_0024.jit_step.cpu_after_optimizations.txt"]
    assert set(rejects) == {p for p in (str(f.relative_to(folder)) for f in folder.rglob("*") if f.is_file())
                            if p not in processed}
    assert "which was read" in rejects[next(p for p in rejects if p.endswith("perfetto_trace.json.gz"))]
    assert "before optimisation" in rejects[next(p for p in rejects if "before_optimizations" in p)]
    assert outcome.device_time  # the device breakdown of a JAX job


def test_jax_files_beside_a_pytorch_trace_are_rejected_alone():
    one_rank = DATASETS / "gpu-h200" / "mlp_tiny" / "rank0.et.json.gz"  # a whole job of one rank (world size 1)
    put("torch-and-timing", {"rank0.et.json.gz": one_rank.read_bytes(), "timing.json": b'{"steps_ns": [1]}',
                             "hlo/module_1.jit_step.cpu_after_optimizations.txt": b"HloModule x\n"})
    outcome, rejects = run("torch-and-timing")
    assert outcome.ranks == 1
    assert set(rejects) == {"timing.json", "hlo/module_1.jit_step.cpu_after_optimizations.txt"}
    assert all("JAX run files beside PyTorch traces" in why for why in rejects.values())
