"""`chakra calibrate`: the fit recovers known parameters, and measures a real gloo runtime."""

from __future__ import annotations

import json

import pytest

from chakra_core.cli import main
from chakra_core.generate.builder import JobBuilder
from chakra_core.replay.calibrate import (
    CalibrationError,
    fit,
    measure,
    write_calibration,
)
from chakra_core.sim.config import load_network, load_system
from chakra_core.sim.engine import simulate


def _simulated(network, system, kind: str, npus: int, size: int) -> int:
    job = JobBuilder(npus)
    for rank in range(npus):
        job.rank(rank).collective("probe", kind.upper(), size, [])
    return simulate(job.tables(), network, system).finish_ns


@pytest.mark.parametrize("npus", [2, 4, 8])
def test_synthetic_measurements_give_back_the_network_they_came_from(tmp_path, npus):
    known = {"latency_ns": 1500.0, "bandwidth_gbps": 25.0}
    paths = write_calibration(str(tmp_path / "known"), npus, known | {"samples": [], "median_abs_error": 0.0})
    network, system = load_network(paths["network"]), load_system(paths["system"])
    samples = [(kind, npus, size, _simulated(network, system, kind, npus, size))
               for kind in ("all_reduce", "all_gather", "reduce_scatter") for size in (1 << 12, 1 << 16, 1 << 22)]
    result = fit(samples)
    assert result["latency_ns"] == pytest.approx(1500, rel=1e-3)
    assert result["bandwidth_gbps"] == pytest.approx(25, rel=1e-4)
    assert result["median_abs_error"] < 1e-4


def test_one_size_is_not_enough():
    with pytest.raises(CalibrationError, match="need at least two sizes"):
        fit([("all_reduce", 2, 1024, 5000), ("all_reduce", 2, 1024, 6000)])


def test_measured_on_gloo_the_configs_simulate_the_sweep(tmp_path, capsys):
    samples = measure(2, sizes=(1 << 12, 1 << 16, 1 << 20), iterations=3)
    assert [(k, n, s) for k, n, s, _ in samples] == [("all_reduce", 2, 1 << 12), ("all_reduce", 2, 1 << 16),
                                                      ("all_reduce", 2, 1 << 20)]
    assert all(ns > 0 for *_, ns in samples)
    assert main(["calibrate", "--npus", "4", "--measure", "-o", str(tmp_path), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    network, system = load_network(document["network"]), load_system(document["system"])
    assert network.npus == 4 and document["bandwidth_gbps"] > 0
    row = document["samples"][-1]  # what the fit says of a sample is what the simulator gives with the files
    assert row["npus"] == 4
    assert _simulated(network, system, row["kind"], 4, row["bytes"]) == pytest.approx(row["fitted_ns"], rel=1e-3)


def test_the_compute_scale_compares_a_measurement_with_the_recorded_span(tmp_path, capsys):
    from datapaths import GLOO

    from chakra_core.convert.pytorch.job import convert_job
    from chakra_core.format.etfile import read_table
    from chakra_core.replay.plan import recorded_ns

    result = convert_job(str(GLOO / "mlp_ddp-w2"), str(tmp_path / "mlp"), "mlp")
    span = max(recorded_ns(read_table(url)) for url in result.et_files)
    prefix = str(tmp_path / "mlp" / "mlp")
    assert main(["calibrate", prefix, "--npus", "2", "-o", str(tmp_path / "cal"), "--measured-ms",
                 str(span / 2e6), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["compute_scale"] == pytest.approx(0.5)
    assert json.loads((tmp_path / "cal" / "calibration.json").read_text())["compute_scale"] == pytest.approx(0.5)


def test_a_calibrated_network_does_not_count_a_blocking_call_twice(tmp_path):
    """The converter keeps a blocking gloo call's own duration on a CPU node (gloo:<op>); a
    network fitted to gloo times the call's whole cost, so the calibrated system (its
    call-time-in-network key) takes those nodes as no time: each NPU's host time is lower by
    exactly their durations, and nothing else moves."""
    from datapaths import GLOO

    from chakra_core.convert.pytorch.job import convert_job
    from chakra_core.format.etfile import read_table
    from chakra_core.format.job import read_comm_groups
    from chakra_core.replay.calibrate import samples_from_tables
    from chakra_core.sim.files import simulate_files

    result = convert_job(str(GLOO / "collectives-w2"), str(tmp_path), "job")
    tables = [read_table(url) for url in result.et_files]
    groups = read_comm_groups(result.comm_group_file)
    paths = write_calibration(str(tmp_path / "cal"), 2, fit(samples_from_tables(tables, groups, 2)))
    assert load_system(paths["system"]).call_time_in_network
    document = json.loads((tmp_path / "cal" / "system.json").read_text())
    del document["call-time-in-network"]
    (tmp_path / "counted_twice.json").write_text(json.dumps(document))
    calibrated, _ = simulate_files(str(tmp_path / "job"), paths["network"], paths["system"], result.comm_group_file)
    twice, _ = simulate_files(str(tmp_path / "job"), paths["network"], str(tmp_path / "counted_twice.json"),
                              result.comm_group_file)
    own = [sum(r["duration_micros"] * 1000 for r in t.select(["name", "duration_micros"]).to_pylist()
               if r["name"].startswith("gloo:")) for t in tables]
    assert own[0] > 10_000_000
    assert [b.cpu_ns - a.cpu_ns for a, b in zip(calibrated.npus, twice.npus)] == own
    assert [a.comm_ns for a in calibrated.npus] == [b.comm_ns for b in twice.npus]
    assert calibrated.finish_ns < twice.finish_ns
    assert json.loads(load_system(paths["system"]).to_astra_sim_json())["call-time-in-network"] == 1


def test_a_sweep_file_takes_the_calibrated_configs_as_written(tmp_path):
    """The nightly flow's `calibrated` row: a sweep entry naming the written files (relative to
    the sweep file) loads them as they are, the call-time key included."""
    from pipeline.simulation import load_sweep

    write_calibration(str(tmp_path / "cal"), 4, {"latency_ns": 2000.0, "bandwidth_gbps": 25.0, "samples": [],
                                                  "median_abs_error": 0.0})
    sweep_file = tmp_path / "sweep.yaml"
    sweep_file.write_text("systems:\n  - {name: calibrated, network: cal/network.yml, system: cal/system.json}\n")
    (spec,) = load_sweep(str(sweep_file))
    assert spec.name == "calibrated" and spec.network.npus == 4 and spec.system.call_time_in_network


def test_each_collective_alone_gives_back_the_network_and_the_cli_names_a_bad_kind(tmp_path, capsys):
    from chakra_core.replay.calibrate import fit_per_kind

    known = {"latency_ns": 800.0, "bandwidth_gbps": 40.0, "samples": [], "median_abs_error": 0.0}
    paths = write_calibration(str(tmp_path / "known"), 4, known)
    network, system = load_network(paths["network"]), load_system(paths["system"])
    samples = [(kind, 4, size, _simulated(network, system, kind, 4, size))
               for kind in ("all_reduce", "all_gather") for size in (1 << 12, 1 << 16, 1 << 22)] + [("all_to_all", 4, 1024, 5)]
    per_kind = fit_per_kind(samples)
    assert sorted(per_kind) == ["all_gather", "all_reduce"]  # one size of all_to_all: nothing to fit
    for alone in per_kind.values():
        assert alone["latency_ns"] == pytest.approx(800, rel=1e-3) and alone["bandwidth_gbps"] == pytest.approx(40, rel=1e-3)
    with pytest.raises(SystemExit) as exit_info:
        main(["calibrate", "--npus", "2", "-o", str(tmp_path / "x"), "--measure", "--kinds", "all_reduce,broadcast"])
    assert exit_info.value.code == 2 and "broadcast: expected some of" in capsys.readouterr().err
    with pytest.raises(CalibrationError, match="gloo has no reduce-scatter"):
        measure(2, kinds=("reduce_scatter",))


def test_a_damaged_report_and_absurd_arguments_are_one_line(tmp_path, capsys):
    """Issue 47: `chakra calibrate` on a bad report named no key; `--npus 100000000` and
    `--measured-ms 1e300` were accepted."""
    from datapaths import GPU_H200

    assert main(["convert", str(GPU_H200 / "mlp_tiny"), "-o", str(tmp_path / "job")]) == 0
    report = tmp_path / "job" / "trace.report.json"
    document = json.loads(report.read_text())
    document["ranks_report"][0]["device_timing"]["launch_latency_ns"] = "x"
    report.write_text(json.dumps(document))
    capsys.readouterr()
    assert main(["calibrate", str(tmp_path / "job" / "trace"), "--npus", "1", "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "trace.report.json: ranks_report[0].device_timing.launch_latency_ns: 'x' is not a time" in err
    assert err.count("\n") == 1
    for option, value in (("--npus", "100000000"), ("--measured-ms", "1e300")):
        with pytest.raises(SystemExit) as usage:
            main(["calibrate", "--npus", "8", option, value, "-o", str(tmp_path / "out")])
        assert usage.value.code == 2 and value in capsys.readouterr().err
