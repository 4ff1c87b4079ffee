"""Every command of README.md and docs/*.md runs as written (issue 49): the `$ ` lines of the
console blocks and the lines of the bash blocks, and the queries of the sql blocks through
`chakra query`, each doc's in one shell in its order (a doc's variables and outputs carry over
to its later commands), in a folder laid out as the checkout (`datasets/`, `pipeline/`,
`.venv`) whose `out/warehouse` is a real small night's: two days of the nightly's own command
line, on the days ./run.sh picks (tools/drift.py), so no date is written in a doc or here.
NOT_RUN names each command left out and why (a GPU, a server, the network, hours of
benchmark, a synopsis); an entry that matches no command fails, as a command that fails does.

The night's command line also shows that its output comes as it is printed into a pipe:
a night's summary is read well before the run ends."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tools import drift
from tools import make_drop as md

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
PYTHON_BIN = Path(sys.executable).parent
# a command as written (a regular expression its text starts with) -> why it is not run here
NOT_RUN = {
    r"\./run\.sh": "the main job itself, minutes long; its nightly command runs here on a smaller drop",
    r"\./test\.sh|\.venv/bin/python -m pytest": "the test suite, this test among it",
    r"\.venv/bin/python tests/benchmarks/": "a benchmark: minutes to hours, run and recorded by hand (benchmarks.md)",
    r"python -m flows\.(nightly|sweep) --(date|sweep) (YYYY-MM-DD|FILE)": "the synopsis of the command",
    r"chakra query --warehouse out/warehouse \"SELECT \.\.\.\"": "the synopsis of a query",
    r"python -m flows\.nightly --date \S+$": "the nightly on the checkout's own out/ folders (its defaults); "
                                             "the same command runs here with folders of its own",
    r"scripts/setup\.sh|uv pip compile|pip install": "installs from the package registry (the network)",
    r"export AWS_|.*s3://": "needs an S3 endpoint and its credentials",
    r"export RAY_ADDRESS|ray (up|attach|down)|kubectl": "needs a Ray cluster",
    r"export PREFECT_API_URL|prefect ": "needs a Prefect server",
    r"chakra plot (sweep|pareto) WAREHOUSE/|.*WHERE sweep = 'big'": "reads the sweep `big` of the example "
                                                                         "above, which runs on S3",
    r".* FROM sweep_results": "reads an ad hoc sweep's table, which no night writes (sweeps.md)",
    r"\.venv/bin/python -m chakra_core\.format\.schema\.regenerate\s+#": "rewrites a file of the checkout",
    r"python -m tools\.(collect|profcost) .*--device cuda|.* --platform gpu": "records on a GPU",
    r"chakra stats out/mlp_ddp-cuda-w1/": "reads the GPU run recorded by the command above it",
    r"chakra validate bomb|CHAKRA_MAX_NODES=\S+ chakra stats huge": "hostile input as an example "
                                                                      "(tests/test_hostile_input.py makes such files)",
}
CHECKOUT_FOLDERS = ("datasets", "pipeline", ".venv")


def commands(doc: Path) -> list[tuple[int, str, str]]:
    """(line, kind, text) of every command in the doc's fenced blocks: kind `shell` or `sql`."""
    found, fence, pending = [], None, None
    for number, line in enumerate(doc.read_text().split("\n"), 1):
        opened = re.match(r"^\s*```(\w*)", line)
        if opened:
            fence = None if fence is not None else opened[1]
            continue
        text = line.strip()
        if pending is not None:  # a command's next line: after a backslash, inside a quote or a query's
            joined = pending[1] == "sql" or _open_quote(pending[2])
            pending[2] = f"{pending[2]}\n{text}" if joined else f"{pending[2][:-1]} {text}"
        elif fence == "console" and text.startswith("$ ") or fence == "bash" and text and not text.startswith("#"):
            pending = [number, "shell", text.removeprefix("$ ")]
        elif fence == "sql" and text and not text.startswith("--"):
            pending = [number, "sql", text]
        if pending is not None and _complete(pending):
            found.append(tuple(pending))
            pending = None
    return found


def _open_quote(text: str) -> bool:
    try:
        shlex.split(text, comments=True)
    except ValueError:  # "No closing quotation"
        return True
    return False


def _complete(command: list) -> bool:
    _, kind, text = command
    if kind == "sql":
        return text.rstrip().endswith(";")
    return not text.endswith("\\") and not _open_quote(text)


def not_run(text: str) -> str | None:
    return next((why for pattern, why in NOT_RUN.items() if re.match(pattern, text, re.DOTALL)), None)


@pytest.fixture(scope="module")
def night(tmp_path_factory) -> tuple[Path, list[tuple[float, str]], float]:
    """(the folder, the night's stdout lines with when each was read, when the run ended)."""
    work = tmp_path_factory.mktemp("docs")
    for name in CHECKOUT_FOLDERS:
        (work / name).symlink_to(REPO / name)
    days = drift.demo_days()
    for day in days:
        md.make_drop(str(work / "out" / "drops"), day, generated_jobs=1, copies_of_real=0)
        _gpu_gpt(work / "out" / "drops" / day / "gpu-gpt", slower=day == days[-1])
    slow_endpoints = {**json.loads((REPO / "pipeline" / "sweeps" / "ring_system.json").read_text()),
                      "endpoint-delay": 1000}  # other finishes for jobs that communicate, alike for one rank
    (work / "slow_endpoints.json").write_text(json.dumps(slow_endpoints))
    (work / "sweep.yaml").write_text("systems:\n  - {name: ring-native, network: native-ring, system: reference}\n"
                                     "  - {name: ring-native-slow, network: native-ring, "
                                     "system: slow_endpoints.json}\n")
    run = subprocess.Popen([sys.executable, "-m", "flows.nightly", *(f"--date={d}" for d in days), "--source",
                            "out/drops", "--warehouse", "out/warehouse", "--sweep", "sweep.yaml", "--num-cpus", "2",
                            "--synthetic-jobs", "0"], cwd=work, env=_env(), stdout=subprocess.PIPE, text=True)
    lines = [(time.monotonic(), line.rstrip("\n")) for line in run.stdout]
    assert run.wait(timeout=600) == 0
    return work, lines, time.monotonic()


def _gpu_gpt(job: Path, slower: bool) -> None:
    """The GPU run the README's diff names; on the last day its GEMMs 40% slower, as ./run.sh's."""
    shutil.copytree(REPO / "datasets" / "gpu-h200" / "gpt", job)
    if slower:
        for kineto in job.glob("*.kineto.json.gz"):
            kineto.write_bytes(drift.drifted_kineto(kineto.read_bytes(), 1.0, 1.4))


def _env() -> dict[str, str]:
    import os

    return {**os.environ, "PYTHONPATH": str(REPO), "PATH": f"{PYTHON_BIN}{os.pathsep}{os.environ['PATH']}"}


def test_the_nightly_prints_each_line_as_it_comes_into_a_pipe(night):
    _, lines, ended = night
    heads = [(at, line) for at, line in lines if re.match(r"nightly \S+ \(run ", line)]
    # each stage's line as the stage ends, the first night's summary before the second night ran
    assert len(heads) == 2 and heads[0][0] - lines[0][0] > 1.0 and ended - heads[0][0] > 1.0, lines
    stages = [line for _, line in lines if re.match(r"nightly \S+: simulate \(Ray\): ", line)]
    assert len(stages) == 2 and all(re.search(r", 0 failed \(.*\) \([0-9.]+ s\)$", s) for s in stages)
    # rejected files are counted as files, with the jobs they belong to; simulations with those that failed
    for _, line in heads:
        files = re.search(r"; \d+ files read, (\d+) files rejected \((\d+) in (\d+) job\(s\): chakra query "
                          r"\"SELECT \* FROM rejects WHERE date = '\S+'\"\); 6 simulations, 0 failed$", line)
        assert files and files[1] == files[2] and int(files[1]) > int(files[3]) > 1, line  # (make_drop's bad jobs)
    # a one-rank job finishes alike on every system: no best system
    assert sum(re.fullmatch(r"gpu-gpt +none: all 2 tie +[0-9.,]+", line.strip()) is not None for _, line in lines) == 2


def test_the_flows_send_no_usage_data():
    """An air-gapped fleet: no Prefect telemetry (nor its first-run notice on a terminal), no Ray
    usage statistics, unless the environment asks for them."""
    code = ("import os, flows.nightly; from prefect._internal.analytics import is_telemetry_enabled; "
            "print(is_telemetry_enabled(), os.environ['RAY_USAGE_STATS_ENABLED'])")
    env = {k: v for k, v in _env().items() if k not in ("DO_NOT_TRACK", "RAY_USAGE_STATS_ENABLED")}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert run.stdout.split() == ["False", "0"], run.stderr


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: str(d.relative_to(REPO)))
def test_every_command_of_the_doc_runs_as_written(night, doc, capsys):
    from chakra_core.cli import main

    work, _, _ = night
    found = commands(doc)
    shell = [(line, text) for line, kind, text in found if kind == "shell" and not not_run(text)]
    shell = [(line, text) for i, (line, text) in enumerate(shell) if _bare(text) not in map(_bare, (t for _, t in
                                                                                                  shell[:i]))]
    failed = _run_shell(work, shell, doc)
    for line, _, sql in (c for c in found if c[1] == "sql" and not not_run(c[2])):
        if main(["query", "--warehouse", str(work / "out" / "warehouse"), sql]) != 0:
            failed.append(f"{doc.name}:{line}: {sql}: {capsys.readouterr().err}")
    assert failed == []


def _bare(command: str) -> list[str]:
    """The command without its comment: one shown again (gpu.md's calibration) runs once."""
    return shlex.split(command, comments=True)


def _run_shell(work: Path, shell: list[tuple[int, str]], doc: Path) -> list[str]:
    """The commands in one bash, in order; each that exits other than 0, with its stderr."""
    logs = work / "out" / ".docs" / doc.stem
    logs.mkdir(parents=True, exist_ok=True)
    script = "".join(f"{{\n{text}\n}} >{logs}/{line}.out 2>{logs}/{line}.err; echo $? >{logs}/{line}.rc\n"
                     for line, text in shell)
    subprocess.run(["bash", "-c", script], cwd=work, env=_env(), timeout=600, check=True)
    return [f"{doc.name}:{line}: {text} -> {(logs / f'{line}.rc').read_text().strip()}: "
            f"{(logs / f'{line}.err').read_text()[-2000:]}" for line, text in shell
            if (logs / f"{line}.rc").read_text().strip() != "0"]


def test_each_command_left_out_is_in_the_docs_with_its_reason():
    texts = [text for doc in DOCS for _, _, text in commands(doc)]
    assert [pattern for pattern in NOT_RUN if not any(re.match(pattern, t, re.DOTALL) for t in texts)] == []
    assert len(texts) > 60 and sum(not not_run(t) for t in texts) > 30  # the extraction finds the commands
