"""The warehouse's Parquet tables: their schemas and an atomic per-day write.

Each table and day is ONE Parquet object, `tables/<table>/date=<d>/part-0.parquet`: written
under a temporary name beside it, then moved over the old one. On a local disk the move is a
rename; on S3 it is a copy onto the key, and a key is replaced whole. Either way a reader sees
the previous day's version or the new one, never half of it, and a re-run replaces the day
instead of adding rows. Every table is written for every day, empty ones included, so that a
re-run with fewer rejects clears the old ones. Columns are documented in docs/pipeline.md.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from chakra_core.outputs import open_output
from pipeline.layout import filesystem, join, table_dir

PART = "part-0.parquet"

SCHEMAS: dict[str, pa.Schema] = {
    "ingest_log": pa.schema([
        ("job_id", pa.string()), ("file", pa.string()), ("kind", pa.string()), ("bytes", pa.int64()),
        ("sha256", pa.string()), ("status", pa.string()), ("duplicate_of", pa.string()), ("run_id", pa.string()),
    ]),
    "rejects": pa.schema([
        ("job_id", pa.string()), ("file", pa.string()), ("bytes", pa.int64()), ("sha256", pa.string()),
        ("stage", pa.string()), ("reason", pa.string()), ("run_id", pa.string()),
    ]),
    "traces": pa.schema([
        ("job_id", pa.string()), ("rank", pa.int32()), ("path", pa.string()), ("source_format", pa.string()),
        ("nodes", pa.int64()), ("comp_nodes", pa.int64()), ("collective_nodes", pa.int64()),
        ("p2p_nodes", pa.int64()), ("dependencies", pa.int64()), ("compute_micros", pa.int64()),
        ("npu_compute_micros", pa.int64()), ("num_ops", pa.int64()), ("collective_bytes", pa.int64()),
        ("p2p_bytes", pa.int64()), ("message_p50", pa.int64()), ("message_p90", pa.int64()),
        ("message_p99", pa.int64()), ("message_max", pa.int64()), ("critical_path_micros", pa.int64()),
        ("critical_path_nodes", pa.int64()), ("critical_path_compute_share", pa.float64()),
        ("critical_path_comm_share", pa.float64()), ("depth", pa.int64()), ("width", pa.int64()),
        ("missing_parents", pa.int64()), ("cycle_edges_set_aside", pa.int64()),
        ("node_types", pa.string()), ("compute_by_class", pa.string()), ("comm_by_kind", pa.string()),
        ("comm_by_group", pa.string()),
    ]),
    "collectives": pa.schema([
        ("job_id", pa.string()), ("rank", pa.int32()), ("node_id", pa.uint64()), ("name", pa.string()),
        ("kind", pa.string()), ("comm_size", pa.int64()), ("pg_name", pa.string()), ("comm_src", pa.int64()),
        ("comm_dst", pa.int64()), ("comm_tag", pa.int64()), ("duration_micros", pa.uint64()),
    ]),
    "sim_results": pa.schema([
        ("job_id", pa.string()), ("system", pa.string()), ("topology", pa.string()), ("npus", pa.int32()),
        ("traced_npus", pa.int32()), ("status", pa.string()), ("error", pa.string()), ("finish_ns", pa.int64()),
        ("max_compute_ns", pa.int64()), ("max_cpu_ns", pa.int64()), ("max_exposed_comm_ns", pa.int64()),
        ("comm_ns", pa.int64()),
        ("what_if", pa.string()), ("simulated_npus", pa.int32()), ("unshared", pa.string()),
        ("compute_ns", pa.int64()), ("host_ns", pa.int64()), ("memory_ns", pa.int64()), ("exposed_comm_ns", pa.int64()),
        ("idle_ns", pa.int64()), ("astra_exposed_comm_ns", pa.int64()),
    ]),
    "representatives": pa.schema([
        ("job_id", pa.string()), ("npus", pa.int32()), ("family", pa.string()), ("cluster", pa.int32()),
        ("representative", pa.bool_()), ("distance", pa.float64()), ("weight", pa.float64()), ("finish_ns", pa.int64()),
        ("cluster_time_share", pa.float64()), ("cluster_estimate_error", pa.float64()), ("coverage", pa.float64()),
        ("estimate_error", pa.float64()), ("estimate_errors", pa.string()), ("estimates", pa.string()),
        ("k", pa.int32()), ("status", pa.string()), ("run_id", pa.string()),
    ]),
    "synthetic_traces": pa.schema([
        ("job_id", pa.string()), ("npus", pa.int32()), ("cluster", pa.int32()), ("nodes", pa.int64()),
        ("operations_per_rank", pa.int64()), ("finish_ns", pa.int64()), ("exposed_comm_ns", pa.int64()),
        ("status", pa.string()), ("problems", pa.string()), ("path", pa.string()), ("run_id", pa.string()),
    ]),
    "fidelity": pa.schema([
        ("npus", pa.int32()), ("cluster", pa.int32()), ("real_jobs", pa.int32()), ("synthetic_jobs", pa.int32()),
        ("composition_tv", pa.float64()), ("message_size_ks_worst", pa.float64()), ("message_size_ks", pa.string()),
        ("real_median_ns", pa.float64()), ("synthetic_median_ns", pa.float64()),
        ("iteration_time_relative_error", pa.float64()), ("exposed_comm_relative_error", pa.float64()),
        ("meets_targets", pa.bool_()), ("samples_needed", pa.int32()), ("verdict", pa.string()),
        ("run_id", pa.string()),
    ]),
    "device_time": pa.schema([
        ("job_id", pa.string()), ("rank", pa.int32()), ("variant", pa.string()), ("family", pa.string()),
        ("ns", pa.int64()), ("count", pa.int64()), ("run_id", pa.string()),
    ]),
    "device_verdicts": pa.schema([
        ("job_id", pa.string()), ("rank", pa.int32()), ("variant", pa.string()), ("system", pa.string()),
        ("span_ns", pa.int64()), ("busy_ns", pa.int64()), ("compute_ns", pa.int64()), ("busy_share", pa.float64()),
        ("idle_host_launch_ns", pa.int64()), ("idle_synchronisation_ns", pa.int64()),
        ("idle_communication_ns", pa.int64()), ("idle_other_ns", pa.int64()), ("exposed_comm_ns", pa.int64()),
        ("overlap", pa.float64()), ("launches", pa.int64()), ("launch_delay_p50_ns", pa.int64()),
        ("bound", pa.string()), ("steps", pa.int32()), ("run_id", pa.string()),
    ]),
    # the fleet's memory (pipeline/history.py; the figures: chakra_core/analysis/history.py, changes.py)
    "job_history": pa.schema([
        ("job_id", pa.string()), ("fingerprint", pa.string()), ("metric", pa.string()), ("value", pa.float64()),
        ("unit", pa.string()), ("run_id", pa.string()),
    ]),
    "kernels": pa.schema([
        ("job_id", pa.string()), ("name", pa.string()), ("family", pa.string()), ("count", pa.int64()),
        ("total_ns", pa.int64()), ("median_ns", pa.int64()), ("ranks", pa.int32()), ("run_id", pa.string()),
    ]),
    "regressions": pa.schema([
        ("job_id", pa.string()), ("metric", pa.string()), ("before", pa.float64()), ("after", pa.float64()),
        ("change", pa.float64()), ("threshold", pa.float64()), ("noise", pa.float64()), ("kind", pa.string()),
        ("cause", pa.string()), ("explained", pa.float64()), ("baseline_date", pa.date32()),
        ("history_days", pa.int32()), ("run_id", pa.string()),
    ]),
}
# an ad hoc sweep's results (tables/sweep_results/sweep=<name>/[date=<d>/]part-<n>-<run>.parquet) start with
# sim_results' columns; pipeline/sweep_table.py adds the sweep's own and its parameter columns
SCHEMAS["sweep_results"] = SCHEMAS["sim_results"]


def empty(table: str) -> pa.Table:
    return SCHEMAS[table].empty_table()


def from_rows(table: str, rows: list[dict]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=SCHEMAS[table])


def write_day(warehouse: str, table: str, date: str, data: pa.Table) -> str:
    """Replace `table` for `date` atomically; returns the object's URL."""
    data = data.cast(SCHEMAS[table])
    url = join(table_dir(warehouse, table, date), PART)
    with open_output(url, "wb", gzipped=False) as f:  # a temporary beside it (not *.parquet: globs skip it)
        pq.write_table(data, f, compression="zstd")
    return url


def read_day(warehouse: str, table: str, date: str) -> pa.Table:
    fs, path = filesystem(join(table_dir(warehouse, table, date), PART))
    with fs.open(path, "rb") as f:
        return pq.read_table(f)
