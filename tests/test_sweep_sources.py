"""Where a sweep's jobs come from (pipeline/sweep/jobs.py): folders, a nightly day, a synthesizer
model, `chakra generate` and `chakra convert` specs, together in one sweep on local Ray."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest
from table_rows import complete

from chakra_core.generate.workloads import generate
from pipeline import tables
from pipeline.sweep.file import SweepError, load_sweep_file
from pipeline.sweep.jobs import Converted, Generated, Sources, converted_job, generated_job, prepare_job, read_sweep_job
from pipeline.sweep.run import plan, run_sweep

DATE = "2026-11-20"
OTHER = Path(__file__).resolve().parents[1] / "datasets" / "other-formats"


@pytest.mark.parametrize("spec, message", [
    ("bert --npus 8", "WORKLOAD one of mlp, dlrm, transformer"),
    ("mlp --layers 2", "--npus N is required"),
    ("mlp --npus 8 --tp 2", "option tp does not apply to mlp"),
    ("mlp --npus 8 --layers two", "option layers='two': expected an integer >= 1"),
    ("mlp --npus 8 --layers", "expected --option value pairs"),
])
def test_a_bad_generate_spec_is_one_line(spec, message):
    with pytest.raises(SweepError, match=message):
        generated_job(spec)


def test_a_generate_spec_takes_chakra_generate_options():
    job = generated_job("transformer --npus 8 --tp 2 --micro-batches=2")
    assert (job.job_id, job.npus) == ("gen-transformer-n8-tp2-micro_batches2", 8)
    assert job.recipe == Generated("transformer", 8, (("tp", "2"), ("micro_batches", "2")))


@pytest.mark.parametrize("spec, message", [
    ("", "expected SRC"),
    (f"{OTHER}/text/DLRM_HybridParallel.txt", "needs --npus N"),
    (f"{OTHER}/text/DLRM_HybridParallel.txt --npus 8 --tp 2", "option tp is not one of"),
    (f"{OTHER}/text/DLRM_HybridParallel.txt --npus eight", "option npus='eight': expected int"),
    (f"{OTHER}/flexflow/alexnet.4.graph --npus 8", "--npus does not apply to a flexflow input"),
    (f"{OTHER}/text/FORMAT-README.md", "not a FlexFlow task graph or an ASTRA-sim text workload"),
])
def test_a_bad_convert_spec_is_one_line(spec, message):
    with pytest.raises(SweepError, match=message):
        converted_job(spec)


def test_converted_jobs_are_made_once_and_simulate(tmp_path):
    graph = converted_job(f"{OTHER}/flexflow/alexnet.4.graph")
    text = converted_job(f"{OTHER}/text/DLRM_HybridParallel.txt --npus 8 --passes=2")
    assert (graph.job_id, graph.npus, graph.recipe.format) == ("conv-alexnet_4-n4", 4, "flexflow")
    assert (text.job_id, text.npus) == ("conv-DLRM_HybridParallel-n8-passes2", 8)
    assert text.recipe == Converted(f"{OTHER}/text/DLRM_HybridParallel.txt", "text", (("npus", 8), ("passes", 2)))
    from chakra_core.sim.config import load_network, load_system
    from chakra_core.sim.engine import simulate

    for job in (graph, text):
        made = prepare_job(job, str(tmp_path / "jobs"))
        assert len(made.files) == job.npus and made.sha256
        assert prepare_job(job, str(tmp_path / "jobs")).sha256 == made.sha256  # reused
        network = Path(__file__).resolve().parents[1] / "pipeline" / "sweeps" / "Ring_8npus.yml"
        result = simulate(read_sweep_job(made), load_network(network), load_system(network.parent / "ring_system.json"),
                          traced_npus=job.npus)
        assert result.finish_ns > 0


@pytest.fixture(scope="module")
def ray_local():
    import ray
    from pipeline.cluster import start_ray

    ray.shutdown()
    start_ray(num_cpus=2)
    yield
    ray.shutdown()


def _fleet(root: Path) -> tuple[Path, str, str]:
    """(a folder of two jobs, a model fitted on them, a warehouse whose traces table for DATE has one job)."""
    from chakra_core.synth.model import save_model
    from chakra_core.synth.synthesize import fit, load_training

    for name, workload in (("mlp4", "mlp"), ("dlrm4", "dlrm")):
        generate(workload, 4).write(str(root / "jobs" / name), name)
    model = str(root / "model.json")
    save_model(fit(load_training([str(root / "jobs")])).model, model)
    warehouse = str(root / "wh")
    day = root / "wh" / "traces" / f"date={DATE}" / "job=nightly"
    files = generate("mlp", 2, layers=2).write(str(day), "nightly")
    tables.write_day(warehouse, "traces", DATE, tables.from_rows("traces", [
        complete("traces", {"job_id": "nightly", "rank": rank, "path": path}) for rank, path in enumerate(files)]))
    return root / "jobs", model, warehouse


@pytest.mark.slow
def test_jobs_from_every_source_in_one_sweep(tmp_path, ray_local):
    folder, model, warehouse = _fleet(tmp_path)
    sweep_file = tmp_path / "s.yaml"
    sweep_file.write_text("grid: {topology: [Ring], npus_count: [4, 8], bandwidth: [100]}\n"
                          "where: ['total_npus >= traced_npus']\n")
    sweep = load_sweep_file(str(sweep_file))
    sources = Sources((str(folder),), DATE, warehouse, model, (4, 8), 2, ("mlp --npus 8 --layers 2",))
    planned = plan(sweep, sources, 100)
    # 2 folder jobs, the day's 2-rank job and 2 synthetic 4-NPU jobs on both points; the 8-NPU ones on one
    assert planned.simulations == 2 * 2 + 2 + 2 * 2 + 2 * 1 + 1
    result = run_sweep(sweep, planned, warehouse, "mixed", DATE)
    assert result.status == {"ok": planned.simulations}
    assert result.folder.endswith(f"sweep_results/sweep=mixed/date={DATE}")
    rows = duckdb.sql(f"SELECT job_id, origin, npus, traced_npus FROM read_parquet('{result.folder}/*.parquet') "
                      "ORDER BY ALL").fetchall()
    origins = {job: origin for job, origin, _, _ in rows}
    assert origins["nightly"] == f"date={DATE}" and origins["mlp4"] == str(folder / "mlp4")
    assert origins["synth-n8-001"] == f"synthetic {model}" and origins["gen-mlp-n8-layers2"].startswith("generate mlp")
    made = Path(warehouse) / "sweeps" / "mixed" / "jobs"
    assert (made / "synth-n4-000" / "synth-n4-000.3.et").exists()
    assert (made / "gen-mlp-n8-layers2" / "_sweep_job.json").exists()
    again = run_sweep(sweep, plan(sweep, sources, 100), warehouse, "mixed", DATE)  # made jobs are reused, not remade
    assert (again.rows, again.skipped) == (0, planned.simulations)
