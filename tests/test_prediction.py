"""The simulated time of each recorded job stays near what its trace measured (docs/replay.md,
'How close predictions come'). The recorded span is the trace's own (profiled) time.

Two kinds of job, two networks:
- the DDP runs wait for gloo's all-reduces at the end of backward, in no operator: the
  converter leaves that wait to the simulator (docs/ingestion.md), so their network must be
  gloo's as measured, fitted on the job's own collectives (`chakra calibrate PREFIX`);
- the runs of blocking calls keep each call's own duration on a CPU node, so their network is
  the reference ring, which adds next to nothing.

The recordings are fixed files and simulation is deterministic, so every error is a fixed
number (docs/replay.md lists them); the bound is what the method is held to.
`mlp_ddp-w2` is the exception the method predicts: its recorded all-reduces stalled (the same
all-reduce took four times longer in the first recorded step than in the second, on both
ranks), and no model of steady communication follows a stall; the test asserts the stall."""

from __future__ import annotations

from collections import defaultdict

import pytest
from datapaths import GLOO, REFERENCE_CONFIGS

from chakra_core.convert.pytorch.job import convert_job
from chakra_core.format.etfile import read_table
from chakra_core.format.job import read_comm_groups
from chakra_core.replay.calibrate import fit, samples_from_tables, write_calibration
from chakra_core.replay.plan import recorded_ns
from chakra_core.sim.files import simulate_files

DDP = ["mlp_ddp-w4", "transformer_ddp-w2", "transformer_ddp-w4"]
STALLED = "mlp_ddp-w2"
# many blocking calls (all_to_all; every collective and point-to-point call on the world and on
# sub-groups): their time is the calls' host time, their own duration and the waits between ranks
BLOCKING = ["dlrm-w2", "dlrm-w4", "collectives-w2", "collectives-w4"]
BOUND = 0.20


def _converted(tmp_path, run: str):
    result = convert_job(str(GLOO / run), str(tmp_path), "job")
    tables = [read_table(url) for url in result.et_files]
    return result, tables, max(recorded_ns(t) for t in tables)


def _calibrated(tmp_path, result, tables) -> tuple[str, str]:
    groups = read_comm_groups(result.comm_group_file) if result.comm_group_file else None
    paths = write_calibration(str(tmp_path / "calibrated"), len(tables),
                              fit(samples_from_tables(tables, groups, len(tables))))
    return paths["network"], paths["system"]


def _reference(tmp_path, npus: int) -> tuple[str, str]:
    network = tmp_path / "ring.yml"
    network.write_text(f"topology: [ Ring ]\nnpus_count: [ {npus} ]\nbandwidth: [ 50.0 ]\nlatency: [ 500.0 ]\n")
    return str(network), str(REFERENCE_CONFIGS / "Ring_4chunks.json")


def _simulated(tmp_path, run: str, network_of) -> tuple[int, int]:
    result, tables, recorded = _converted(tmp_path, run)
    network, system = network_of(tmp_path, result, tables)
    simulated, _ = simulate_files(str(tmp_path / "job"), network, system, result.comm_group_file)
    return simulated.finish_ns, recorded


@pytest.mark.parametrize("run", DDP)
def test_ddp_jobs_on_their_calibrated_network_finish_near_their_recorded_span(tmp_path, run):
    simulated, recorded = _simulated(tmp_path, run, _calibrated)
    assert abs(simulated / recorded - 1) < BOUND, (simulated, recorded)


@pytest.mark.parametrize("run", BLOCKING)
def test_jobs_of_blocking_calls_on_the_reference_ring_finish_near_their_recorded_span(tmp_path, run):
    simulated, recorded = _simulated(tmp_path, run, lambda folder, result, tables: _reference(folder, len(tables)))
    assert abs(simulated / recorded - 1) < BOUND, (simulated, recorded)


def test_a_recording_whose_communication_stalled_is_the_one_not_followed(tmp_path):
    result, tables, recorded = _converted(tmp_path, STALLED)
    durations = defaultdict(list)  # (rank, size) -> the all-reduce's recorded durations, step by step
    for rank, table in enumerate(tables):
        for row in table.select(["comm_type", "comm_size", "duration_micros"]).to_pylist():
            if row["comm_type"] == 0:
                durations[(rank, row["comm_size"])].append(row["duration_micros"])
    assert all(max(d) > 3 * min(d) for d in durations.values()), durations
    network, system = _calibrated(tmp_path, result, tables)
    simulated, _ = simulate_files(str(tmp_path / "job"), network, system, result.comm_group_file)
    assert simulated.finish_ns < (1 - BOUND) * recorded
