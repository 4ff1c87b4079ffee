"""The nightly flow with source and warehouse both in S3 buckets (moto's server on 127.0.0.1),
Ray local (2 CPUs, its workers configured for the endpoint by the environment), Prefect
ephemeral; then DuckDB reads the tables through s3fs."""

from __future__ import annotations

import pytest

import ray
import prefect  # noqa: F401  (needed: a missing dependency fails, not skips)

from pipeline import tables  # noqa: E402
from pipeline.cluster import start_ray  # noqa: E402
from test_pipeline import DATE, make_small_drop  # noqa: E402

pytestmark = pytest.mark.slow


def test_nightly_on_s3_buckets(tmp_path, s3):

    from flows.nightly import nightly

    for bucket in ("chakra-drops", "chakra-warehouse"):
        s3.mkdir(bucket)
    files = make_small_drop(tmp_path / "source")
    s3.put(str(tmp_path / "source") + "/", "s3://chakra-drops/fleet/", recursive=True)
    ray.shutdown()  # workers inherit the environment that points s3:// at the test endpoint
    start_ray(num_cpus=2)
    try:
        summary = nightly(DATE, "s3://chakra-drops/fleet", "s3://chakra-warehouse/wh")
    finally:
        ray.shutdown()
    assert summary["jobs_converted"] == 2 and summary["rejects"] == 3
    assert summary["tables"]["traces"] == "s3://chakra-warehouse/wh/tables/traces"
    ingest = tables.read_day("s3://chakra-warehouse/wh", "ingest_log", DATE)
    rejects = tables.read_day("s3://chakra-warehouse/wh", "rejects", DATE)
    assert ingest.num_rows + rejects.num_rows == len(files)
    assert s3.ls(f"chakra-warehouse/wh/traces/date={DATE}/job=mlp")  # the converted rank traces
    # a second engine, from the Iceberg metadata alone: pyiceberg's own reader, no code of this project's
    from pyiceberg.table import StaticTable

    from chakra_core.warehouse.catalog import file_io_properties, load, open_catalog

    location = load(open_catalog("s3://chakra-warehouse/wh"), "traces").metadata_location
    traces = StaticTable.from_metadata(location, properties=file_io_properties("s3://x")).scan().to_arrow()
    assert sorted(traces.group_by("job_id").aggregate([("rank", "count")]).to_pylist(),
                  key=lambda r: r["job_id"]) == [{"job_id": "coll", "rank_count": 2}, {"job_id": "mlp", "rank_count": 2}]
