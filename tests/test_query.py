"""`chakra query`: DuckDB views over a warehouse, local and on S3 (moto), in every output form."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from chakra_core.cli import main
from pipeline.sweep_table import PartWriter, sweep_folder
from pipeline.tables import SCHEMAS, from_rows, write_day


def _sim_row(job: str, topology: str, npus: int, finish: int) -> dict:
    return {"job_id": job, "system": f"{topology} {npus}", "topology": topology, "npus": npus, "traced_npus": npus,
            "status": "ok", "finish_ns": finish, "max_exposed_comm_ns": finish // 2}


def _fill(warehouse: str) -> None:
    write_day(warehouse, "sim_results", "2026-01-01", from_rows("sim_results", [
        _sim_row("a", "Ring", 8, 1_000), _sim_row("b", "Switch", 8, 3_000)]))
    write_day(warehouse, "sim_results", "2026-01-02", from_rows("sim_results", [_sim_row("a", "Ring", 8, 2_000)]))
    write_day(warehouse, "rejects", "2026-01-02", from_rows("rejects", [
        {"job_id": "x", "file": "x/rank0.et.json.gz", "stage": "ingest", "reason": "r " * 200}]))
    PartWriter(sweep_folder(warehouse, "bw", "2026-01-02"), SCHEMAS["sweep_results"], "0a1b2c").write(
        [_sim_row("a", "Ring", 16, 5)])
    write_day(warehouse, "traces", "2026-01-02", from_rows("traces", []))  # an empty day is still a table


def _query(capsys, *argv) -> tuple[int, str, str]:
    code = main(["query", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_views_have_partition_columns_and_every_form(tmp_path, capsys):
    warehouse = str(tmp_path / "wh")
    _fill(warehouse)
    code, out, _ = _query(capsys, "--warehouse", warehouse, "--json",
                          "SELECT date::VARCHAR d, job_id, finish_ns FROM sim_results ORDER BY d, job_id")
    assert code == 0 and json.loads(out) == [{"d": "2026-01-01", "job_id": "a", "finish_ns": 1000},
                                             {"d": "2026-01-01", "job_id": "b", "finish_ns": 3000},
                                             {"d": "2026-01-02", "job_id": "a", "finish_ns": 2000}]
    code, out, _ = _query(capsys, "--warehouse", f"file://{warehouse}", "--csv",
                          "SELECT sweep, npus FROM sweep_results")
    assert code == 0 and out.splitlines() == ["sweep,npus", "bw,16"]
    code, out, _ = _query(capsys, "--warehouse", warehouse)  # no SQL: the tables, days and rows
    listed = {line.split()[0]: line.split()[1:] for line in out.splitlines()[1:-1]}
    assert listed == {"rejects": ["1", "1", "1"], "sim_results": ["2", "3", "2"], "sweep_results": ["1", "1", "1"],
                      "traces": ["1", "0", "1"]}


def test_piped_output_keeps_every_value_whole(tmp_path):
    warehouse = str(tmp_path / "wh")
    _fill(warehouse)
    run = subprocess.run([sys.executable, "-m", "chakra_core.cli", "query", "--warehouse", warehouse,
                          "SELECT reason, file FROM rejects"], capture_output=True, text=True, check=True)
    row = run.stdout.splitlines()[1]
    assert ("r " * 200).strip() in row and row.rstrip().endswith("x/rank0.et.json.gz")


def test_bad_sql_and_a_folder_that_is_no_warehouse_are_one_line_exit_2(tmp_path, capsys):
    warehouse = str(tmp_path / "wh")
    _fill(warehouse)
    code, _, err = _query(capsys, "--warehouse", warehouse, "SELEC 1")
    assert code == 2 and err.count("\n") == 1 and err.startswith("chakra query: ") and "SELEC" in err
    code, _, err = _query(capsys, "--warehouse", str(tmp_path / "nothing"))
    assert code == 2 and "no tables/ folder" in err and "nothing" in err


@pytest.mark.usefixtures("s3")
def test_s3_warehouse_reads_through_fsspec(s3, capsys):
    s3.mkdir("query-wh")
    _fill("s3://query-wh/warehouse")
    code, out, _ = _query(capsys, "--warehouse", "s3://query-wh/warehouse", "--json",
                          "SELECT topology, count(*) n, max(finish_ns) worst FROM sim_results GROUP BY ALL ORDER BY 1")
    assert code == 0 and json.loads(out) == [{"topology": "Ring", "n": 2, "worst": 2000},
                                             {"topology": "Switch", "n": 1, "worst": 3000}]
