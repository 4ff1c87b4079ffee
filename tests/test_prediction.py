"""The simulated time of each recorded job stays near what its trace measured: the
converter's graph neither counts time twice nor loses it (docs/replay.md, 'How close
predictions come'). The recorded span is the trace's own (profiled) time; the network is the
reference ring.

The recordings are fixed files and the simulation is deterministic, so each job's error is a
fixed number (docs/replay.md lists them: -12% to +16%); the bound is what the method is held
to, with room for a re-recording (tools/collect.py) on a loaded 2-core machine, where ranks
leave a collective at different times and 4 ranks share 2 cores."""

from __future__ import annotations

import pytest
from datapaths import GLOO, REFERENCE_CONFIGS

from chakra_core.convert.job import convert_job
from chakra_core.format.etfile import read_table
from chakra_core.replay.launch import recorded_ns
from chakra_core.sim.workload import simulate_files

DDP = ["mlp_ddp-w2", "mlp_ddp-w4", "transformer_ddp-w2", "transformer_ddp-w4"]
# many blocking calls (all_to_all; every collective and point-to-point call on the world and on
# sub-groups): their time is the calls' host time, their own duration and the waits between ranks
BLOCKING = ["dlrm-w2", "dlrm-w4", "collectives-w2", "collectives-w4"]


def _simulated_and_recorded(tmp_path, run: str) -> tuple[int, int]:
    result = convert_job(str(GLOO / run), str(tmp_path), "job")
    ranks = len(result.ranks)
    network = tmp_path / "ring.yml"
    network.write_text(f"topology: [ Ring ]\nnpus_count: [ {ranks} ]\nbandwidth: [ 50.0 ]\nlatency: [ 500.0 ]\n")
    simulated, _ = simulate_files(str(tmp_path / "job"), str(network), str(REFERENCE_CONFIGS / "Ring_4chunks.json"),
                                  result.comm_group_file)
    recorded = max(recorded_ns(read_table(url)) for url in result.et_files)
    return simulated.finish_ns, recorded


@pytest.mark.parametrize("run", DDP + BLOCKING)
def test_simulated_jobs_finish_within_20_percent_of_their_recorded_span(tmp_path, run):
    simulated, recorded = _simulated_and_recorded(tmp_path, run)
    assert abs(simulated / recorded - 1) < 0.20, (simulated, recorded)
