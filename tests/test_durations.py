"""A node's duration to the ns (chakra_core/format/durations.py, issue 49 item 6): one reading,
preferring `duration_ns` over `duration_micros`, for statistics, the simulator and the timeline;
the JAX converter writes it."""

from __future__ import annotations

import json

import pyarrow as pa
from datapaths import JAX_CPU
from test_sim import BASE, comp, job

from chakra_core.analysis.history import figures
from chakra_core.analysis.stats import trace_row
from chakra_core.convert.jax.run import convert_jax_run
from chakra_core.format.durations import durations_ns
from chakra_core.format.etfile import write_table
from chakra_core.sim.engine import simulate
from chakra_core.sim.reference import reference_network
from chakra_core.viz.timeline import timeline_from_traces

KERNELS_NS = [1_400, 2_600, 4_900, 1_200, 3_300]  # 1-5 us kernels, as a launch-bound step has them


def launch_bound_step(steps: int = 20) -> pa.Table:
    """One rank: each kernel launched by a 2 us host operator, the next launch after the
    kernel (a .item() every op); kernels keep whole us in duration_micros, ns in duration_ns."""
    nodes, previous = [], None
    for k in range(steps * len(KERNELS_NS)):
        ns = KERNELS_NS[k % len(KERNELS_NS)]
        launch = {**comp(2 * k + 1, 2, *([previous] if previous else []), is_cpu_op=True), "name": "aten::mm",
                  "start_time_micros": 1 + k * 10}
        kernel = {**comp(2 * k + 2, round(ns / 1000), 2 * k + 1, is_cpu_op=False), "duration_ns": ns,
                  "name": "nvjet_tst_128x64_64x4_1x1_v_bz_TNT", "stream": 7, "start_time_micros": 3 + k * 10}
        nodes += [launch, kernel]
        previous = 2 * k + 2
    return job(nodes)[0]


def test_the_accessor_prefers_ns_and_falls_back_to_whole_microseconds():
    table = pa.table({"duration_micros": pa.array([1, 3, None, 2], pa.uint64()),
                      "duration_ns": pa.array([1_400, None, None, -1], pa.int64())})
    assert durations_ns(table).to_pylist() == [1_400, 3_000, 0, 2_000]  # a negative ns is no measurement
    assert durations_ns(table.drop_columns(["duration_ns"])).to_pylist() == [1_000, 3_000, 0, 2_000]


def test_a_launch_bound_job_of_short_kernels_simulates_with_its_ns_durations():
    table = launch_bound_step()
    kernels_ns = 20 * sum(KERNELS_NS)  # 268,000 ns; rounded to whole microseconds 260,000
    npu = simulate([table], reference_network(1), BASE).npus[0]
    assert npu.compute_ns == kernels_ns
    assert npu.finish_ns == 100 * 2_000 + kernels_ns  # the chain: every launch, then its kernel
    # strong what-if scaling onto 2 NPUs halves the ns too
    halved = simulate([table], reference_network(2), BASE, traced_npus=1, scaling="strong").npus[0]
    assert (halved.compute_ns, halved.finish_ns) == (kernels_ns // 2, 100 * 1_000 + kernels_ns // 2)


def test_stats_and_the_history_read_the_ns():
    row = trace_row(launch_bound_step())
    assert row["npu_compute_ns"] == 20 * sum(KERNELS_NS) and row["compute_ns"] == 100 * 2_000 + 20 * sum(KERNELS_NS)
    # the launching aten::mm and its cuBLAS kernel are both gemm
    assert json.loads(row["compute_ns_by_class"])["gemm"] == [200, 100 * 2_000 + 20 * sum(KERNELS_NS)]
    assert row["npu_compute_micros"] == 260  # the whole-microsecond column stays as it was
    got = figures([row], None, [], [], None)
    assert got["host_ns"] == 100 * 2_000 and got["class_ns:gemm"] == 100 * 2_000 + 20 * sum(KERNELS_NS)
    # a row written before the ns columns existed is read in whole microseconds
    old = {k: v for k, v in row.items() if not k.endswith("_ns") and k != "compute_ns_by_class"}
    assert figures([old], None, [], [], None)["host_ns"] == 200_000


def test_the_recorded_timeline_draws_kernels_to_the_ns(tmp_path):
    write_table(launch_bound_step(1), str(tmp_path / "trace.0.et"))
    events = timeline_from_traces([str(tmp_path / "trace.0.et")])["traceEvents"]
    kernels = [e for e in events if e.get("ph") == "X" and e["name"].startswith("nvjet")]
    assert [round(e["dur"] * 1000) for e in kernels] == KERNELS_NS


def test_the_jax_converter_writes_each_ops_ns(tmp_path):
    result = convert_jax_run(str(JAX_CPU / "tp_mlp"), str(tmp_path), "trace")
    table = result.tables[0]
    fine, micros = table.column("duration_ns").to_pylist(), table.column("duration_micros").to_pylist()
    timed = [(ns, us) for ns, us in zip(fine, micros) if ns is not None]
    assert timed and all(abs(ns - us * 1000) <= 1000 for ns, us in timed)
    assert any(ns % 1000 for ns, _ in timed)  # finer than whole microseconds


def test_a_duration_no_int64_holds_in_ns_saturates_instead_of_wrapping():
    """A corrupt node of 2**62 µs is 2**62 x 1000 ns: an int64 product wrapped it to 0 ns, and the
    hostile night's unsimulable job simulated; its sums saturate too."""
    import pyarrow as pa

    from chakra_core.analysis.stats import trace_row
    from chakra_core.format.durations import MAX_NS, durations_ns

    table = pa.table({"duration_micros": pa.array([2**62, 5, None, 2**64 - 1], pa.uint64()),
                      "duration_ns": pa.array([None, 5300, None, None], pa.int64())})
    assert durations_ns(table).to_pylist() == [MAX_NS, 5300, 0, MAX_NS]
    assert durations_ns(pa.table({"duration_micros": pa.array([7], pa.int64())})).to_pylist() == [7000]
    row = trace_row(pa.table({"id": pa.array([1, 2], pa.uint64()), "name": ["aten::mm", "aten::add"],
                              "type": pa.array([4, 4], pa.int32()),
                              "duration_micros": pa.array([2**62, 3], pa.uint64())}))
    assert row["compute_ns"] == MAX_NS


def test_a_simulated_time_past_int64_is_one_simulation_error():
    """The simulator's ticks are Python ints until numpy holds them: past 2**63 ns that was an
    OverflowError (the synthesizer's check of a sampled job died of it)."""
    import pyarrow as pa
    import pytest

    from chakra_core.sim.errors import SimulationError
    from chakra_core.sim.reference import simulate_reference
    from tools.make_drop import generate_job

    job = generate_job(1)
    first = job.tables[0]
    i = first.schema.get_field_index("duration_micros")
    durations = first.column(i).to_pylist()
    durations[0] = 2**62
    tables = [first.set_column(i, first.field(i), pa.array(durations, first.field(i).type)), *job.tables[1:]]
    with pytest.raises(SimulationError, match=r"passes 2\*\*63 ns"):
        simulate_reference(tables)
