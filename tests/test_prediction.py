"""The simulated time of each recorded DDP job stays near what its trace measured: the
converter's graph neither counts time twice nor loses it (docs/replay.md). The recorded span
is the trace's own (profiled) time; the network is the reference ring."""

from __future__ import annotations

import pytest
from datapaths import GLOO, REFERENCE_CONFIGS

from chakra_core.convert.job import convert_job
from chakra_core.format.etfile import read_table
from chakra_core.replay.launch import recorded_ns
from chakra_core.sim.workload import simulate_files


@pytest.mark.parametrize("run", ["mlp_ddp-w2", "mlp_ddp-w4", "transformer_ddp-w2", "transformer_ddp-w4"])
def test_simulated_ddp_jobs_finish_within_20_percent_of_their_recorded_span(tmp_path, run):
    result = convert_job(str(GLOO / run), str(tmp_path), "job")
    ranks = len(result.ranks)
    network = tmp_path / "ring.yml"
    network.write_text(f"topology: [ Ring ]\nnpus_count: [ {ranks} ]\nbandwidth: [ 50.0 ]\nlatency: [ 500.0 ]\n")
    simulated, _ = simulate_files(str(tmp_path / "job"), str(network), str(REFERENCE_CONFIGS / "Ring_4chunks.json"),
                                  result.comm_group_file)
    recorded = max(recorded_ns(read_table(url)) for url in result.et_files)
    assert abs(simulated.finish_ns / recorded - 1) < 0.20, (simulated.finish_ns, recorded)
