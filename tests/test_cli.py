"""The `chakra` command as scripts use it: the installed entry point, run as a subprocess."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datapaths import MICROBENCHMARKS

import chakra_core
from chakra_core.cli import GROUPS, build_parser, main
from chakra_core.format.schema import et_def_pb2 as pb

DATASETS = MICROBENCHMARKS
ALL_REDUCE = DATASETS / "all_reduce" / "4npus_1MB" / "all_reduce.0.et"
CHAKRA = str(Path(sys.executable).parent / "chakra")


def chakra(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([CHAKRA, *map(str, args)], capture_output=True, text=True, timeout=120)


def assert_one_line_error(result: subprocess.CompletedProcess, *fragments: str) -> None:
    assert result.returncode == 2, result
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    for fragment in fragments:
        assert fragment in lines[0]


@pytest.fixture
def cyclic_et(tmp_path) -> Path:
    table = pa.table({"id": [1, 2, 3], "type": ["COMP_NODE"] * 3, "data_deps": [[3], [1], [2]]})
    path = tmp_path / "cyclic.0.et"
    chakra_core.write_table(table, str(path), metadata=pb.GlobalMetadata(version="0.0.4"))
    return path


def test_info_reports_one_all_reduce_of_one_mib():
    result = chakra("info", ALL_REDUCE, "--json")
    assert result.returncode == 0, result.stderr
    info = json.loads(result.stdout)
    assert info["nodes"] == 1
    assert info["node_types"] == {"COMM_COLL_NODE": 1}
    assert info["collectives"] == {"ALL_REDUCE": {"count": 1, "bytes": 1048576}}
    assert info["metadata"]["version"] == "0.0.4"

    human = chakra("info", ALL_REDUCE)
    assert human.returncode == 0
    assert "ALL_REDUCE" in human.stdout and "1,048,576" in human.stdout and "1.0 MiB" in human.stdout


def test_info_on_several_files_prints_a_list():
    files = sorted(DATASETS.glob("all_gather/4npus_1MB/*.et"))
    result = chakra("info", *files, "--json")
    assert result.returncode == 0
    infos = json.loads(result.stdout)
    assert [i["collectives"]["ALL_GATHER"]["bytes"] for i in infos] == [1048576] * 4


@pytest.mark.parametrize("command", ["info", "validate", "jsonize", "unjsonize", "survey"])
def test_every_command_has_help(command):
    result = chakra(command, "--help")
    assert result.returncode == 0
    assert "usage: chakra " + command in result.stdout


def test_each_command_parser_matches_the_command_list(capsys):
    """`chakra --help` lists the commands from each group's COMMANDS alone, without building
    their parsers: the one-line helps there must be those the parsers register (the viz group
    repeats chakra_core.viz's), in the same order, and every command named gets its parser."""
    listed = [(name, text) for group in GROUPS for name, text in group.COMMANDS.items()]
    for group in GROUPS:
        parser = build_parser(next(iter(group.COMMANDS)))
        commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        assert [(c.dest, c.help) for c in commands._choices_actions] == listed
    for name, _ in listed:
        with pytest.raises(SystemExit) as exit_:
            main([name, "--help"])
        assert exit_.value.code == 0
        assert capsys.readouterr().out.startswith(f"usage: chakra {name} ")


# what no command needs to start: the fleet's, the simulator's and the figures' libraries
NEVER_AT_START = {"matplotlib", "sklearn", "scipy", "prefect", "ray", "torch", "pydantic", "duckdb", "yaml",
                  "networkx"}
# what reading a trace needs, and a command that reads none does not import
TRACE_LIBRARIES = {"pyarrow", "numpy", "fsspec", "google", "rich"}


@pytest.mark.parametrize("argv, allowed", [
    (["--help"], set()),
    (["--version"], set()),
    (["info", "--help"], set()),
    (["info", "--json", str(ALL_REDUCE)], TRACE_LIBRARIES - {"rich"}),  # nothing to draw on a pipe
    (["validate", str(ALL_REDUCE)], TRACE_LIBRARIES - {"rich"}),
])
def test_start_up_imports_only_what_the_command_uses(argv, allowed):
    report = "import atexit, sys; atexit.register(lambda: print(*sys.modules, file=sys.stderr))"
    run = subprocess.run([sys.executable, "-c", f"{report}\nfrom chakra_core.cli import main\nsys.exit(main())", *argv],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    imported = {name.split(".")[0] for name in run.stderr.split()}
    assert not imported & ((NEVER_AT_START | TRACE_LIBRARIES) - allowed)


def test_bad_input_is_one_line_without_traceback(tmp_path):
    missing = tmp_path / "missing.et"
    assert_one_line_error(chakra("info", missing), str(missing), "no such file")

    truncated = tmp_path / "truncated.et"
    truncated.write_bytes(ALL_REDUCE.read_bytes()[:40])
    assert_one_line_error(chakra("info", truncated), str(truncated), "byte 8", "truncated")

    not_et = tmp_path / "trace.json"
    not_et.write_text('{"schema": "1.0.1", "nodes": []}')
    assert_one_line_error(chakra("info", not_et), "JSON")
    assert_one_line_error(chakra("jsonize", truncated, tmp_path / "x.json"), "truncated")
    assert_one_line_error(chakra("unjsonize", not_et, tmp_path / "x.et"), str(not_et))


def test_jsonize_unjsonize_round_trip_is_byte_identical(tmp_path):
    json_path, et_path = tmp_path / "t.json", tmp_path / "t.et"
    assert chakra("jsonize", ALL_REDUCE, json_path).returncode == 0
    document = json.loads(json_path.read_text())
    assert document["nodes"][0]["name"] == "all_reduce_4npus_1MB"
    assert chakra("unjsonize", json_path, et_path).returncode == 0
    assert et_path.read_bytes() == ALL_REDUCE.read_bytes()


def test_validate_exit_codes(tmp_path, cyclic_et):
    clean = chakra("validate", ALL_REDUCE)
    assert clean.returncode == 0, clean.stdout + clean.stderr

    found = chakra("validate", ALL_REDUCE, cyclic_et, "--json")
    assert found.returncode == 1
    report = json.loads(found.stdout)
    cycle = [f for f in report["findings"] if f["code"] == "cycle"]
    assert cycle and cycle[0]["path"] == str(cyclic_et)
    assert set(cycle[0]["node_ids"]) == {1, 2, 3}

    human = chakra("validate", cyclic_et)
    assert human.returncode == 1
    assert str(cyclic_et) in human.stdout and "cycle" in human.stdout

    garbage = tmp_path / "garbage.et"
    garbage.write_bytes(b"\xff" * 64)
    bad = chakra("validate", garbage)
    assert bad.returncode != 0 and "Traceback" not in bad.stderr + bad.stdout
    assert str(garbage) in bad.stdout


def test_survey_records_every_file_including_unreadable_ones(tmp_path, cyclic_et):
    drop = tmp_path / "drop"
    (drop / "job").mkdir(parents=True)
    (drop / "job" / "ok.0.et").write_bytes(ALL_REDUCE.read_bytes())
    (drop / "job" / "cut.0.et").write_bytes(ALL_REDUCE.read_bytes()[:30])
    (drop / "job" / "cyclic.0.et").write_bytes(cyclic_et.read_bytes())
    out = tmp_path / "out"
    result = chakra("survey", drop, "-o", out)
    assert result.returncode == 0, result.stderr
    assert str(out / "traces.parquet") in result.stdout

    traces = pq.read_table(out / "traces.parquet").to_pylist()
    by_name = {Path(r["path"]).name: r for r in traces}
    assert set(by_name) == {"ok.0.et", "cut.0.et", "cyclic.0.et"}
    assert by_name["ok.0.et"]["collective_bytes"] == 1048576 and by_name["ok.0.et"]["errors"] == 0
    assert not by_name["cut.0.et"]["readable"] and "truncated" in by_name["cut.0.et"]["error"]
    assert by_name["cyclic.0.et"]["errors"] >= 1

    findings = pq.read_table(out / "findings.parquet").to_pylist()
    assert {(Path(f["path"]).name, f["code"]) for f in findings} >= {("cut.0.et", "unreadable"),
                                                                     ("cyclic.0.et", "cycle")}
    import duckdb  # the tables are meant to be queried as they lie

    con = duckdb.connect()
    (bytes_total,) = con.execute(f"SELECT sum(collective_bytes) FROM '{out / 'traces.parquet'}'").fetchone()
    assert bytes_total == 1048576
    (cycles,) = con.execute(f"SELECT count(*) FROM '{out / 'findings.parquet'}' WHERE code = 'cycle'").fetchone()
    assert cycles == 1

    node_tables = sorted(p.name for p in (out / "nodes").iterdir())
    assert node_tables == ["drop__job__cyclic.0.et.parquet", "drop__job__ok.0.et.parquet"]
    assert pq.read_table(out / "nodes" / "drop__job__ok.0.et.parquet").column("comm_size").to_pylist() == [1048576]


@pytest.mark.parametrize("src,options,network", [
    ("flexflow/mnist_mlp.4.graph", [], "Ring_4npus.yml"),
    ("text/DLRM_HybridParallel.txt", ["--npus", "8", "--passes", "2"], "Ring_8npus.yml"),
    ("text/MLP_HybridParallel_Data_Model.txt", ["--npus", "4"], "Ring_4npus.yml"),
])
def test_other_sources_convert_and_simulate_to_their_end(tmp_path, src, options, network):
    """`chakra convert` a FlexFlow graph or text workload, then `chakra simulate` it on a ring of its
    NPU count with the groups file beside it: every NPU finishes."""
    datasets = MICROBENCHMARKS.parent
    converted = chakra("convert", datasets / "other-formats" / src, "-o", tmp_path, "--prefix", "job", *options)
    assert converted.returncode == 0, converted.stderr
    run = chakra("simulate", "--workload", tmp_path / "job", "--network",
                 datasets / "astra-sim-reference" / "configs" / network, "--system",
                 datasets / "astra-sim-reference" / "configs" / "Ring_4chunks.json", "--json")
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    npus = int(network.split("_")[1][0])
    assert len(result["npus"]) == npus and all(n["finish_ns"] > 0 for n in result["npus"])
