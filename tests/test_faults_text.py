"""Issue 41, items 4-6: text stays text (no markup read in untrusted strings, escape sequences
and bidi controls shown escaped, CSV with LF); `chakra query` confined and bounded (a table named
with a keyword, a link to /, ./.tmp beside the caller, a time and memory limit); numbers at the
edges of the environment and the options refused in one line."""

from __future__ import annotations

import os
import json
import subprocess
import sys
from pathlib import Path

import pytest
from table_rows import complete

from chakra_core.cli import main
from chakra_core.terminal import console, printable
from chakra_core.viz.pages import environment
from pipeline.tables import from_rows, write_day

PROJECT = Path(__file__).resolve().parents[1]
HOSTILE = ["ok[/]", "[red]job-A", "gemm[/]0", "\x1b]52;c;cHduZWQ=\x07osc", "\x1b[2J\x1b[31mcsi", "abc\u202etxt.et"]


def _warehouse(tmp_path: Path) -> str:
    warehouse = str(tmp_path / "wh")
    write_day(warehouse, "rejects", "2026-01-02", from_rows("rejects", [
        complete("rejects", {"job_id": value, "file": f"{value}/x", "stage": "ingest", "reason": "r"})
        for value in HOSTILE]))
    return warehouse


def test_query_values_print_verbatim_and_escapes_escaped(tmp_path):
    """Before: MarkupError on `ok[/]`, `[red]job-A` printed as `job-A`, OSC/CSI reached the terminal."""
    warehouse = _warehouse(tmp_path)
    run = subprocess.run([sys.executable, "-m", "chakra_core.cli", "query", "--warehouse", warehouse,
                          "SELECT job_id FROM rejects ORDER BY job_id"], capture_output=True, text=True, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    shown = run.stdout.splitlines()[1:-1]
    assert sorted(line.strip() for line in shown) == sorted(printable(v) for v in HOSTILE)
    assert "\x1b" not in run.stdout and "\u202e" not in run.stdout
    assert "[red]job-A" in run.stdout and "ok[/]" in run.stdout


def test_csv_lines_end_in_lf(tmp_path, capsys):
    assert main(["query", "--warehouse", _warehouse(tmp_path), "--csv", "SELECT stage FROM rejects LIMIT 2"]) == 0
    out = capsys.readouterr().out
    assert "\r" not in out and out == "stage\ningest\ningest\n"


def test_the_console_reads_no_markup():
    out = console()
    with out.capture() as captured:
        out.print("[bold]x[/bold] [/] \x1b[31m")
    assert captured.get() == "[bold]x[/bold] [/] \\x1b[31m\n"


def test_pages_neutralise_bidi_controls_and_escape_html():
    page = environment().from_string("{{ value }}")
    assert page.render(value="a\u202eb<script>") == "a\\u202eb&lt;script&gt;"
    assert page.render(value="\u2066x\u2069") == "\\u2066x\\u2069"


def test_a_table_named_with_a_keyword_is_a_table(tmp_path, capsys):
    warehouse = _warehouse(tmp_path)
    import pyarrow.parquet as pq

    (Path(warehouse) / "tables" / "select" / "date=2026-01-02").mkdir(parents=True)
    pq.write_table(from_rows("rejects", [complete("rejects", {"job_id": "k", "file": "k/x"})]),
                   Path(warehouse) / "tables" / "select" / "date=2026-01-02" / "part-0.parquet")
    assert main(["query", "--warehouse", warehouse, "--json", 'SELECT count(*) n FROM "select"']) == 0
    assert '"n": 1' in capsys.readouterr().out
    assert main(["query", "--warehouse", warehouse, "--json", "SELECT count(*) n FROM rejects"]) == 0


def test_a_link_out_of_the_warehouse_is_never_followed(tmp_path, capsys):
    warehouse = _warehouse(tmp_path)
    os.symlink("/", Path(warehouse) / "tables" / "root")
    part = next((Path(warehouse) / "tables" / "rejects" / "data").rglob("*.parquet"))  # a committed file
    outside = tmp_path / "outside.parquet"
    part.rename(outside)
    os.symlink(outside, part)  # ... replaced by a link to a file out of the warehouse
    assert main(["query", "--warehouse", warehouse, "--json", "SELECT count(*) n FROM rejects"]) == 0
    out, err = capsys.readouterr()
    assert '"n": 0' in out  # the linked file left out, the table still queryable
    assert "root: a symbolic link" in err and f"{part.name}: a symbolic link, never followed" in err


def test_duckdbs_tmp_beside_the_caller_is_not_readable(tmp_path, capsys, monkeypatch):
    """DuckDB allowed ./.tmp (its default temporary directory) relative to the current folder."""
    warehouse = _warehouse(tmp_path)
    (tmp_path / "cwd" / ".tmp").mkdir(parents=True)
    (tmp_path / "cwd" / ".tmp" / "secret.txt").write_text("TOP-SECRET")
    monkeypatch.chdir(tmp_path / "cwd")
    code = main(["query", "--warehouse", warehouse, "--json", "SELECT content FROM read_text('.tmp/secret.txt')"])
    out, err = capsys.readouterr()
    assert code == 2 and "TOP-SECRET" not in out and "Permission" in err


def test_a_query_past_its_time_is_stopped_in_one_line(tmp_path, capsys):
    code = main(["query", "--warehouse", _warehouse(tmp_path), "--timeout", "0.5",
                 "SELECT count(*) FROM range(100000000000) a"])
    err = capsys.readouterr().err
    assert code == 2 and "time limit of 0.5 s (--timeout raises it)" in err and len(err.splitlines()) == 1


@pytest.mark.parametrize("option, value", [("--memory-limit", "1e308"), ("--memory-limit", "12"),
                                           ("--timeout", "0"), ("--timeout", "inf"), ("--timeout", "1e308")])
def test_query_bounds_are_range_checked(tmp_path, capsys, option, value):
    with pytest.raises(SystemExit) as info:
        main(["query", "--warehouse", str(tmp_path), option, value, "SELECT 1"])
    assert info.value.code == 2 and option in capsys.readouterr().err


@pytest.mark.parametrize("value", ["-1", "1e400", "9" * 5000, "\u0661", "huge"])
def test_the_decode_pool_size_is_range_checked(tmp_path, value):
    """Before: OverflowError for a huge value, a negative one accepted."""
    run = subprocess.run([sys.executable, "-m", "chakra_core.cli", "info", str(tmp_path / "none.et")],
                         capture_output=True, text=True, env={**os.environ, "CHAKRA_DECODE_POOL_BYTES": value})
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert "CHAKRA_DECODE_POOL_BYTES" in run.stderr and len(run.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("value", ["0", "\u0661", "9" * 5000])
def test_counts_take_ascii_digits_only(capsys, value):
    with pytest.raises(SystemExit):
        main(["generate", "mlp", "--npus", value, "-o", "/nonexistent"])
    assert "--npus" in capsys.readouterr().err


def test_a_graph_naming_a_far_device_is_refused_before_any_rank_is_written(tmp_path, capsys):
    """Before: 120 bytes naming device 65535 wrote 65,536 rank files (274 MB)."""
    graph = tmp_path / "far.graph"
    graph.write_text('digraph t { node0 [label="{device_id=0|a|Forward|COMP_NODE|simulated_run_time=1}"];\n'
                     'node1 [label="{device_id=65535|b|Forward|COMP_NODE|simulated_run_time=1}"]; }\n')
    assert main(["convert", str(graph), "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "65,536 ranks" in err and "2 device(s)" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())


@pytest.mark.parametrize("argv", [["--npus", "4", "--first-dim-npus", "0"],
                                  ["--npus", "4", "--first-dim-npus", "9" * 5000]])
def test_a_text_workloads_options_are_range_checked(tmp_path, capsys, argv):
    text_workload = next((PROJECT / "datasets" / "other-formats" / "text").glob("*.txt"))
    try:  # argparse refuses a number past int's digits; the options themselves refuse 0
        code = main(["convert", str(text_workload), "-o", str(tmp_path / "out"), *argv])
    except SystemExit as exc:
        code = exc.code
    assert code == 2 and argv[-2] in capsys.readouterr().err


def test_job_json_options_are_range_checked():
    from chakra_core.convert.sources import SourceOptionError, SourceOptions

    for options in ({"npus": 4, "first_dim_npus": 0}, {"npus": 4, "first_dim_npus": True},
                    {"npus": 4, "first_dim_npus": 10**6}, {"npus": 4, "first_dim_npus": "2"}):
        with pytest.raises(SourceOptionError, match=next(k for k in options if k != "npus")):
            SourceOptions(**options)


@pytest.mark.parametrize("latency", ["1e308", "1e13"])
def test_a_latency_beyond_any_network_is_one_line(tmp_path, latency):
    """Before: OverflowError in simulate."""
    from chakra_core.errors import ChakraError
    from chakra_core.sim.config import load_network

    net = tmp_path / "net.yml"
    net.write_text(f"topology: [ Ring ]\nnpus_count: [ 4 ]\nbandwidth: [ 50 ]\nlatency: [ {latency} ]\n")
    with pytest.raises(ChakraError, match="latency"):
        load_network(str(net))


@pytest.mark.parametrize("steps", [[0], [True], [1e300], [-5]])
def test_unusable_unprofiled_step_times_are_no_measurement(tmp_path, steps):
    """Before: unprofiled_step_ns [0] divided by zero in calibrate."""
    import json

    from chakra_core.replay.calibrate import unprofiled_steps_of

    (tmp_path / "j.report.json").write_text(json.dumps({"unprofiled_step_ns": steps}))
    assert unprofiled_steps_of(str(tmp_path / "j")) is None


def test_a_report_of_a_day_the_warehouse_lacks_is_one_line(tmp_path, capsys):
    """Before: a page for any date given, and `Fleet report None` for a warehouse of empty days."""
    warehouse = str(tmp_path / "wh")
    write_day(warehouse, "traces", "2026-01-02", from_rows("traces", []))
    write_day(warehouse, "nights", "2026-01-02", [complete("nights", {"run_id": "r"})])  # a night of no job
    assert main(["report", "--warehouse", warehouse, "--date", "2031-01-01", "-o", str(tmp_path / "page")]) == 2
    err = capsys.readouterr().err
    assert "no day 2031-01-01 (its days: 2026-01-02 to 2026-01-02, 1 in all)" in err and len(err.splitlines()) == 1
    assert main(["report", "--warehouse", warehouse, "-o", str(tmp_path / "page")]) == 0
    assert "Fleet report 2026-01-02" in (tmp_path / "page" / "date=2026-01-02" / "index.html").read_text()


@pytest.mark.parametrize("stream", ['"7"', str(2**80), "-1", "true"])
def test_a_kernels_stream_is_a_whole_number_or_one_line(tmp_path, stream):
    """Before: a stream id given as a string or as 2**80 silently became stream 0."""
    from chakra_core.convert.pytorch.kineto import read_kineto
    from chakra_core.errors import ChakraError

    path = tmp_path / "rank0.kineto.json"
    path.write_text('{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "gemm", "ts": 1, "dur": 2, "tid": 7,'
                    f' "args": {{"stream": {stream}, "correlation": 3}}}}]}}')
    with pytest.raises(ChakraError, match="stream"):
        read_kineto(str(path))


@pytest.mark.parametrize("scale", ['"0.5"', "true"])
def test_a_host_overhead_scale_is_a_number(tmp_path, scale):
    from chakra_core.errors import ChakraError
    from chakra_core.sim.config import load_system

    system = tmp_path / "sys.json"
    system.write_text('{"scheduling-policy": "LIFO", "endpoint-delay": 10, "active-chunks-per-dimension": 1,'
                      ' "preferred-dataset-splits": 4, "all-reduce-implementation": ["ring"],'
                      ' "all-gather-implementation": ["ring"], "reduce-scatter-implementation": ["ring"],'
                      ' "all-to-all-implementation": ["ring"], "collective-optimization": "baseline",'
                      f' "local-mem-bw": 50, "host-overhead": {{"scale": {scale}}}}}')
    with pytest.raises(ChakraError, match="scale"):
        load_system(str(system))


def test_a_second_nodes_member_is_one_line(tmp_path):
    """Before: a second `nodes` key was read (or ignored) in silence."""
    from chakra_core.convert.pytorch.et import read_host_trace
    from chakra_core.errors import ChakraError

    real = (PROJECT / "datasets" / "pytorch-et" / "allgather_2ranks.rank0.et.json").read_text()
    twice = real.rstrip().rstrip("}") + ', "nodes": []}'
    path = tmp_path / "rank0.et.json"
    path.write_text(twice)
    with pytest.raises(ChakraError, match="'nodes' appears twice"):
        read_host_trace(str(path))


def test_a_text_workload_too_large_to_build_is_refused_before_it_is_built(tmp_path, capsys, monkeypatch):
    """Before: a 1M-layer workload, within the nodes limit, needed over 3.4 GB (ArrowMemoryError).
    The same bound, scaled down for CI time (parsing a million lines takes a minute)."""
    monkeypatch.setenv("CHAKRA_MAX_SOURCE_NODES", "100000")
    layers = 20_000
    path = tmp_path / "big.txt"
    with open(path, "w") as f:
        f.write(f"DATA\n{layers}\n")
        f.writelines(f"l{i} -1 5 NONE 0 5 NONE 0 5 ALLREDUCE 1024 5\n" for i in range(layers))
    assert main(["convert", str(path), "-o", str(tmp_path / "out"), "--npus", "2"]) == 2
    err = capsys.readouterr().err
    assert "CHAKRA_MAX_SOURCE_NODES" in err and len(err.splitlines()) == 1


def test_job_ids_from_the_warehouse_never_leave_the_report_folder(tmp_path, capsys):
    """Issue 47: a job id `../../../../x` wrote a page outside -o, one holding `://` was read as a
    URL and stopped the report, a 300-byte or NUL-holding id or a non-JSON estimate_errors cell
    stopped the whole report; `--date ''` wrote into `date=/`."""
    warehouse, out = str(tmp_path / "wh"), tmp_path / "deep" / "reports"
    ids = ["../../../../x", "a://b", "x" * 300, "nul\x00id", "plain-job"]
    day = "2026-01-02"
    write_day(warehouse, "traces", day, [complete("traces", {"job_id": j, "rank": 0, "path": f"{j}.0.et",
                                                            "nodes": 1}) for j in ids])
    write_day(warehouse, "nights", day, [complete("nights", {"run_id": "r"})])
    write_day(warehouse, "representatives", day, [complete("representatives", {
        "job_id": "plain-job", "status": "ok", "representative": True, "npus": 1, "cluster": 0, "weight": 1.0,
        "cluster_time_share": 1.0, "cluster_estimate_error": 0.0, "estimate_error": 0.0,
        "estimate_errors": "{not json"})])
    assert main(["report", "--warehouse", warehouse, "--date", day, "-o", str(out)]) == 0
    written = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*.html"))
    assert all(str(p).startswith("deep/reports/") for p in written), written
    pages = sorted(p.name for p in (out / f"date={day}").glob("job=*.html"))
    assert len(pages) == len(ids) and "job=plain-job.html" in pages
    assert all(len(name.encode()) < 200 and "/" not in name and "\x00" not in name for name in pages)
    capsys.readouterr()
    with pytest.raises(SystemExit) as usage:
        main(["report", "--warehouse", warehouse, "--date", "", "-o", str(out)])
    assert usage.value.code == 2 and "'' is not a day: give YYYY-MM-DD" in capsys.readouterr().err
    assert not (out / "date=").exists()


def test_kernel_names_of_a_kineto_trace_reach_the_terminal_as_text(tmp_path):
    """Issue 47: NCCL kernel names holding ESC/OSC sequences or U+202E reached stderr raw in the
    notes of `chakra convert` of Kineto traces alone."""
    import gzip

    trace = json.loads(gzip.decompress((PROJECT / "datasets" / "kineto-nccl" / "recsys-w16-rank0" /
                                        "rank0.kineto.json.gz").read_bytes()))
    nccl = [e for e in trace["traceEvents"] if isinstance(e, dict) and e.get("cat") == "kernel"
            and e["name"].startswith("nccl")]
    nccl[0]["name"] = "ncclKernel_\x1b]52;c;cHduZWQ=\x07Evil\u202eRING(ncclDevComm*)"
    (tmp_path / "job").mkdir()
    (tmp_path / "job" / "rank0.kineto.json.gz").write_bytes(gzip.compress(json.dumps(trace).encode()))
    run = subprocess.run([sys.executable, "-m", "chakra_core.cli", "convert", str(tmp_path / "job"), "-o",
                          str(tmp_path / "out")], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "\x1b" not in run.stderr and "\u202e" not in run.stderr and "\x07" not in run.stderr
    assert "ncclKernel_\\x1b]52;c;cHduZWQ=\\x07Evil\\u202eRING" in run.stderr
