"""Output that survives a pipe or a log: no value truncated or wrapped when stdout is not a
terminal; `chakra --version`."""

from __future__ import annotations

import subprocess
import sys

from datapaths import MICROBENCHMARKS
from et_builders import attr, metadata, node, write_et


def _chakra(*argv: str) -> str:
    """The command's stdout through a pipe, as `chakra ... | cat` sees it."""
    run = subprocess.run([sys.executable, "-m", "chakra_core.cli", *argv], capture_output=True, text=True,
                         env={"COLUMNS": "40", "PATH": "/usr/bin:/bin"})
    assert run.returncode == 0, run.stderr
    return run.stdout


def _deep_trace(tmp_path, name: str) -> str:
    """A trace whose path is far longer than any terminal line, with a long metadata value."""
    folder = tmp_path.joinpath(*[f"a-rather-long-folder-name-{i}" for i in range(4)])
    folder.mkdir(parents=True, exist_ok=True)
    path = str(folder / name)
    nodes = [node(1, "compute", 4, [attr("num_ops", "int64_val", 123_456_789_012)], dur=987_654_321),
             node(2, "grads", 7, [attr("comm_type", "int64_val", 0), attr("comm_size", "int64_val", 9_876_543_210)],
                  data_deps=[1])]
    write_et(path, metadata("0.0.4", [attr("note", "string_val", "n" * 300)]), nodes)
    return path


def test_version():
    assert _chakra("--version").strip().startswith("chakra-fleet 0.")


def test_stats_in_a_pipe_keeps_paths_and_numbers_whole(tmp_path):
    paths = [_deep_trace(tmp_path, f"job.{rank}.et") for rank in (0, 1)]
    out = _chakra("stats", *paths)
    rows = [line for line in out.splitlines() if line.split()[0] in paths]
    assert len(rows) == 2 and "987,654,321" in rows[0]  # compute µs, whole
    job = paths[0][:-len(".0.et")]
    assert any(line.startswith(f"{job}: 2 ranks; communication bytes max/mean 1.00") for line in out.splitlines())


def test_info_in_a_pipe_keeps_long_metadata_and_the_path(tmp_path):
    path = _deep_trace(tmp_path, "one.0.et")
    out = _chakra("info", path)
    assert path in out.splitlines() and f"note: {'n' * 300}" in out


def test_simulate_in_a_pipe_is_one_row_per_npu():
    prefix = MICROBENCHMARKS / "all_reduce" / "4npus_1MB" / "all_reduce"
    configs = MICROBENCHMARKS.parent / "astra-sim-reference" / "configs"
    out = _chakra("simulate", "--workload", str(prefix), "--network", str(configs / "Ring_4npus.yml"),
                  "--system", str(configs / "Ring_4chunks.json"))
    rows = [line.split() for line in out.splitlines()[1:5]]
    assert [r[0] for r in rows] == ["0", "1", "2", "3"] and all(r[1] == "43,000" for r in rows)
