"""Issue 49's errors of the command line: each one line that says what to do (a day spelt
otherwise, a job or a day the warehouse does not hold, a folder of jobs given to convert, a
network file given as a system, a list given to a one-number option), and the forms a user
tries first accepted (`chakra diff --date` alone, `chakra stats` of a job's prefix or folder)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chakra_core.cli import main
from pipeline import tables
from table_rows import complete

REPO = Path(__file__).resolve().parents[1]
GLOO = REPO / "datasets" / "pytorch-gloo"
RING_NETWORK = REPO / "datasets" / "astra-sim-reference" / "configs" / "Ring_8npus.yml"
DAYS = ("2026-11-01", "2026-11-02", "2026-11-04")  # no night on 2026-11-03


def _one_line(capsys, argv: list[str]) -> str:
    """The command's error: exit 2, one line on stderr, nothing on stdout (no empty table)."""
    try:
        code = main(argv)
    except SystemExit as usage:  # argparse's refusal
        code = usage.code
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and err.count("\n") == 1 and "Error:" not in err, (code, out, err)
    return err


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory) -> str:
    """job_history of two jobs over three nights, gpu-gpt slower on the last."""
    url = str(tmp_path_factory.mktemp("cli-errors") / "wh")
    for i, day in enumerate(DAYS):
        tables.write_day(url, "job_history", day, [
            complete("job_history", {"job_id": job, "fingerprint": "f", "metric": "step_ns", "value": value,
                                     "unit": "ns", "run_id": f"r{i}"})
            for job, value in (("gpu-gpt", 1e8 * (1.5 if day == DAYS[-1] else 1.0)), ("gen-dp-000-n8", 2e8))])
    return url


def _diff(capsys, warehouse: str, *options: str) -> dict:
    assert main(["diff", "--warehouse", warehouse, "--json", *options]) == 0
    return json.loads(capsys.readouterr().out)


def test_diff_takes_the_jobs_last_day_and_the_day_before_it_by_default(warehouse, capsys):
    assert _diff(capsys, warehouse, "--job", "gpu-gpt")["before"] == "gpu-gpt on 2026-11-02"
    found = _diff(capsys, warehouse, "--job", "gpu-gpt", "--date", "2026-11-04")
    assert (found["before"], found["after"]) == ("gpu-gpt on 2026-11-02", "gpu-gpt on 2026-11-04")  # no 11-03
    step = next(c for c in found["changes"] if c["metric"] == "step_ns")
    assert step["change"] == pytest.approx(0.5)
    found = _diff(capsys, warehouse, "--job", "gpu-gpt", "--date", "2026-11-02", "--against", "2026-11-01")
    assert (found["before"], found["after"]) == ("gpu-gpt on 2026-11-01", "gpu-gpt on 2026-11-02")


@pytest.mark.parametrize("options, words", [
    (["--job", "gpu-gpt", "--date", "12/02/2026"], "'12/02/2026' is not a day: give YYYY-MM-DD, such as 2026-12-02"),
    (["--job", "gpu_gpt"], "no job 'gpu_gpt' in the warehouse: did you mean gpu-gpt? (its jobs: gen-dp-000-n8, "
                           "gpu-gpt)"),
    (["--job", "gpu-gpt", "--date", "2026-11-03"], "job gpu-gpt has no figures on 2026-11-03 (its days: 2026-11-01, "
                                                   "2026-11-02, 2026-11-04)"),
    (["--job", "gpu-gpt", "--date", "2026-11-04", "--against", "2026-10-31"], "no figures on 2026-10-31 (its days"),
    (["--job", "gpu-gpt", "--date", "2026-11-01"], "job gpu-gpt has no day before 2026-11-01 to compare with"),
])
def test_diff_names_the_jobs_and_days_there_are(warehouse, capsys, options, words):
    assert words in _one_line(capsys, ["diff", "--warehouse", warehouse, *options])


def test_convert_of_a_folder_of_jobs_says_to_convert_one_and_that_works(tmp_path, capsys):
    for folder, jobs in ((GLOO, 8), (REPO / "datasets" / "jax-cpu", 2)):
        err = _one_line(capsys, ["convert", str(folder), "-o", str(tmp_path / "out")])
        assert f"a folder of {jobs} jobs" in err and "not one job: convert one at a time" in err
    suggested = err.split("(chakra ", 1)[1].split(")", 1)[0].split()  # the JAX folder's suggestion
    assert main(suggested) == 0 and list((tmp_path / "out" / "mlp_dp").glob("trace.*.et"))


def test_stats_takes_a_prefix_or_a_folder_as_diff_and_simulate_do(tmp_path, capsys):
    out = tmp_path / "mlp"
    assert main(["convert", str(GLOO / "mlp_ddp-w2"), "-o", str(out), "--prefix", "mlp"]) == 0
    capsys.readouterr()
    files = [str(out / f"mlp.{rank}.et") for rank in (0, 1)]
    shown = []
    for given in (files, [str(out / "mlp")], [str(out)]):
        assert main(["stats", "--json", *given]) == 0
        document = json.loads(capsys.readouterr().out)
        shown.append(([t["path"] for t in document["traces"]], [j["job"] for j in document["jobs"]]))
    assert shown == [(files, [str(out / "mlp")])] * 3


def test_stats_says_a_network_file_is_one_and_prints_no_empty_table(tmp_path, capsys):
    err = _one_line(capsys, ["stats", "--system", str(RING_NETWORK), str(tmp_path / "x.0.et")])
    assert "Ring_8npus.yml: this is a network file (topology, bandwidth, latency); a system file is expected" in err
    assert "no such file" in _one_line(capsys, ["stats", str(tmp_path / "nothing")])
