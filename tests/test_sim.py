"""The simulator against ASTRA-sim: its reference runs (datasets/astra-sim-reference), worked
examples with ASTRA-sim's own results, and the closed forms of docs/simulator.md."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

import chakra_core
import datapaths
from chakra_core.format.job import Job
from chakra_core.sim.backends import BACKENDS
from chakra_core.sim.config import CollectiveImpl, NetworkConfig, NetworkDim, load_network, load_system
from chakra_core.sim.engine import SimulationDeadlock, simulate
from chakra_core.sim.files import simulate_files
from chakra_core.sim.system.collectives import CollectiveModel, SimulationError, chunking
from chakra_core.sim.whatif import scale_job

aware_model = BACKENDS["aware"].collectives  # the congestion-aware back-end's collective model

REFERENCE, MICRO, CONFIGS = datapaths.REFERENCE, datapaths.MICROBENCHMARKS, datapaths.REFERENCE_CONFIGS
MiB = 1 << 20

BASE = load_system(CONFIGS / "Ring_4chunks.json")
RING8 = load_network(CONFIGS / "Ring_8npus.yml")
FC8 = load_network(CONFIGS / "FullyConnected_8npus.yml")
SWITCH8 = load_network(CONFIGS / "Switch_8npus.yml")


def system(**changes):
    return BASE.model_copy(update=changes)


def network(*dims) -> NetworkConfig:
    return NetworkConfig(dims=tuple(NetworkDim(topology=t, npus=n, bandwidth_gbps=b, latency_ns=lat)
                                    for t, n, b, lat in dims))


def impls(*names):
    return tuple(CollectiveImpl.parse(n) for n in names)


def reference_rows(backend: str) -> list[dict]:
    with open(REFERENCE / "results.csv") as f:
        return [row for row in csv.DictReader(f) if row["backend"] == backend]


@pytest.mark.parametrize("row", reference_rows("unaware"), ids=lambda r: f"{r['workload']}-{Path(r['network_config']).stem}")
def test_every_unaware_reference_run_matches_astra_sim_per_npu(row):
    check_reference_run(row, "unaware", tolerance=0.001)


@pytest.mark.parametrize("row", reference_rows("aware"), ids=lambda r: f"{r['workload']}-{Path(r['network_config']).stem}")
def test_every_aware_reference_run_matches_astra_sim_per_npu(row):
    check_reference_run(row, "aware", tolerance=0.01)


def check_reference_run(row: dict, mode: str, tolerance: float) -> None:
    op = row["workload"].split("/")[0]
    prefix = MICRO / row["workload"] / op
    result, assumptions = simulate_files(str(prefix), str(REFERENCE / row["network_config"]),
                                         str(REFERENCE / row["system_config"]), mode=mode)
    assert assumptions == []
    expected = int(row["finish_ns_every_npu"])
    assert len(result.npus) == int(row["npus"])
    for npu in result.npus:
        assert abs(npu.finish_ns - expected) <= expected * tolerance, (npu.npu, npu.finish_ns, expected)
        assert npu.finish_ns == expected  # in fact exact: the model is ASTRA-sim's
        assert npu.time_by_category["communication"] == expected  # one collective: all of it exposed


TWO_D = network(("Ring", 4, 200, 500), ("Switch", 4, 50, 1000))
TWO_D_SYSTEM = system(all_reduce=impls("ring", "ring"), all_gather=impls("ring", "ring"),
                      reduce_scatter=impls("ring", "ring"), all_to_all=impls("ring", "ring"))

# ASTRA-sim's results for single collectives: (name, network, system, op, bytes, ASTRA-sim's ns)
WORKED_EXAMPLES = [
    ("2-D all-reduce pipeline", TWO_D, TWO_D_SYSTEM, "all_reduce", MiB, 61230),
    ("2-D reduce-scatter", TWO_D, TWO_D_SYSTEM, "reduce_scatter", MiB, 30995),
    ("2-D all-gather, descending dims", TWO_D, TWO_D_SYSTEM, "all_gather", MiB, 98930),
    ("2-D all-to-all", TWO_D, TWO_D_SYSTEM, "all_to_all", MiB, 82460),
    ("2-D baseline all-reduce", TWO_D, TWO_D_SYSTEM.model_copy(update={"collective_optimization": "baseline"}),
     "all_reduce", MiB, 84260),
    ("one implementation entry uses dim 0 only", TWO_D, BASE, "all_reduce", MiB, 21040),
    ("HGX: Switch 8, 2 active chunks", network(("Switch", 8, 400, 936.25)),
     system(local_mem_bw_gbps=3350, active_chunks_per_dim=2), "all_reduce", MiB, 55222),
    ("ASTRA-sim regression test", RING8, system(local_mem_bw_gbps=50), "all_reduce", MiB, 117780),
    ("64 KiB", RING8, BASE, "all_reduce", 64 * 1024, 30812),
    ("64 MiB", RING8, BASE, "all_reduce", 64 * MiB, 2326112),
    ("16 B all-reduce: 1 B messages", RING8, BASE, "all_reduce", 16, 28600),
    ("16 B all-gather: exempt from the minimum chunk", RING8, BASE, "all_gather", 16, 14320),
    ("1,000,000 B in 3 splits", RING8, system(dataset_splits=3), "all_reduce", 1_000_000, 74240),
    ("2 splits, 2 active chunks", RING8, system(dataset_splits=2, active_chunks_per_dim=2), "all_reduce", MiB, 25070),
    ("endpoint delay 100", RING8, system(endpoint_delay_ns=100), "all_reduce", MiB, 69840),
    ("4 active chunks on Switch 8", SWITCH8, system(active_chunks_per_dim=4), "all_reduce", MiB, 23110),
    ("FIFO equals LIFO for equal chunks", RING8, system(scheduling_policy="FIFO"), "all_reduce", MiB, 64440),
    ("2 queues: 1-D localBWAware all-reduce stays on queue 0", RING8,
     system(num_queues_per_dim=2, active_chunks_per_dim=2), "all_reduce", MiB, 64440),
    ("2 queues: baseline all-reduce runs 2 chunks", RING8,
     system(num_queues_per_dim=2, active_chunks_per_dim=2, collective_optimization="baseline"), "all_reduce", MiB,
     32220),
    ("2 queues: all-gather runs 2 chunks", RING8, system(num_queues_per_dim=2, active_chunks_per_dim=2),
     "all_gather", MiB, 75508),
    ("direct all-to-all, Ring 8", RING8, system(all_to_all=impls("direct")), "all_to_all", MiB, 10520),
    ("direct all-reduce, Ring 8", RING8, system(all_reduce=impls("direct")), "all_reduce", MiB, 21240),
    ("direct all-reduce, FC 8: 3e + 2d + p", FC8, system(all_reduce=impls("direct")), "all_reduce", MiB, 9240),
    ("halvingDoubling all-reduce, Ring 8", RING8, system(all_reduce=impls("halvingDoubling")), "all_reduce", MiB,
     63168),
    ("halvingDoubling all-reduce, Ring 16", network(("Ring", 16, 50, 500)), system(all_reduce=impls("halvingDoubling")),
     "all_reduce", MiB, 97808),
]


@pytest.mark.parametrize("name,net,sysc,op,size,expected", WORKED_EXAMPLES, ids=[e[0] for e in WORKED_EXAMPLES])
def test_worked_examples_of_the_model(name, net, sysc, op, size, expected):
    assert CollectiveModel(net, sysc).duration(op, size) == expected


def test_chunking_rules():
    assert chunking("all_reduce", 1_000_000, 3, 8) == (333_333, 4)  # no short tail: every chunk is full
    assert chunking("all_reduce", 16, 4, 8) == (8, 4)  # raised to one byte per NPU
    assert chunking("all_gather", 16, 4, 8) == (4, 4)  # all-gather is exempt


def test_the_two_d_phase_list_and_durations():
    plan = CollectiveModel(TWO_D, TWO_D_SYSTEM).plan("all_reduce", MiB)
    assert [(p.op, p.dim, p.bytes_in, p.duration) for p in plan.phases] == [
        ("reduce_scatter", 0, 262144, 2815), ("all_reduce", 1, 65536, 13990), ("all_gather", 0, 65536, 2455)]


@pytest.mark.parametrize("name,sysc", [
    ("direct with a window below N-1", system(all_reduce=impls("direct3"))),
])
def test_what_is_not_modelled_yet_is_a_clear_error(name, sysc):
    with pytest.raises(SimulationError, match="not modelled yet"):
        CollectiveModel(RING8, sysc).duration("all_reduce", MiB)


# ---------------------------------------------------------------- the workload layer


def job(*ranks: list[dict]) -> list[pa.Table]:
    """One table per NPU from node dicts (type names allowed); missing columns default."""
    tables = []
    for nodes in ranks:
        rows = [{"duration_micros": 0, "data_deps": [], **n} for n in nodes]
        keys = list(dict.fromkeys(k for row in rows for k in row))  # from_pylist reads only the first row's keys
        tables.append(chakra_core.normalize_table(pa.table({k: [row.get(k) for row in rows] for k in keys})))
    return tables


def comp(node_id, us, *deps, **attrs):
    return {"id": node_id, "type": "COMP_NODE", "duration_micros": us, "data_deps": list(deps), **attrs}


def all_reduce(node_id, size, *deps, **attrs):
    return {"id": node_id, "type": "COMM_COLL_NODE", "comm_type": 0, "comm_size": size, "data_deps": list(deps),
            **attrs}


def same_on_every_npu(nodes: list[dict], npus: int = 8) -> list[pa.Table]:
    return job(*[nodes] * npus)


def finish_times(tables, net=RING8, sysc=BASE, **options) -> list[int]:
    return [n.finish_ns for n in simulate(tables, net, sysc, **options).npus]


def test_a_chain_of_compute_nodes_adds_up():
    tables = same_on_every_npu([comp(1, 5), comp(2, 7, 1), comp(3, 0, 2)])
    assert finish_times(tables) == [5000 + 7000 + 1] * 8  # 0 us becomes 1 ns, as in ASTRA-sim


def test_compute_before_a_collective_delays_it_and_parallel_compute_overlaps():
    assert finish_times(same_on_every_npu([comp(1, 5), all_reduce(2, MiB, 1)])) == [69440] * 8
    overlap = simulate(same_on_every_npu([comp(1, 5), all_reduce(2, MiB)]), RING8, BASE)
    assert [n.finish_ns for n in overlap.npus] == [64440] * 8
    assert overlap.npus[0].exposed_comm_ns == overlap.npus[0].astra_exposed_comm_ns == 64440 - 5000
    long_compute = simulate(same_on_every_npu([comp(1, 100), all_reduce(2, MiB)]), RING8, BASE)
    assert long_compute.npus[0].exposed_comm_ns == 0


def test_time_by_category_adds_up_and_exposes_only_lone_communication():
    overlap = simulate(same_on_every_npu([comp(1, 5), all_reduce(2, MiB)]), RING8, BASE).npus[0]
    assert overlap.time_by_category == {"compute": 5000, "host": 0, "memory": 0, "communication": 59440, "idle": 0}
    host_first = simulate(same_on_every_npu([comp(1, 3, is_cpu_op=True), all_reduce(2, MiB, 1)]), RING8, BASE).npus[0]
    assert host_first.time_by_category == {"compute": 0, "host": 3000, "memory": 0, "communication": 64440,
                                           "idle": 0}
    assert host_first.exposed_comm_ns == 64440
    assert host_first.astra_exposed_comm_ns == 67440  # ASTRA-sim's figure counts the host time as communication
    # NPU 0 computes 20 us more than the others, which wait for it inside the all-reduce
    late = job([comp(1, 30), all_reduce(2, MiB, 1)], *[[comp(1, 10), all_reduce(2, MiB, 1)]] * 7)
    npus = simulate(late, RING8, BASE).npus
    assert all(sum(n.time_by_category.values()) == n.finish_ns for n in npus)
    assert npus[1].time_by_category["communication"] == npus[1].finish_ns - 10000


def test_two_independent_chains_overlap_compute_with_communication():
    # chain A: compute 30 us then compute 30 us; chain B: two all-reduces back to back
    tables = same_on_every_npu([comp(1, 30), comp(2, 30, 1), all_reduce(3, MiB), all_reduce(4, MiB, 3)])
    assert finish_times(tables) == [max(60_000, 2 * 64440)] * 8


def test_independent_collectives_serialise_on_the_communication_slot():
    assert finish_times(same_on_every_npu([all_reduce(1, MiB), all_reduce(2, MiB)])) == [128880] * 8
    mixed = [all_reduce(1, MiB), {"id": 2, "type": "COMM_COLL_NODE", "comm_type": 2, "comm_size": MiB}]
    assert finish_times(same_on_every_npu(mixed)) == [64440 + 151016] * 8


def test_roofline_compute_time():
    sysc = system(roofline_enabled=True, peak_perf_tflops=900)
    tables = same_on_every_npu([comp(1, 0, num_ops=10**9, tensor_size=10**6), all_reduce(2, MiB, 1)])
    assert finish_times(tables, sysc=sysc) == [1111 + 64440] * 8


def test_send_recv_pipeline():
    # NPU 0 computes 10 us then sends 1 MiB to NPU 1, which receives and computes 10 us, then sends to NPU 2 ...
    def stage(npu: int, npus: int = 4) -> list[dict]:
        nodes = []
        if npu > 0:
            nodes.append({"id": 1, "type": "COMM_RECV_NODE", "comm_src": npu - 1, "comm_size": MiB, "comm_tag": 7})
        nodes.append(comp(2, 10, *([1] if npu > 0 else [])))
        if npu < npus - 1:
            nodes.append({"id": 3, "type": "COMM_SEND_NODE", "comm_dst": npu + 1, "comm_size": MiB,
                          "comm_tag": 7, "data_deps": [2]})
        return nodes

    net4 = load_network(CONFIGS / "Ring_4npus.yml")
    hop = int(500 + MiB / (50 * 2**30 / 1e9))  # one ring hop: latency + serialization, truncated once
    times = finish_times(job(*[stage(i) for i in range(4)]), net=net4)
    assert times == [10_000 + hop, 2 * (10_000 + hop), 3 * (10_000 + hop), 3 * (10_000 + hop) + 10_000]


def test_members_that_issue_late_find_their_messages_held():
    # Ring 2, NPU 1 computes 100 us first. ring all-reduce of 2 ranks, 4 chunks of 262144 B:
    # m = 131072, d = floor(500 + 2441.4) = 2941, p = 3 * 81 = 243, T = 3e + 2d + p = 6155 per chunk.
    # NPU 0 sends at 10; its message waits at NPU 1, which takes it the moment it posts the
    # receive (at 100,010): NPU 1 runs every chunk in T, NPU 0 ends each one d earlier,
    # as it never waits for its own first message to travel
    net2 = network(("Ring", 2, 50, 500))
    tables = job([all_reduce(1, MiB)], [comp(1, 100), all_reduce(2, MiB, 1)])
    t, d = 6155, 2941
    result = simulate(tables, net2, BASE)
    assert [n.finish_ns for n in result.npus] == [100_000 + 4 * t - d, 100_000 + 4 * t]
    assert result.npus[0].comm_ns == {"all_reduce": 100_000 + 4 * t - d}  # from its own issue
    # comm_scale scales each message, endpoint and reduction time of the replay, not the wait
    # for NPU 1: d = floor(2941 / 2) = 1470, e = 5, p = 121, T = 15 + 2940 + 121 = 3076
    scaled = simulate(tables, net2, BASE, comm_scale=0.5)
    assert [n.finish_ns for n in scaled.npus] == [100_000 + 4 * 3076 - 1470, 100_000 + 4 * 3076]


def test_a_receive_posted_late_completes_when_posted():
    tables = job([{"id": 1, "type": "COMM_SEND_NODE", "comm_dst": 1, "comm_size": 1024, "comm_tag": 1}],
                 [comp(1, 50), {"id": 2, "type": "COMM_RECV_NODE", "comm_src": 0, "comm_size": 1024, "comm_tag": 1,
                                "data_deps": [1]}])
    net2 = network(("Ring", 2, 50, 500))
    assert finish_times(tables, net=net2) == [int(500 + 1024 / (50 * 2**30 / 1e9)), 50_000]


def test_a_collective_issued_by_only_some_ranks_is_reported_not_hung():
    tables = same_on_every_npu([all_reduce(1, MiB)], npus=4)
    tables[3] = job([comp(1, 5)])[0]
    with pytest.raises(SimulationDeadlock) as info:
        simulate(tables, load_network(CONFIGS / "Ring_4npus.yml"), BASE)
    report = info.value.report
    assert set(report) == {0, 1, 2}
    assert "waits for NPU(s) [3]" in report[0][0]
    assert info.value.partial.npus[3].finish_ns == 5000


def test_a_receive_without_a_send_is_reported():
    tables = job([{"id": 1, "type": "COMM_RECV_NODE", "comm_src": 1, "comm_size": 8, "comm_tag": 3}], [comp(1, 1)])
    with pytest.raises(SimulationDeadlock, match="waits for a send that never came"):
        simulate(tables, network(("Ring", 2, 50, 500)), BASE)


def test_mismatched_collectives_across_ranks_are_an_error():
    tables = [*same_on_every_npu([all_reduce(1, MiB)], npus=3), *job([all_reduce(1, 2 * MiB)])]
    with pytest.raises(SimulationError, match="differs across NPUs"):
        simulate(tables, load_network(CONFIGS / "Ring_4npus.yml"), BASE)


def test_a_comm_node_on_cpu_is_refused_as_astra_sim_does():
    with pytest.raises(SimulationError, match="should not be on CPU"):
        simulate(same_on_every_npu([all_reduce(1, MiB, is_cpu_op=True)]), RING8, BASE)


def test_workload_files_must_exist_for_every_npu(tmp_path):
    prefix = tmp_path / "job"
    chakra_core.write_table(job([all_reduce(1, MiB)])[0], f"{prefix}.0.et")
    with pytest.raises(SimulationError, match=r"NPU 1 of 8: .*job\.1\.et: no such file"):
        simulate_files(str(prefix), str(CONFIGS / "Ring_8npus.yml"), str(CONFIGS / "Ring_4chunks.json"))


def test_chakra_simulate_json_gives_finish_ns_per_npu():
    chakra = Path(sys.executable).parent / "chakra"
    result = subprocess.run(
        [str(chakra), "simulate", "--workload", str(MICRO / "all_reduce" / "8npus_1MB" / "all_reduce"),
         "--network", str(CONFIGS / "Switch_8npus.yml"), "--system", str(CONFIGS / "Ring_4chunks.json"), "--json"],
        capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert [npu["finish_ns"] for npu in document["npus"]] == [92440] * 8


def test_sub_groups_run_on_their_own_ring_with_a_fixed_endpoint_delay():
    # facts 2.5: endpoint-delay 100 with 2 groups of 4 on FC 8 still gives 43000, the e = 10 value
    tables = job(*[[all_reduce(1, MiB, pg_name="1" if npu < 4 else "2")] for npu in range(8)])
    groups = {1: (0, 1, 2, 3), 2: (4, 5, 6, 7)}
    assert finish_times(tables, net=FC8, sysc=system(endpoint_delay_ns=100), comm_groups=groups) == [43000] * 8


def test_a_group_of_every_npu_is_the_default_group_and_pg_name_0_too():
    tables = job(*[[all_reduce(1, MiB, pg_name="1")] for _ in range(8)])
    assert finish_times(tables, comm_groups={1: tuple(range(8))}) == [64440] * 8
    assert finish_times(job(*[[all_reduce(1, MiB, pg_name="0")] for _ in range(8)])) == [64440] * 8


def test_sub_groups_whose_ring_neighbours_are_unevenly_far_apart_are_replayed():
    # members 0-3 on Ring 8: 0->1, 1->2, 2->3 are 1 hop (d1 = 1720), the wrap-around 3 -> 0
    # is 3 hops (d3 = floor(3*500 + 1220.7) = 2720); one chunk of 262144 B, m = 65536, e = 10,
    # p = 120 on the first 3 receives. Member i receives step k when both it has sent step k
    # and its predecessor's step k has arrived: r_i(k+1) = max(r_i(k), r_i-1(k) + d) + e (+ p).
    # r(1) = 1860 (2860 on member 0), r(2) = 4710/4710/3710/3710, r(3) = 6560/6560/6560/5560,
    # r(4) = 8290 everywhere, r(5) = 11020/10020/10020/10020, r(6) = 12750/12750/11750/11750
    tables = job(*[[all_reduce(1, MiB // 4, pg_name="1" if npu < 4 else "2")] for npu in range(8)])
    result = simulate(tables, RING8, system(dataset_splits=1), comm_groups={1: (0, 1, 2, 3), 2: (4, 5, 6, 7)})
    assert [n.finish_ns for n in result.npus] == [12750, 12750, 11750, 11750] * 2
    assert result.notes == []  # ASTRA-sim's own model, message by message


def test_simulate_takes_a_job_object_and_its_groups_and_files_read_them_beside_the_ranks(tmp_path):
    tables = job(*[[all_reduce(1, MiB, pg_name="1" if npu < 4 else "2")] for npu in range(8)])
    groups = {1: (0, 1, 2, 3), 2: (4, 5, 6, 7)}
    on_objects = simulate(Job(tables, groups), FC8, BASE)  # no file, no memory:// URL
    assert [n.finish_ns for n in on_objects.npus] == [43000] * 8
    Job(tables, groups).write(str(tmp_path), "grouped")  # writes grouped.comm_groups.json beside the ranks
    from_files, _ = simulate_files(str(tmp_path / "grouped"), str(CONFIGS / "FullyConnected_8npus.yml"),
                                   str(CONFIGS / "Ring_4chunks.json"))
    assert [n.to_dict() for n in from_files.npus] == [n.to_dict() for n in on_objects.npus]


def test_simulate_scales_a_job_object_as_simulate_files_does():
    traced = Job(same_on_every_npu([comp(1, 40), all_reduce(2, MiB, 1)], npus=4))
    result = simulate(traced, RING8, BASE, traced_npus=4, scaling="strong")
    assert [n.finish_ns for n in result.npus] == [20_000 + 64440] * 8
    assert "traced on 4 NPU(s), simulated on 8" in result.assumptions[0]
    with pytest.raises(SimulationError, match="traced_npus is 2 but the job has 4 rank"):
        simulate(traced, RING8, BASE, traced_npus=2)


def test_group_errors_name_the_node():
    tables = job(*[[all_reduce(1, MiB, pg_name="5")] for _ in range(8)])
    with pytest.raises(SimulationError, match="communicator group '5' not found"):
        simulate(tables, RING8, BASE)
    with pytest.raises(SimulationError, match="NPU 4 runs a collective of communicator group 5"):
        simulate(tables, RING8, BASE, comm_groups={5: (0, 1, 2, 3)})


def test_results_as_rows_and_timeline_events():
    tables = same_on_every_npu([comp(1, 5, name="fwd"), all_reduce(2, MiB, 1, name="grad_sync")])
    result = simulate(tables, RING8, BASE, record_timeline=True)
    rows = result.npu_table()
    assert rows.num_rows == 8 and rows.column("finish_ns").to_pylist() == [69440] * 8
    assert rows.column("comm_ns").to_pylist()[0] == [("all_reduce", 64440)]
    timeline = [e for e in result.timeline_table().to_pylist() if e["npu"] == 0]
    assert [(e["name"], e["track"], e["kind"], e["start_ns"], e["end_ns"]) for e in timeline] == [
        ("fwd", "compute", "compute", 0, 5000), ("grad_sync", "comm", "all_reduce", 5000, 69440)]
    assert simulate(tables, RING8, BASE).timeline is None  # recording costs nothing unless asked for


AWARE_EXAMPLES = [  # where links are shared, the aware model differs (ASTRA-sim's aware results)
    ("HGX: two chunks share each uplink, the second lags 76 ns", network(("Switch", 8, 400, 936.25)),
     system(local_mem_bw_gbps=3350, active_chunks_per_dim=2), "all_reduce", 57426),
    ("4 active chunks on Switch 8", SWITCH8, system(active_chunks_per_dim=4), "all_reduce", 35790),
    ("regression test, aware binary", RING8, system(local_mem_bw_gbps=50), "all_reduce", 117780),
    ("2 queues: all-gather chunks go opposite ways on disjoint links", RING8,
     system(num_queues_per_dim=2, active_chunks_per_dim=2), "all_gather", 75508),
]


@pytest.mark.parametrize("name,net,sysc,op,expected", AWARE_EXAMPLES, ids=[e[0] for e in AWARE_EXAMPLES])
def test_congestion_aware_examples(name, net, sysc, op, expected):
    assert aware_model(net, sysc).member_durations(op, MiB) == (expected,) * net.npus


@pytest.mark.parametrize("model", [CollectiveModel, aware_model])
def test_direct_all_reduce_below_a_window_of_n_minus_1_is_a_clear_error_in_both_modes(model):
    # ASTRA-sim's gate for direct all-reduce's last round is known for a window of N-1 only
    with pytest.raises(SimulationError, match="window 3 < N-1 = 7 is not modelled yet"):
        model(RING8, system(all_reduce=impls("direct3"))).member_durations("all_reduce", MiB)


def test_aware_send_pays_serialization_on_every_hop():
    tables = job([{"id": 1, "type": "COMM_SEND_NODE", "comm_dst": 1, "comm_size": MiB, "comm_tag": 1}],
                 [{"id": 1, "type": "COMM_RECV_NODE", "comm_src": 0, "comm_size": MiB, "comm_tag": 1}])
    switch2 = network(("Switch", 2, 50, 500))
    per_hop = int(500 + MiB / (50 * 2**30 / 1e9))
    assert finish_times(tables, net=switch2, mode="aware") == [2 * per_hop] * 2
    assert finish_times(tables, net=switch2) == [int(1000 + MiB / (50 * 2**30 / 1e9))] * 2


# ---------------------------------------------------------------- what-if scaling


def test_a_job_traced_on_4_npus_runs_on_8():
    result, assumptions = simulate_files(str(MICRO / "all_reduce" / "4npus_1MB" / "all_reduce"),
                                         str(CONFIGS / "Ring_8npus.yml"), str(CONFIGS / "Ring_4chunks.json"),
                                         traced_npus=4)
    assert [n.finish_ns for n in result.npus] == [64440] * 8  # the 8-NPU ring all-reduce ASTRA-sim reports
    assert "traced on 4 NPU(s), simulated on 8" in assumptions[0]


def test_weak_and_strong_scaling_of_compute():
    traced = same_on_every_npu([comp(1, 40), all_reduce(2, MiB, 1)], npus=4)
    weak, _, _ = scale_job(traced, 8)
    strong, _, notes = scale_job(traced, 8, scaling="strong")
    assert finish_times(weak) == [40_000 + 64440] * 8
    assert finish_times(strong) == [20_000 + 64440] * 8
    assert any("strong scaling" in n for n in notes)


def test_send_recv_scale_by_whole_blocks_only():
    pair = job([{"id": 1, "type": "COMM_SEND_NODE", "comm_dst": 1, "comm_size": 1024, "comm_tag": 1}],
               [{"id": 1, "type": "COMM_RECV_NODE", "comm_src": 0, "comm_size": 1024, "comm_tag": 1}])
    scaled, _, notes = scale_job(pair, 4)
    assert [t.column("comm_dst").to_pylist()[0] for t in scaled[::2]] == [1, 3]  # NPU 2 sends to NPU 3
    assert [t.column("comm_src").to_pylist()[0] for t in scaled[1::2]] == [0, 2]
    assert any("block" in n for n in notes)
    assert len(set(finish_times(scaled, net=load_network(CONFIGS / "Ring_4npus.yml")))) == 1
    with pytest.raises(SimulationError, match="multiple of its 2 NPUs"):
        scale_job(pair, 3)


def test_communicator_sub_groups_repeat_in_every_block_of_the_traced_ranks():
    # 4 traced ranks in two pairs, groups 1 = {0, 1} and 2 = {2, 3}, and group 3 of all four: a
    # pair all-reduce, then one over group 3; on 8 NPUs the pairs repeat as groups 4 and 5
    groups = {1: (0, 1), 2: (2, 3), 3: (0, 1, 2, 3)}
    traced = job(*[[all_reduce(1, MiB, pg_name=str(1 + rank // 2)), all_reduce(2, MiB, 1, pg_name="3")]
                   for rank in range(4)])
    scaled, scaled_groups, notes = scale_job(traced, 8, groups=groups)
    assert scaled_groups == {1: (0, 1), 5: (4, 5), 2: (2, 3), 6: (6, 7), 3: tuple(range(8))}
    assert [t.column("pg_name").to_pylist() for t in scaled] == [[g, "3"] for g in "11225566"]
    assert any("repeat in each block of 4" in n for n in notes)
    # each pair's 1 MiB all-reduce is a ring of 2, then the 8-NPU ring's 64,440 ns
    pair = CollectiveModel(RING8, BASE).member_durations("all_reduce", MiB, group=(0, 1))[0]
    result = simulate(Job(traced, groups), RING8, BASE, traced_npus=4)
    assert [n.finish_ns for n in result.npus] == [pair + 64440] * 8
    with pytest.raises(SimulationError, match="sub-groups: it scales only to a multiple of its 4 NPUs, not 6"):
        scale_job(traced, 6, groups=groups)


def test_chakra_simulate_what_if_prints_its_assumptions():
    chakra = Path(sys.executable).parent / "chakra"
    result = subprocess.run(
        [str(chakra), "simulate", "--workload", str(MICRO / "all_reduce" / "4npus_1MB" / "all_reduce"),
         "--network", str(CONFIGS / "Ring_8npus.yml"), "--system", str(CONFIGS / "Ring_4chunks.json"),
         "--traced-npus", "4", "--json"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert len(document["npus"]) == 8 and document["what_if"]
    assert "what-if: traced on 4 NPU(s)" in result.stderr


def test_stragglers_and_scaling_knobs():
    tables = same_on_every_npu([comp(1, 40), all_reduce(2, MiB, 1)])
    slow_npu_3 = [1.0] * 8
    slow_npu_3[3] = 0.5
    # the straggler computes 80 us. The others start the all-reduce at 40 us and their messages
    # wait at their receivers (ASTRA-sim's holding); NPU 3 finds its predecessors' messages
    # there and ends as if everyone had started with it, 80,000 + 64,440; the NPU k places
    # after it in the ring ends (8 - k) message delays (d = 1110) earlier, as in the
    # two-NPU case worked out in test_members_that_issue_late_find_their_messages_held
    d = 1110
    assert finish_times(tables, npu_speed=slow_npu_3) == [80_000 + 64440 - (8 - (npu - 3) % 8) % 8 * d
                                                          for npu in range(8)]
    assert finish_times(tables, compute_scale=0.5) == [20_000 + 64440] * 8
    assert finish_times(tables, comm_scale=0.5) == [40_000 + 32220] * 8
    with pytest.raises(SimulationError, match="one positive factor per NPU"):
        finish_times(tables, npu_speed=[1.0])


# ---------------------------------------------------------------- doubleBinaryTree (facts 3.4)


def test_double_binary_tree_shapes():
    from chakra_core.sim.system.tree import tree

    parent, children = tree(8, root_max=True)
    assert dict(children) == {7: [3], 3: [1, 5], 1: [0, 2], 5: [4, 6]}
    parent, children = tree(8, root_max=False)
    assert dict(children) == {0: [4], 4: [2, 6], 2: [1, 3], 6: [5, 7]}
    parent, children = tree(6, root_max=True)  # beyond ASTRA-sim: any N
    assert dict(children) == {5: [2], 2: [0, 3], 0: [1], 3: [4]} and len(parent) == 5


def test_double_binary_tree_ranks_finish_at_different_times_as_in_astra_sim():
    dbt = system(all_reduce=impls("doubleBinaryTree"))
    fc = CollectiveModel(FC8, dbt).member_durations("all_reduce", MiB)
    assert (min(fc), max(fc)) == (105898, 123052)  # ASTRA-sim, per NPU exact: 105898 ... 123052
    assert max(CollectiveModel(RING8, dbt).member_durations("all_reduce", MiB)) == 139052
    # one chunk over a tree of height 3: 7e + 6d + 5p, every message the whole chunk (facts: 34807)
    chunk = MiB // 4
    d, p = int(500 + chunk / (50 * 2**30 / 1e9)), 3 * int(chunk / 1600)
    single = CollectiveModel(FC8, system(all_reduce=impls("doubleBinaryTree"), dataset_splits=1))
    assert max(single.member_durations("all_reduce", chunk)) == 7 * 10 + 6 * d + 5 * p == 34807


def test_double_binary_tree_in_a_job_gives_per_npu_finish_times():
    tables = same_on_every_npu([all_reduce(1, MiB)])
    times = finish_times(tables, net=FC8, sysc=system(all_reduce=impls("doubleBinaryTree")))
    assert min(times) == 105898 and max(times) == 123052


@pytest.mark.parametrize("comm_type,label,as_op,size", [
    (1, "reduce", "all_reduce", MiB), (3, "gather", "all_gather", MiB), (4, "scatter", "reduce_scatter", MiB),
    (8, "reduce_scatter_block", "reduce_scatter", MiB), (9, "barrier", "all_reduce", 0),
])
def test_collectives_astra_sim_refuses_are_timed_by_their_documented_extension(comm_type, label, as_op, size):
    tables = same_on_every_npu([{"id": 1, "type": "COMM_COLL_NODE", "comm_type": comm_type, "comm_size": MiB}])
    result = simulate(tables, RING8, BASE)
    expected = CollectiveModel(RING8, BASE).duration(as_op, size)
    assert [n.finish_ns for n in result.npus] == [expected] * 8
    assert result.npus[0].comm_ns == {label: expected}
    assert len(result.notes) == 1 and label.upper().split("_")[0] in result.notes[0]


def test_memory_nodes_move_tensor_size_at_local_memory_bandwidth():
    load = {"id": 1, "type": "MEM_LOAD_NODE", "tensor_size": 1_600_000}
    result = simulate(same_on_every_npu([load, all_reduce(2, MiB, 1)]), RING8, BASE)  # local-mem-bw 1600 GB/s
    assert [n.finish_ns for n in result.npus] == [1000 + 64440] * 8
    assert any("memory nodes" in note for note in result.notes)
    with pytest.raises(SimulationError, match="needs tensor_size"):
        simulate(same_on_every_npu([{"id": 1, "type": "MEM_STORE_NODE"}]), RING8, BASE)


def test_natural_extensions_where_astra_sim_stops_are_timed_and_noted():
    e, bw = 10, 50 * 2**30 / 1e9
    ring6 = network(("Ring", 6, 50, 500))
    hd = CollectiveModel(ring6, system(all_reduce=impls("halvingDoubling"), dataset_splits=1))
    d_fold = int(2 * 500 + MiB / bw)  # rank 4 -> rank 0 is 2 hops on a ring of 6
    core = CollectiveModel(network(("Ring", 4, 50, 500)), system(all_reduce=impls("halvingDoubling"),
                                                                  dataset_splits=1)).timer
    expected = 2 * (d_fold + e) + 3 * int(MiB / 1600) + core.halving_doubling("all_reduce", 4, MiB,
                                                                               ring6.dims[0])
    assert hd.duration("all_reduce", MiB) == expected
    assert any("non-power-of-two" in n for n in hd.notes)

    bruck = CollectiveModel(RING8, system(all_to_all=impls("halvingDoubling"), dataset_splits=1))
    steps = [int(h * 500 + MiB // 2 / bw) + e for h in (1, 2, 4)]
    assert bruck.duration("all_to_all", MiB) == e + sum(steps)
    assert any("Bruck" in n for n in bruck.notes)

    dbt6 = CollectiveModel(network(("FullyConnected", 6, 50, 500)), system(all_reduce=impls("doubleBinaryTree")))
    assert min(dbt6.member_durations("all_reduce", MiB)) > 0 and dbt6.notes
    result = simulate(job(*[[all_reduce(1, MiB)]] * 6), network(("FullyConnected", 6, 50, 500)),
                      system(all_reduce=impls("doubleBinaryTree")))
    assert any("doubleBinaryTree" in n for n in result.notes)


def test_direct_with_a_window_below_n_minus_1_runs_in_rounds_of_the_window():
    # facts 3.2, FC 8, direct3: 3 packets in flight, 7 sends. The 3 local packets send at e;
    # their receives (e + d) make 3 network packets that send 3 more; those receives make 3
    # local packets, one of which sends the 7th; its receive's packet ends the phase:
    # 4e + 3d per chunk, + 2p for reduce-scatter (its two network blocks reduce)
    def per_chunk(op: str) -> int:
        return CollectiveModel(FC8, system(**{op: impls("direct3")})).duration(op, MiB) // 4

    assert per_chunk("reduce_scatter") * 4 == 13960  # ASTRA-sim [V]: 4e + 3d + 2p = 40 + 3330 + 120
    assert per_chunk("all_gather") == 4 * 10 + 3 * int(500 + (MiB // 4) / (50 * 2**30 / 1e9))  # m = D: d = 5382
    assert per_chunk("all_to_all") == 4 * 10 + 3 * 1110  # m = D/8: d = 1110
    assert CollectiveModel(FC8, system(all_gather=impls("direct3"))).notes == []  # ASTRA-sim's own rounds


def test_double_binary_tree_on_one_dimension_of_several():
    # Ring 4 x FC 2, ["ring", "doubleBinaryTree"], one chunk of 1 MiB: RS on dim 0 (ring,
    # m = 262144, d = 5382, p = 489): 10 + 3 (d + e + p) = 17653; all-reduce on dim 1 with the
    # trees of 2 (RootMax: NPUs 4-7 on top, 0-3 leaves; D = 262144): the tops end at
    # 2e + d + p = 5891, the leaves at 3e + 2d + p = 11283; AG on dim 0: 10 + 3 (d + e) = 16186,
    # each ring of dim 0 being all tops or all leaves
    net = network(("Ring", 4, 50, 500), ("FullyConnected", 2, 50, 500))
    model = CollectiveModel(net, system(all_reduce=impls("ring", "doubleBinaryTree"), dataset_splits=1))
    assert model.member_durations("all_reduce", MiB) == (17653 + 11283 + 16186,) * 4 + (17653 + 5891 + 16186,) * 4
    assert any("doubleBinaryTree on a network of several dimensions" in n for n in model.notes)
    with pytest.raises(SimulationError, match="cannot run reduce_scatter"):  # localBWAware's RS on a tree dim
        CollectiveModel(net, system(all_reduce=impls("doubleBinaryTree", "ring"))).plan("all_reduce", MiB)


@pytest.mark.parametrize("mode", ["unaware", "aware"])
def test_a_collective_with_no_dimension_to_run_on_ends_when_each_member_issues_it(mode):
    # involved_dim excludes both dimensions: no phase, nothing to exchange, nothing to wait for
    net = network(("Ring", 4, 50, 500), ("Ring", 2, 50, 500))
    tables = job(*[[comp(1, npu), all_reduce(2, MiB, 1, involved_dim=[False, False])] for npu in range(8)])
    assert finish_times(tables, net=net, mode=mode) == [1] + [npu * 1000 for npu in range(1, 8)]


def test_progress_reports_completed_nodes(monkeypatch):
    from chakra_core.sim.workload import issue

    monkeypatch.setattr(issue, "PROGRESS_EVERY", 2)
    calls = []
    tables = [pa.table({"id": pa.array(range(5), pa.uint64()), "type": pa.array([4] * 5, pa.int32()),
                        "duration_micros": pa.array([1] * 5, pa.uint64())})] * 4
    tables = [chakra_core.normalize_table(t) for t in tables]
    simulate(tables, load_network(CONFIGS / "Ring_4npus.yml"), BASE, progress=lambda *call: calls.append(call),
             share=False)
    assert calls == [("simulating nodes", done, 20) for done in range(2, 21, 2)]
    calls.clear()  # shared: NPU 0 stands for all four, in nodes of the whole job
    simulate(tables, load_network(CONFIGS / "Ring_4npus.yml"), BASE, progress=lambda *call: calls.append(call))
    assert calls == [("simulating nodes", 8, 20), ("simulating nodes", 16, 20)]
