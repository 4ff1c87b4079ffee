"""Hostile input against the library and the commands: bounded memory and time (limits),
errors that name the file and the thing, analyses that degrade gracefully, atomic outputs."""

from __future__ import annotations

import json
import os
import shutil
import stat
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

    from chakra_core.convert.pytorch import job

    real_write, written = job.write_rows, []

    def write_then_fail(rows, url, metadata):
        if written:
            raise OSError("No space left on device")
        written.append(url)
        return real_write(rows, url, metadata)

    monkeypatch.setattr(job, "write_rows", write_then_fail)
    with pytest.raises(OSError):
        job.convert_job(str(GLOO / "mlp_ddp-w2"), str(tmp_path / "out"), "mlp")
    assert written and list((tmp_path / "out").iterdir()) == []


def test_a_process_group_of_a_trillion_ranks_is_a_problem_not_a_list():
    import json as _json

    from chakra_core.convert.pytorch.groups import parse_pg_init

    groups = parse_pg_init([_json.dumps([{"pg_name": "0", "group_size": 10**12, "ranks": []},
                                         {"pg_name": "1", "group_size": 2, "ranks": []}])])
    assert "1" in groups.groups and groups.groups["1"].ranks == [0, 1] and "0" not in groups.groups
    assert any("group_size 1,000,000,000,000 is not between 1 and 65,536" in p for p in groups.problems)
    assert groups.world_size is None


def test_one_enormous_json_element_is_refused_before_it_fills_memory(tmp_path, monkeypatch):
    from chakra_core.convert.pytorch.et import read_host_trace

    monkeypatch.setenv("CHAKRA_MAX_ELEMENT_BYTES", str(1 << 20))
    path = tmp_path / "huge.et.json"
    huge = "x" * (12 << 20)  # beyond the reader's chunk, so the element arrives in pieces
    path.write_text('{"schema": "1.0.1", "nodes": [{"id": 1, "name": "' + huge + '"}]}')
    with pytest.raises(limits.LimitExceeded, match=r"huge\.et\.json: an element at byte .*CHAKRA_MAX_ELEMENT_BYTES"):
        read_host_trace(str(path))
    path.write_text('{"schema": "1.0.1", "big": "' + huge + '", "nodes": []}')
    with pytest.raises(limits.LimitExceeded, match="CHAKRA_MAX_ELEMENT_BYTES"):
        read_host_trace(str(path))


# ------------------------------------------------------------------ outputs that are not regular files
ET = str(MICROBENCHMARKS / "all_reduce" / "4npus_1MB" / "all_reduce.0.et")


def test_outputs_write_through_links_fifos_and_devices_and_never_replace_them(tmp_path):
    real = tmp_path / "real.json"
    real.write_text("old")
    (tmp_path / "link.json").symlink_to(real)
    run = _run("jsonize", ET, str(tmp_path / "link.json"))
    assert run.returncode == 0 and (tmp_path / "link.json").is_symlink() and '"format"' in real.read_text()
    run = _run("jsonize", ET, "/dev/stdout")  # a pipe here: the JSON comes out on stdout
    assert run.returncode == 0 and run.stdout.startswith("{") and '"chakra-et-json"' in run.stdout
    assert _run("jsonize", ET, "/dev/null").returncode == 0 and os.path.exists("/dev/null")
    os.mkfifo(tmp_path / "fifo")
    reader = subprocess.Popen(["cat", str(tmp_path / "fifo")], stdout=subprocess.PIPE)
    run = _run("jsonize", ET, str(tmp_path / "fifo"))
    assert run.returncode == 0 and b'"chakra-et-json"' in reader.communicate(timeout=30)[0]
    assert stat.S_ISFIFO(os.lstat(tmp_path / "fifo").st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo", "link.json", "real.json"]  # no temporaries


@pytest.mark.parametrize("target, message", [("dangling", "a symbolic link to nothing"),
                                             ("folder-link", "is a folder")])
def test_outputs_that_cannot_be_written_through_are_one_line(tmp_path, target, message):
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere" / "x.json")
    (tmp_path / "folder-link").symlink_to(tmp_path)
    run = _run("jsonize", ET, str(tmp_path / target))
    assert run.returncode == 2 and run.stderr.count("\n") == 1 and message in run.stderr
    assert not (tmp_path / "nowhere").exists()


def test_a_conversion_replaces_an_older_one_whole_or_leaves_it(tmp_path, monkeypatch):
    from datapaths import GLOO

    from chakra_core.convert.pytorch import job

    out = tmp_path / "out"
    job.convert_job(str(GLOO / "mlp_ddp-w4"), str(out), "mlp")
    older = {p.name: p.read_bytes() for p in out.iterdir()}
    monkeypatch.setattr(job, "write_comm_groups", lambda *a: (_ for _ in ()).throw(OSError("disk full")))
    with pytest.raises(OSError):
        job.convert_job(str(GLOO / "mlp_ddp-w2"), str(out), "mlp")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == older  # the earlier job whole: ranks and report
    monkeypatch.undo()
    job.convert_job(str(GLOO / "mlp_ddp-w2"), str(out), "mlp")
    assert sorted(p.name for p in out.iterdir()) == ["mlp.0.et", "mlp.1.et", "mlp.comm_groups.json",
                                                      "mlp.report.json"]  # ranks 2 and 3 of the older job gone


# ------------------------------------------------------------------ archives, YAML aliases, FIFOs as input
def _zip_bomb(path, mib: int = 300) -> str:
    import zipfile

    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z, z.open("rank0.et.json", "w", force_zip64=True) as f:
        for _ in range(mib):
            f.write(bytes(1 << 20))
    return str(path)


class _Zeros:
    """`size` zero bytes, read in pieces (what tarfile copies a member from)."""

    def __init__(self, size: int):
        self.left = size

    def read(self, n: int = -1) -> bytes:
        n = self.left if n < 0 else min(n, self.left)
        self.left -= n
        return bytes(n)


def _tar_bomb(path, mib: int = 300) -> str:
    import tarfile

    with tarfile.open(path, "w:gz") as t:
        info = tarfile.TarInfo("job/rank0.et.json")
        info.size = mib << 20
        t.addfile(info, _Zeros(info.size))
    return str(path)


@pytest.mark.parametrize("bomb", [_zip_bomb, _tar_bomb], ids=["zip", "tar.gz"])
def test_archive_bombs_are_refused_before_unpacking(tmp_path, bomb):
    archive = bomb(tmp_path / ("bomb.zip" if bomb is _zip_bomb else "bomb.tar.gz"))
    started = time.monotonic()
    run = _run("convert", archive, "-o", str(tmp_path / "out"))
    assert time.monotonic() - started < 20 and run.returncode == 2 and run.stderr.count("\n") == 1
    assert "its members declare 314,572,800 bytes" in run.stderr and "CHAKRA_MAX_EXPANSION" in run.stderr


def test_two_members_of_one_name_and_too_many_members_are_refused(tmp_path, monkeypatch):
    import zipfile

    from chakra_core.archives import ArchiveError, unpack

    twice = tmp_path / "twice.zip"
    with zipfile.ZipFile(twice, "w") as z:
        z.writestr("a/rank0.et.json", "{}")
        z.writestr("b/rank0.et.json", "{}")
    with pytest.raises(ArchiveError, match=r"members 'a/rank0\.et\.json' and 'b/rank0\.et\.json' have one name"):
        unpack(str(twice), str(tmp_path / "u1"))
    monkeypatch.setenv("CHAKRA_MAX_ARCHIVE_MEMBERS", "1")
    with pytest.raises(limits.LimitExceeded, match="2 members .*CHAKRA_MAX_ARCHIVE_MEMBERS"):
        unpack(str(twice), str(tmp_path / "u2"))


ALIAS_BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 10)}]\n" for i in range(8))  # 10^9 leaves


@pytest.mark.parametrize("where", ["comm-group", "network", "sweep"])
def test_yaml_alias_bombs_are_refused_at_once(tmp_path, where):
    bomb = tmp_path / "bomb.yml"
    bomb.write_text(ALIAS_BOMB)
    started = time.monotonic()
    if where == "sweep":
        from pipeline.sweep.file import SweepError, load_sweep_file

        with pytest.raises(SweepError, match="YAML aliases expand to more than 1,000,000 values"):
            load_sweep_file(str(bomb))
    else:
        config = {"comm-group": ("--comm-group", str(bomb)), "network": ()}[where]
        run = _run("simulate", "--workload", ET[:-len(".0.et")], "--system", str(SYSTEM), *config, "--network",
                   str(bomb) if where == "network" else str(REFERENCE_CONFIGS / "Ring_4npus.yml"))
        assert run.returncode == 2 and run.stderr.count("\n") == 1, run.stderr
        assert "bomb.yml: YAML aliases expand to more than 1,000,000 values" in run.stderr
    assert time.monotonic() - started < 20


def test_a_yaml_alias_cycle_and_infinite_numbers_are_refused_by_key(tmp_path):
    (tmp_path / "cycle.yml").write_text("a: &a [1, *a]\n")
    with pytest.raises(ConfigError, match=r"cycle\.yml: line 1: a YAML alias inside the node it repeats"):
        load_system(str(tmp_path / "cycle.yml"))
    (tmp_path / "nan.json").write_text('{"dims": [{"bandwidth_gbps": NaN}]}')
    with pytest.raises(ConfigError, match=r"nan\.json: dims\[0\]\.bandwidth_gbps: nan is not a finite number"):
        load_network(str(tmp_path / "nan.json"))


@pytest.mark.parametrize("command", ["convert", "info", "survey", "simulate"])
def test_a_fifo_or_a_device_as_input_is_refused_not_waited_on(tmp_path, command):
    fifo = tmp_path / "trace.0.et"
    os.mkfifo(fifo)
    argv = {"convert": ("convert", str(fifo), "-o", str(tmp_path / "o")), "info": ("info", str(fifo), "/dev/zero"),
            "survey": ("survey", str(fifo), "-o", str(tmp_path / "o")),
            "simulate": ("simulate", "--workload", ET[:-len(".0.et")], "--network", str(fifo), "--system",
                         str(SYSTEM))}[command]
    run = _run(*argv)  # _run's timeout ends a hang as a failure
    text = run.stderr + run.stdout
    assert "is a FIFO; input must be a regular file" in text or "1 unreadable" in text, text
    assert "Traceback" not in text and run.returncode == (0 if command == "survey" else 2)
    if command == "info":
        assert "/dev/zero: is a character device; input must be a regular file" in run.stderr


# ------------------------------------------------------------------ numbers out of range
@pytest.mark.parametrize("argv, message", [
    (("--compute-scale", "inf"), "--compute-scale: 'inf': expected a number from 1e-06 to 1e+06"),
    (("--comm-scale", "nan"), "--comm-scale: 'nan': expected a number"),
    (("--traced-npus", "0"), "--traced-npus: '0': expected a whole number from 1"),
    (("--npu-speed", "1=nan"), "--npu-speed '1=nan': expected NPU=FACTOR"),
])
def test_options_out_of_range_are_one_line(argv, message):
    run = _run("simulate", "--workload", ET[:-len(".0.et")], "--network", str(REFERENCE_CONFIGS / "Ring_4npus.yml"),
               "--system", str(SYSTEM), *argv)
    assert run.returncode == 2 and run.stderr.count("\n") == 1 and message in run.stderr, run.stderr


@pytest.mark.parametrize("value", ["inf", "nan", "1e30", "-5"])
def test_a_limit_set_out_of_range_is_one_line(value):
    run = _run("info", ET, env={**os.environ, "CHAKRA_MAX_NODES": value})
    assert run.returncode == 2 and run.stderr.count("\n") == 1
    assert f"CHAKRA_MAX_NODES={value!r}: expected a positive whole number below 2**62" in run.stderr


def test_a_finish_time_no_table_can_hold_is_one_line(tmp_path):
    slow = tmp_path / "slow.yml"
    slow.write_text((REFERENCE_CONFIGS / "Ring_4npus.yml").read_text().replace("bandwidth: [ 50.0 ]",
                                                                              "bandwidth: [ 1e-300 ]"))
    assert "1e-300" in slow.read_text()
    run = _run("simulate", "--workload", ET[:-len(".0.et")], "--network", str(slow), "--system", str(SYSTEM))
    assert run.returncode == 2 and run.stderr.count("\n") == 1 and "beyond 2**63 ns" in run.stderr, run.stderr


def test_a_generated_job_beyond_the_node_limit_is_refused_before_it_is_built():
    started = time.monotonic()
    run = _run("generate", "mlp", "--npus", "8", "--layers", "10000000", "-o", "memory://never")
    assert time.monotonic() - started < 20 and run.returncode == 2 and run.stderr.count("\n") == 1
    assert "about 40,625,000 nodes per rank" in run.stderr and "CHAKRA_MAX_NODES" in run.stderr


def test_a_huge_simulator_log_is_refused_by_its_line_limit(tmp_path, monkeypatch):
    from chakra_core.viz.timeline import timeline_from_log

    monkeypatch.setenv("CHAKRA_MAX_LOG_LINES", "1000")
    log = tmp_path / "big.log"
    log.write_text("".join(f"issue,sys->id=0,tick={i},node->id={i},node->name=COMP_NODE_x\n"
                           f"callback,sys->id=0,tick={i + 1},node->id={i},node->name=COMP_NODE_x\n" for i in range(600)))
    with pytest.raises(limits.LimitExceeded, match="more than 1,000 issue/callback lines.*CHAKRA_MAX_LOG_LINES"):
        timeline_from_log(str(log), 1000.0)
    (tmp_path / "long.log").write_bytes(b"x" * (1 << 20) + b"\nissue,sys->id=0,tick=1,node->id=1,node->name=a\n")
    assert timeline_from_log(str(tmp_path / "long.log"), 1000.0)["otherData"]["unfinished_issues"] == 1


@pytest.mark.parametrize("fmt", ["graphml", "svg", "dot"])
def test_control_characters_in_node_names_give_valid_pictures(tmp_path, fmt):
    if fmt == "svg" and shutil.which("dot") is None:
        pytest.fail("Graphviz's dot is missing: scripts/setup.sh installs it")
    url, out = str(tmp_path / "nul.et"), tmp_path / f"nul.{fmt}"
    write_et(url, metadata("0.0.4"), [node(1, "a\x00b\x1b[31m", 4, dur=5), node(2, "c\nd", 4, dur=5, data_deps=[1])])
    assert main(["visualize", url, "-o", str(out)]) == 0
    text = out.read_text()
    assert "\x00" not in text and "\x1b" not in text
    assert "a\\x00b\\x1b[31m" in text.replace("\\\\", "\\")  # DOT doubles the backslash of the escape
    if fmt != "dot":
        import xml.dom.minidom

        xml.dom.minidom.parseString(text)  # well-formed XML


def test_a_rank_beyond_any_job_given_to_link_is_one_line(tmp_path):
    from datapaths import PYTORCH_ET

    run = _run("link", str(PYTORCH_ET / "linear.et.json.gz"), str(PYTORCH_ET / "linear.kineto.json.gz"),
               "-o", str(tmp_path / "x.et"), "--rank", str(10**30))
    assert run.returncode == 2 and run.stderr.count("\n") == 1 and "is beyond any job" in run.stderr, run.stderr


def test_a_fifo_among_a_jobs_rank_files_is_refused_not_waited_on(tmp_path):
    for rank in range(4):
        target = tmp_path / f"ar.{rank}.et"
        if rank == 2:
            os.mkfifo(target)
        else:
            target.write_bytes((MICROBENCHMARKS / "all_reduce" / "4npus_1MB" / f"all_reduce.{rank}.et").read_bytes())
    run = _run("simulate", "--workload", str(tmp_path / "ar"), "--network", str(REFERENCE_CONFIGS / "Ring_4npus.yml"),
               "--system", str(SYSTEM))
    assert run.returncode == 2 and run.stderr.count("\n") == 1, run.stderr
    assert "ar.2.et: is a FIFO; input must be a regular file" in run.stderr


def _gzip_with_header(data: bytes, extra: int, name: int) -> bytes:
    """A legal gzip member whose header carries an extra field and a file name of these sizes."""
    import struct

    packer = zlib.compressobj(9, zlib.DEFLATED, -15)
    body = packer.compress(data) + packer.flush()
    header = b"\x1f\x8b\x08\x0c\x00\x00\x00\x00\x00\xff" + struct.pack("<H", extra) + b"x" * extra + b"n" * name + b"\0"
    return header + body + struct.pack("<II", zlib.crc32(data), len(data))


def test_a_gzip_header_beyond_the_inflaters_buffer_is_one_line(tmp_path):
    """Issue 47: a 65,535-byte extra field and a 100 KB name (legal gzip) ended in `OverflowError:
    Gzip header exceeds input buffer size of 8192`, a traceback; a header within the buffer reads."""
    data = sorted(MICROBENCHMARKS.rglob("*.et"))[0].read_bytes()
    (tmp_path / "big.et").write_bytes(_gzip_with_header(data, 65535, 100_000))
    (tmp_path / "small.et").write_bytes(_gzip_with_header(data, 2000, 3000))
    run = _run("info", str(tmp_path / "big.et"))
    assert run.returncode == 2 and run.stderr.count("\n") == 1, run.stderr
    assert "a gzip member header longer than 8,192 bytes" in run.stderr and "big.et" in run.stderr
    assert _run("info", str(tmp_path / "small.et")).returncode == 0
