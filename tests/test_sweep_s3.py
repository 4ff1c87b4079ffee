"""An ad hoc sweep with its jobs and its warehouse in S3 buckets (moto's server on 127.0.0.1):
`python -m flows.sweep --jobs s3://... --warehouse s3://...` (its main), Ray local (2 CPUs, its
workers configured for the endpoint by the environment), Prefect ephemeral; the rows read back
with `chakra query` and with pyarrow over s3fs, and a re-run adds nothing."""

from __future__ import annotations

import json

import pytest

import ray
import prefect  # noqa: F401  (needed: a missing dependency fails, not skips)

from chakra_core.format.job import Job
from chakra_core.generate.workloads import generate
from pipeline.cluster import start_ray
from pipeline.simulation import simulate_job
from pipeline.sweep.file import load_sweep_file

pytestmark = pytest.mark.slow

JOBS_BUCKET, WAREHOUSE_BUCKET = "chakra-sweep-jobs", "chakra-sweep-warehouse"
JOBS = f"s3://{JOBS_BUCKET}/jobs"
WAREHOUSE = f"s3://{WAREHOUSE_BUCKET}/wh"
FOLDER = f"{WAREHOUSE_BUCKET}/wh/tables/sweep_results/sweep=s3grid"
# 2 topologies x 2 NPU counts x 2 bandwidths; the 8-rank job only on the 8-NPU points, the 4-rank
# one with sub-groups on all (scaled to 8 NPUs, its groups repeat per block of 4): 8 + 4 rows, all ok
GRID = """grid: {topology: [Ring, Switch], npus_count: [4, 8], bandwidth: [50, 200]}
where: ["total_npus >= traced_npus"]
"""


@pytest.fixture(scope="module")
def ray_on_s3(s3):
    ray.shutdown()  # workers inherit the environment that points s3:// at the test endpoint
    start_ray(num_cpus=2)
    yield s3
    ray.shutdown()


def _main(*argv: str) -> int:
    from flows.sweep import main

    return main(list(argv))


def _query(capsys, sql: str) -> list[dict]:
    from chakra_core.cli import main

    capsys.readouterr()
    assert main(["query", "--warehouse", WAREHOUSE, "--json", sql]) == 0
    return json.loads(capsys.readouterr().out)


def test_a_sweep_of_s3_jobs_into_an_s3_warehouse(tmp_path, ray_on_s3, capsys):
    import pyarrow.dataset as ds

    s3 = ray_on_s3
    for bucket in (JOBS_BUCKET, WAREHOUSE_BUCKET):
        s3.mkdir(bucket)
    local = tmp_path / "jobs"  # tf4 has sub-groups (tp 2): its groups file is read from S3 too
    generate("transformer", 4, tp=2).write(str(local / "tf4"), "tf4")
    generate("mlp", 8, layers=2).write(str(local / "mlp8"), "mlp8")
    s3.put(str(local) + "/", JOBS + "/", recursive=True)
    assert f"{JOBS_BUCKET}/jobs/tf4/tf4.comm_groups.json" in s3.find(JOBS)
    sweep_file = tmp_path / "grid.yaml"
    sweep_file.write_text(GRID)
    argv = ["--jobs", JOBS, "--sweep", str(sweep_file), "--name", "s3grid", "--warehouse", WAREHOUSE]

    assert _main(*argv) == 0
    assert "12 simulations (12 ok), 0 already done" in capsys.readouterr().out
    parts = sorted(s3.ls(FOLDER))
    assert len(parts) == 1 and parts[0].startswith(f"{FOLDER}/part-0-")  # part-<n>-<run id>

    # `chakra query` over the S3 warehouse: a row per job and point, with the grid's columns
    rows = _query(capsys, "SELECT job_id, origin, status, error, topology_0, npus_count_0, bandwidth_0, npus, "
                          "traced_npus, finish_ns, job_sha256 FROM sweep_results ORDER BY ALL")
    assert len(rows) == 12 and len({(r["job_id"], r["topology_0"], r["npus_count_0"], r["bandwidth_0"])
                                    for r in rows}) == 12
    assert {r["job_id"]: r["origin"] for r in rows} == {"tf4": f"{JOBS}/tf4", "mlp8": f"{JOBS}/mlp8"}
    assert all(r["npus"] == r["npus_count_0"] and r["job_sha256"] for r in rows)
    assert {(r["job_id"], r["npus"]): r["traced_npus"] for r in rows} == {("tf4", 4): 4, ("tf4", 8): 4, ("mlp8", 8): 8}
    # the sub-groups came from S3: without its groups file tf4 stops ("communicator group not found")
    assert all(r["status"] == "ok" and r["finish_ns"] > 0 for r in rows)

    # pyarrow over s3fs: the part as written, and a value equal to a simulation of the local copy
    table = ds.dataset(FOLDER, filesystem=s3, format="parquet").to_table()
    assert table.num_rows == 12 and {"point_key", "run_id", "cost", "seconds", "bandwidth_0"} <= set(table.column_names)
    point = next(p for p in load_sweep_file(str(sweep_file)).points if p.name == "topology=Ring npus_count=4 bandwidth=50")
    written = [r for r in table.to_pylist() if r["job_id"] == "tf4" and r["point_key"] == point.key]
    local_job = Job.read(str(local / "tf4" / "tf4"))
    assert len(written) == 1 and written[0]["finish_ns"] == simulate_job("tf4", local_job, 4, point)["finish_ns"]

    assert _main(*argv) == 0  # the re-run finds every (job, point) done and writes nothing
    assert "0 simulations (0 ok), 12 already done" in capsys.readouterr().out
    assert sorted(s3.ls(FOLDER, refresh=True)) == parts
    assert _query(capsys, "SELECT count(*) n FROM sweep_results") == [{"n": 12}]
