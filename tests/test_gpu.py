"""GPU traces (docs/gpu.md): the shipped H200 runs simulate as recorded near their recorded span,
and, with the host-overhead model fitted on the one-GPU runs, near their time without the profiler."""

from __future__ import annotations

import json

import pytest
from datapaths import DATASETS, REFERENCE_CONFIGS

from chakra_core.cli import main
from chakra_core.convert.pytorch.devicesync import communication_waits, remove_waiting_for_device
from chakra_core.convert.pytorch.job import convert_job
from chakra_core.convert.pytorch.kineto import CpuEvent, DeviceEvent, RuntimeEvent
from chakra_core.format.durations import durations_ns
from chakra_core.format.etfile import read_table
from chakra_core.format.job import Job
from chakra_core.replay.calibrate import time_shares, unprofiled_ns
from chakra_core.replay.plan import recorded_ns
from chakra_core.sim.config import DEFAULT_HOST_OVERHEAD_SYSTEM, load_network, load_system
from chakra_core.sim.engine import simulate
from chakra_core.sim.files import simulate_files

GPU = DATASETS / "gpu-h200"
ONE_GPU = ["gpt", "mlp_tiny"]
BOUND = 0.10


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gpu")
    return {run: (convert_job(str(GPU / run), str(folder / run), "job"), str(folder / run / "job"))
            for run in ["gpt", "mlp_tiny", "mlp_gloo2"]}


def _ring(folder, npus: int) -> str:
    path = folder / f"ring{npus}.yml"
    path.write_text(f"topology: [ Ring ]\nnpus_count: [ {npus} ]\nbandwidth: [ 50.0 ]\nlatency: [ 500.0 ]\n")
    return str(path)


def _recorded(prefix: str, npus: int) -> int:
    return max(recorded_ns(read_table(f"{prefix}.{rank}.et")) for rank in range(npus))


@pytest.mark.parametrize("run", ONE_GPU)
def test_one_gpu_runs_simulate_as_recorded_near_their_span(converted, tmp_path, run):
    _, prefix = converted[run]
    simulated, _ = simulate_files(prefix, _ring(tmp_path, 1), str(REFERENCE_CONFIGS / "Ring_4chunks.json"))
    assert abs(simulated.finish_ns / _recorded(prefix, 1) - 1) < BOUND


def test_the_backward_threads_wait_is_not_the_main_threads_own_time(converted):
    result, prefix = converted["gpt"]
    report = json.loads(open(f"{prefix}.report.json").read())
    times = report["ranks_report"][0]["time_us"] if "ranks_report" in report else {}
    assert times.get("waiting for other threads, left to the simulator", 0) > 150_000  # of 359 ms recorded
    table = read_table(f"{prefix}.0.et")
    tid_of = dict(zip(table.column("id").to_pylist(), table.column("tid").to_pylist()))
    steps = [row for row in table.select(["name", "duration_micros"]).to_pylist()
             if row["name"].startswith("ProfilerStep#")]
    assert all(row["duration_micros"] < 20_000 for row in steps), steps  # 128 and 91 ms before
    optimizer = [(row["tid"], row["data_deps"]) for row in table.select(["name", "tid", "data_deps"]).to_pylist()
                 if row["name"].startswith("Optimizer.step")]
    assert len(optimizer) == 2  # each waits for the backward thread's last operator
    assert all(any(tid_of[d] != tid for d in deps) for tid, deps in optimizer)


def test_the_two_rank_gloo_run_simulates_near_its_span_on_its_own_calibrated_network(converted, tmp_path):
    _, prefix = converted["mlp_gloo2"]
    assert main(["calibrate", prefix, "--npus", "2", "-o", str(tmp_path / "cal")]) == 0
    network, calibrated = load_network(str(tmp_path / "cal" / "network.yml")), load_system(str(tmp_path / "cal" / "system.json"))
    job = Job.read(prefix)
    as_recorded = simulate(job, network, calibrated.model_copy(update={"host_overhead": None})).finish_ns
    assert abs(as_recorded / _recorded(prefix, 2) - 1) < BOUND
    predicted = simulate(job, network, calibrated).finish_ns  # its host model was fitted on this run's own steps
    assert abs(predicted / unprofiled_ns(prefix, job.tables[0]) - 1) < 0.01


def test_calibrated_on_the_one_gpu_runs_each_predicts_its_unprofiled_time(converted, tmp_path, capsys):
    prefixes = [converted[run][1] for run in ONE_GPU]
    assert main(["calibrate", *prefixes, "--npus", "1", "-o", str(tmp_path / "cal"), "--json"]) == 0
    fitted = json.loads(capsys.readouterr().out)["host_overhead"]
    assert 0 < fitted["scale"] < 0.5 and fitted["launch_ns"] > 0
    system = load_system(str(tmp_path / "cal" / "system.json"))
    assert system.host_overhead is not None
    for prefix in prefixes:
        simulated, _ = simulate_files(prefix, str(tmp_path / "cal" / "network.yml"), str(tmp_path / "cal" / "system.json"))
        measured = unprofiled_ns(prefix, read_table(f"{prefix}.0.et"))
        assert abs(simulated.finish_ns / measured - 1) < BOUND, (prefix, simulated.finish_ns, measured)
        as_recorded, _ = simulate_files(prefix, _ring(tmp_path, 1), str(REFERENCE_CONFIGS / "Ring_4chunks.json"))
        assert as_recorded.finish_ns > 2.5 * measured  # without the model, the profiler's cost stays in


@pytest.mark.parametrize("run", ONE_GPU)
def test_the_shipped_host_overhead_system_predicts_the_unprofiled_time(converted, tmp_path, run):
    _, prefix = converted[run]
    simulated, _ = simulate_files(prefix, _ring(tmp_path, 1), DEFAULT_HOST_OVERHEAD_SYSTEM)
    measured = unprofiled_ns(prefix, read_table(f"{prefix}.0.et"))
    assert abs(simulated.finish_ns / measured - 1) < BOUND
    npu = simulated.npus[0]
    assert sum(npu.critical_path.values()) == npu.finish_ns  # what held the path adds up to the finish
    table = read_table(f"{prefix}.0.et")
    kernels = sum(ns for ns, cpu in zip(durations_ns(table).to_pylist(), table.column("is_cpu_op").to_pylist())
                  if not cpu)
    assert npu.compute_ns == kernels  # kernels keep their measured durations, to the ns


def test_a_synchronisation_waits_for_the_device_work_launched_before_it():
    op = CpuEvent("aten::_local_scalar_dense", 1, 100.0, 60.0, None, 1, exclusive=60.0)
    kernel = DeviceEvent("gemm", "kernel", 105.0, 45.0, 7, None, correlation=9)  # ends at 150
    launch = RuntimeEvent(1, 101.0, 9, None, "cudaLaunchKernel", 3.0)
    sync = RuntimeEvent(1, 110.0, 10, None, "cudaStreamSynchronize", 45.0)  # returns at 155
    quiet = RuntimeEvent(1, 156.0, 11, None, "cudaEventSynchronize", 1.0)  # its event long done
    totals = {"waiting for the device": 0.0}
    waits = remove_waiting_for_device([launch, sync, quiet], [op], [kernel], totals)
    assert [(w.resumed_at, w.waited_for) for w in waits] == [(155.0, kernel)]
    assert op.exclusive == pytest.approx(20.0) and totals["waiting for the device"] == pytest.approx(40.0)


def test_collectives_that_overlap_share_their_time():
    assert time_shares([(0, 10), (5, 10), (20, 5), (21, 0)]) == [7.5, 7.5, 5.0, 0.0]


def test_the_host_overhead_key_round_trips_and_is_checked(tmp_path):
    system = load_system(DEFAULT_HOST_OVERHEAD_SYSTEM)
    written = tmp_path / "system.json"
    written.write_text(system.to_astra_sim_json())
    assert load_system(str(written)) == system
    bad = json.loads(system.to_astra_sim_json())
    bad["host-overhead"]["scale"] = 1.5
    written.write_text(json.dumps(bad))
    with pytest.raises(Exception, match="host-overhead"):
        load_system(str(written))


def test_a_collective_on_the_device_waits_for_the_work_launched_before_it():
    """NCCL's stream waits for an event recorded on the caller's stream when the collective is
    called: work launched before it, not after."""
    before = DeviceEvent("gemm", "kernel", 105.0, 145.0, 7, None, correlation=1)  # ends at 250
    after = DeviceEvent("add", "kernel", 260.0, 5.0, 7, None, correlation=2)
    launches = [RuntimeEvent(1, 101.0, 1, None, "cudaLaunchKernel", 3.0),
                RuntimeEvent(1, 210.0, 2, None, "cudaLaunchKernel", 3.0)]
    allreduce = CpuEvent("c10d::allreduce_", 1, 200.0, 30.0, None, 9)
    assert communication_waits({9: allreduce}, launches, [before, after]) == {9: before}
    assert communication_waits({9: allreduce}, launches, []) == {}
