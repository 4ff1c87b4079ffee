"""Hostile input against the library and the commands: bounded memory and time (limits),
errors that name the file and the thing, analyses that degrade gracefully, atomic outputs."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import zlib

import pytest
from datapaths import MICROBENCHMARKS, REFERENCE_CONFIGS
from et_builders import attr, metadata, node, write_et

from chakra_core import limits
from chakra_core.analysis.validate import validate_file
from chakra_core.cli import main
from chakra_core.errors import ChakraError
from chakra_core.format.etfile import read_table
from chakra_core.format.schema import et_def_pb2 as pb
from chakra_core.outputs import open_output
from chakra_core.sim.config import ConfigError, load_network, load_system

SYSTEM = REFERENCE_CONFIGS / "Ring_4chunks.json"


def _bomb(path, zero_mib: int = 256) -> str:
    """A valid metadata message, then `zero_mib` MiB of zero bytes (each an empty node), gzipped:
    about a thousandth of its decompressed size."""
    meta = pb.GlobalMetadata(version="0.0.4").SerializeToString()
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    with open(path, "wb") as f:
        f.write(packer.compress(bytes([len(meta)]) + meta))
        for _ in range(zero_mib):
            f.write(packer.compress(bytes(1 << 20)))
        f.write(packer.flush())
    return str(path)


def _run(*argv: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "chakra_core.cli", *argv], capture_output=True, text=True,
                          env=env, timeout=120)


@pytest.mark.parametrize("command", ["validate", "stats", "info", "jsonize"])
def test_gzip_bomb_is_refused_in_a_moment_and_leaves_nothing(tmp_path, command):
    bomb = _bomb(tmp_path / "bomb.et.gz")
    out = tmp_path / "bomb.json"
    started = time.monotonic()
    run = _run(command, bomb, *([str(out)] if command == "jsonize" else []))
    assert time.monotonic() - started < 20
    assert run.returncode == (1 if command == "validate" else 2), run.stderr
    text = run.stdout + run.stderr
    assert "gzip bytes expanded to" in text and "CHAKRA_MAX_EXPANSION" in text and bomb in text
    assert "Traceback" not in text and not out.exists() and not list(tmp_path.glob(".bomb.json.*"))


def test_node_limit_is_exact_and_settable(tmp_path, monkeypatch):
    url = str(tmp_path / "ten.et")
    write_et(url, metadata("0.0.4"), [node(i, f"n{i}", 4) for i in range(10)])
    monkeypatch.setenv("CHAKRA_MAX_NODES", "10")
    assert read_table(url).num_rows == 10
    monkeypatch.setenv("CHAKRA_MAX_NODES", "9")
    with pytest.raises(limits.LimitExceeded, match=r"ten\.et: too many nodes .*CHAKRA_MAX_NODES"):
        read_table(url)
    monkeypatch.setenv("CHAKRA_MAX_NODES", "lots")
    with pytest.raises(ChakraError, match="CHAKRA_MAX_NODES='lots': expected a positive whole number"):
        read_table(url)


def _system(tmp_path, **overrides) -> str:
    document = json.loads(SYSTEM.read_text()) | overrides
    path = tmp_path / "system.json"
    path.write_text(json.dumps(document))
    return str(path)


@pytest.mark.parametrize("key", ["preferred-dataset-splits", "active-chunks-per-dimension"])
def test_chunk_counts_beyond_the_limit_are_refused_by_key(tmp_path, key):
    with pytest.raises(ConfigError, match=f"system.json: {key}: 1,000,000,000 is over the limit of 4,096"):
        load_system(_system(tmp_path, **{key: 1_000_000_000}))


def test_networks_beyond_the_npu_limit_are_refused(tmp_path):
    path = tmp_path / "net.yml"
    path.write_text("topology: [Ring, Switch]\nnpus_count: [300, 300]\nbandwidth: [50, 50]\nlatency: [1, 1]\n")
    with pytest.raises(ConfigError, match="90,000 is over the limit of 65,536 NPUs .*CHAKRA_MAX_NPUS"):
        load_network(str(path))


@pytest.mark.parametrize("text", ['{"a": ' + "[" * 100_000 + "]" * 100_000 + "}",
                                  "a: " + "[" * 100_000 + "]" * 100_000,
                                  '{"a": ' + "[" * 70 + "]" * 70 + "}"], ids=["json", "yaml", "json-70"])
def test_deep_configuration_documents_are_refused(tmp_path, text):
    path = tmp_path / "deep.yml"
    path.write_text(text)
    with pytest.raises(limits.LimitExceeded, match=r"deep\.yml: nested .*CHAKRA_MAX_JSON_DEPTH"):
        load_network(str(path))


def test_oversized_configuration_files_are_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("CHAKRA_MAX_CONFIG_BYTES", "100")
    with pytest.raises(limits.LimitExceeded, match="file too large .*CHAKRA_MAX_CONFIG_BYTES"):
        load_system(str(SYSTEM))


def _cyclic_trace(url: str) -> None:
    """1 lists itself, 2 and 3 depend on each other, 2 depends on a node the file lacks."""
    write_et(url, metadata("0.0.4"), [node(1, "a", 4, dur=5, ctrl_deps=[1]), node(2, "b", 4, dur=7, data_deps=[1, 3, 99]),
                                       node(3, "c", 4, dur=11, data_deps=[2])])


def test_stats_of_a_damaged_trace_set_aside_what_closes_cycles(tmp_path, capsys):
    url = str(tmp_path / "cyc.0.et")
    _cyclic_trace(url)
    assert main(["stats", "--json", url]) == 0
    out, err = capsys.readouterr()
    row = json.loads(out)["traces"][0]
    assert (row["critical_path_micros"], row["cycle_edges_set_aside"], row["missing_parents"]) == (23, 2, 1)
    assert f"{url}: the dependency graph has cycles; 2 edge(s)" in err and "1 dependencies on node ids" in err


def test_multi_file_commands_report_each_bad_file_and_go_on(tmp_path, capsys):
    good, bad, cyclic = str(tmp_path / "good.et"), str(tmp_path / "bad.et"), str(tmp_path / "cyc.et")
    write_et(good, metadata("0.0.4"), [node(1, "a", 4, dur=5)])
    (tmp_path / "bad.et").write_bytes(b"\x05abc")
    _cyclic_trace(cyclic)
    for command in ("info", "stats"):
        assert main([command, good, bad, cyclic]) == 2
        out, err = capsys.readouterr()
        assert good in out and cyclic in out and bad not in out
        assert err.splitlines()[0] == f"chakra {command}: {bad}: byte 0: truncated file: the global metadata " \
                                      "declares 5 bytes but only 3 remain"


def test_negative_sizes_are_findings_and_not_simulated(tmp_path):
    url = str(tmp_path / "neg.0.et")
    write_et(url, metadata("0.0.4"), [node(1, "ar", 7, [attr("comm_type", "int64_val", 0),
                                                        attr("comm_size", "int64_val", -5)])])
    findings = [f for f in validate_file(url) if f.code == "negative-value"]
    assert [(f.node_ids, f.severity) for f in findings] == [((1,), "error")]
    run = _run("simulate", "--workload", url[:-len(".0.et")], "--network", str(REFERENCE_CONFIGS / "Ring_4npus.yml"),
               "--system", str(SYSTEM), "--traced-npus", "1")
    assert run.returncode == 2 and run.stderr.strip().endswith("node 1: comm_size -5 is negative")


def test_writing_onto_a_folder_is_one_line(tmp_path):
    run = _run("jsonize", str(MICROBENCHMARKS / "all_reduce" / "4npus_1MB" / "all_reduce.0.et"), str(tmp_path))
    assert run.returncode == 2 and run.stderr == f"chakra jsonize: {tmp_path}: is a folder; give a file name to write\n"


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "out.json"
    target.write_text("old")
    with pytest.raises(RuntimeError):
        with open_output(str(target), "w") as f:
            f.write("half of the new")
            raise RuntimeError("interrupted")
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["out.json"]
    with open_output(str(target), "w") as f:
        f.write("new")
    assert target.read_text() == "new" and [p.name for p in tmp_path.iterdir()] == ["out.json"]


def test_a_conversion_that_fails_while_writing_leaves_no_rank(tmp_path, monkeypatch):
    from datapaths import GLOO

    from chakra_core.convert import job

    real_write, written = job.write_table, []

    def write_then_fail(table, url, metadata):
        if written:
            raise OSError("No space left on device")
        written.append(url)
        real_write(table, url, metadata)

    monkeypatch.setattr(job, "write_table", write_then_fail)
    with pytest.raises(OSError):
        job.convert_job(str(GLOO / "mlp_ddp-w2"), str(tmp_path / "out"), "mlp")
    assert written and list((tmp_path / "out").iterdir()) == []


def test_a_process_group_of_a_trillion_ranks_is_a_problem_not_a_list():
    import json as _json

    from chakra_core.convert.groups import parse_pg_init

    groups = parse_pg_init([_json.dumps([{"pg_name": "0", "group_size": 10**12, "ranks": []},
                                         {"pg_name": "1", "group_size": 2, "ranks": []}])])
    assert "1" in groups.groups and groups.groups["1"].ranks == [0, 1] and "0" not in groups.groups
    assert any("group_size 1,000,000,000,000 is not between 1 and 65,536" in p for p in groups.problems)
    assert groups.world_size is None


def test_one_enormous_json_element_is_refused_before_it_fills_memory(tmp_path, monkeypatch):
    from chakra_core.convert.pytorch_et import read_host_trace

    monkeypatch.setenv("CHAKRA_MAX_ELEMENT_BYTES", str(1 << 20))
    path = tmp_path / "huge.et.json"
    huge = "x" * (12 << 20)  # beyond the reader's chunk, so the element arrives in pieces
    path.write_text('{"schema": "1.0.1", "nodes": [{"id": 1, "name": "' + huge + '"}]}')
    with pytest.raises(limits.LimitExceeded, match=r"huge\.et\.json: an element at byte .*CHAKRA_MAX_ELEMENT_BYTES"):
        read_host_trace(str(path))
    path.write_text('{"schema": "1.0.1", "big": "' + huge + '", "nodes": []}')
    with pytest.raises(limits.LimitExceeded, match="CHAKRA_MAX_ELEMENT_BYTES"):
        read_host_trace(str(path))
