"""Several jobs on one network (sim/colocation.py, sim/placement.py, network/waits.py,
`chakra simulate --workload A --workload B --placement P`): answers worked out by hand, the
issue's "Done when", shared simulation where the jobs are alike, and bad input."""

from __future__ import annotations

import json
import random

import pytest
from test_cli import assert_one_line_error, chakra
from test_sim import BASE, all_reduce, comp, job, network, system
from test_sim_aware import hop, recv, send

from chakra_core.format.job import Job
from chakra_core.generate.workloads import generate
from chakra_core.sim.colocation import PlacedJob, colocate, combine
from chakra_core.sim.errors import SimulationError
from chakra_core.sim.placement import place

SWITCH32 = network(("Switch", 32, 50, 500))
RING32 = network(("Ring", 32, 50, 500))
RING4 = network(("Ring", 4, 50, 500))
# eight chunks in flight per dimension: a ring's links are busy nearly all the time (bandwidth-bound)
STREAMING = system(active_chunks_per_dim=8, dataset_splits=16)


@pytest.fixture(scope="module")
def dp16() -> Job:
    """A 16-rank data-parallel job (chakra generate mlp: 32 MiB all-reduces between layers)."""
    return generate("mlp", 16).job("dp16")


@pytest.fixture(scope="module")
def streaming16() -> Job:
    """A bandwidth-bound 16-rank data-parallel job: one 32 MiB all-reduce (chakra generate mlp --layers 1)."""
    return generate("mlp", 16, layers=1).job("streaming16")


def two_copies(job_: Job, spec: str, net, sysc=BASE, mode="aware", **knobs):
    npus = place(spec, [job_.npus, job_.npus], net.npus)
    return colocate([PlacedJob("a", job_, npus[0]), PlacedJob("b", job_, npus[1])], net, sysc, mode=mode, **knobs)


# ---------------------------------------------------------------- placements


def test_placements_by_hand():
    assert place("packed", [2, 3], 6) == [[0, 1], [2, 3, 4]]
    assert place("interleaved", [2, 3], 6) == [[0, 2], [1, 3, 4]]
    # the first job over all 8 NPUs at stride 4, the second over the 6 left at stride 2
    assert place("spread", [2, 3], 8) == [[0, 4], [1, 3, 6]]
    order = list(range(8))
    random.Random(7).shuffle(order)  # the documented rule: the NPUs shuffled by the seed, then packed
    assert place("random:7", [3, 3], 8) == [order[:3], order[3:6]] != place("random:8", [3, 3], 8)


@pytest.mark.parametrize("document, fragment", [
    ({"jobs": [[0, 1]]}, "a list of 2 lists"),
    ({"jobs": [[0, 1], [2]]}, "jobs[1] must list 2 NPUs"),
    ({"jobs": [[0, 1], [1, 2]]}, "jobs[1]: NPU 1 is given to two ranks"),
    ({"jobs": [[0, 1], [2, 9]]}, "jobs[1]: 9 is not an NPU of the network"),
])
def test_placement_file_errors_name_the_entry(tmp_path, document, fragment):
    path = tmp_path / "place.json"
    path.write_text(json.dumps(document))
    with pytest.raises(SimulationError, match=fragment.replace("[", r"\[").replace("]", r"\]")):
        place(str(path), [2, 2], 4)


def test_combined_job_keeps_each_jobs_groups_and_peers():
    # job 1's send to its rank 1 goes to NPU 0 where that rank is placed; each job's "all NPUs" is its own group
    a, b = Job(job([send(1, 1, 64)], [recv(1, 0, 64)])), Job(job([send(1, 1, 64)], [recv(1, 0, 64)]))
    combined, job_of, _ = combine([PlacedJob("a", a, [3, 1]), PlacedJob("b", b, [2, 0])], RING4)
    assert job_of == [1, 0, 1, 0]
    assert combined.comm_groups == {1: (3, 1), 2: (2, 0)}
    assert combined.tables[2].column("comm_dst").to_pylist() == [0]
    assert combined.tables[0].column("comm_src").to_pylist() == [2]


# ---------------------------------------------------------------- answers by hand


def test_a_small_message_waits_behind_the_other_jobs_big_one():
    # Ring 4. Job "small" on NPUs 0 and 2 sends 1 KiB 0 -> 1 -> 2 (a tie: clockwise); job "big"
    # on NPUs 1 and 3 sends 4 MiB 1 -> 2 -> 3, holding link 1 -> 2 until 4 MiB / 53.69 = 78125.
    # Alone, small takes 2 hops of hop(1 KiB) = 519; together it reaches NPU 1 at 519, waits
    # until 78125 and arrives at 78125 + 519. Big is never delayed (it entered first).
    big, small = 4 * 2**20, 1024
    placed = [PlacedJob("small", Job(job([send(1, 1, small)], [recv(1, 0, small)])), [0, 2]),
              PlacedJob("big", Job(job([send(1, 1, big)], [recv(1, 0, big)])), [1, 3])]
    outcome = colocate(placed, RING4, BASE, mode="aware")
    small_job, big_job = outcome.jobs
    assert (small_job.alone_finish_ns, small_job.finish_ns) == (2 * hop(small), 78125 + hop(small))
    assert (big_job.finish_ns, big_job.slowdown) == (2 * hop(big), 1.0)
    assert small_job.behind == [{"job": 1, "waited_ns": 78125 - hop(small), "bytes": big}]
    assert small_job.links == [{"link": "dim 0: NPU 1 -> NPU 2", "waited_ns": 78125 - hop(small)}]
    assert big_job.behind == [] and big_job.waited_ns == 0


def test_a_start_offset_moves_the_job_and_its_finish_counts_from_it():
    # the same two jobs, big starting 100 us late: small is done long before, nobody waits
    big, small = 4 * 2**20, 1024
    placed = [PlacedJob("small", Job(job([send(1, 1, small)], [recv(1, 0, small)])), [0, 2]),
              PlacedJob("big", Job(job([send(1, 1, big)], [recv(1, 0, big)])), [1, 3], start_ns=100_000)]
    outcome = colocate(placed, RING4, BASE, mode="aware")
    assert [j.slowdown for j in outcome.jobs] == [1.0, 1.0]
    assert outcome.together.npus[3].finish_ns == 100_000 + 2 * hop(big)


def test_a_job_beside_an_idle_one_is_unchanged(streaming16):
    idle = Job(job(*[[{"id": 1, "type": "COMP_NODE", "duration_micros": 5000}]] * 16))
    npus = place("interleaved", [16, 16], 32)
    outcome = colocate([PlacedJob("dp", streaming16, npus[0]), PlacedJob("idle", idle, npus[1])], RING32, STREAMING,
                       mode="aware")
    assert outcome.jobs[0].finish_ns == outcome.jobs[0].alone_finish_ns
    assert [b["job"] for b in outcome.jobs[0].behind] == [0]  # its own chunks queue behind each other, as alone


# ---------------------------------------------------------------- the "Done when"


def test_two_copies_on_disjoint_switch_ports_do_not_slow_each_other(dp16):
    outcome = two_copies(dp16, "packed", SWITCH32)
    assert [job.slowdown for job in outcome.jobs] == [1.0, 1.0]
    assert all(job.waited_ns == 0 for job in outcome.jobs)


def test_two_bandwidth_bound_copies_interleaved_on_a_ring(streaming16, tmp_path):
    aware = two_copies(streaming16, "interleaved", RING32, STREAMING)
    for job_ in aware.jobs:
        assert 1.4 <= job_.slowdown <= 2.2
        assert {b["job"] for b in job_.behind} == {0, 1} and job_.links[0]["waited_ns"] > 0
    unaware = two_copies(streaming16, "interleaved", RING32, STREAMING, mode="unaware")
    assert [job_.slowdown for job_ in unaware.jobs] == [1.0, 1.0] and not unaware.shares_links
    path = tmp_path / "place.json"
    path.write_text(json.dumps({"jobs": [list(range(0, 32, 2)), list(range(1, 32, 2))]}))
    from_file = two_copies(streaming16, str(path), RING32, STREAMING)
    assert [(j.finish_ns, j.alone_finish_ns) for j in from_file.jobs] == \
        [(j.finish_ns, j.alone_finish_ns) for j in aware.jobs]


# ---------------------------------------------------------------- shared simulation


def test_shared_simulation_where_jobs_are_alike_and_not_where_they_differ(dp16):
    # Switch 16 x Switch 2, packed: job 1 is job 0 moved one step along dimension 1, and the
    # ranks of a data-parallel job run alike along dimension 0: one NPU stands for all 32
    net = network(("Switch", 16, 50, 500), ("Switch", 2, 25, 700))
    alike = two_copies(dp16, "packed", net)
    assert alike.together.sharing == {"simulated_npus": 1, "npus": 32, "dimensions": [0, 1]}
    unshared = two_copies(dp16, "packed", net, share=False)
    assert [j.to_dict() for j in alike.jobs] == [j.to_dict() for j in unshared.jobs]
    other = generate("mlp", 16, hidden=512).job("other")
    npus = place("packed", [16, 16], 32)
    placed = [PlacedJob("a", dp16, npus[0]), PlacedJob("b", other, npus[1])]
    differ = colocate(placed, net, BASE, mode="aware")
    assert differ.together.sharing == {"simulated_npus": 2, "npus": 32, "dimensions": [0]}  # one NPU per job
    assert [j.to_dict() for j in differ.jobs] == [j.to_dict() for j in colocate(placed, net, BASE, "aware", False).jobs]
    assert differ.jobs[0].finish_ns == alike.jobs[0].finish_ns  # on links of its own: as beside its copy


# ---------------------------------------------------------------- the command


def test_simulate_several_workloads_json_and_timeline(streaming16, tmp_path):
    streaming16.write(str(tmp_path), "dp16")
    net = tmp_path / "ring32.yml"
    net.write_text("topology: [ Ring ]\nnpus_count: [ 32 ]\nbandwidth: [ 50.0 ]\nlatency: [ 500.0 ]\n")
    sysfile = tmp_path / "sys.json"
    sysfile.write_text(json.dumps({"scheduling-policy": "LIFO", "endpoint-delay": 10,
                                   "active-chunks-per-dimension": 8, "preferred-dataset-splits": 16,
                                   "all-reduce-implementation": ["ring"], "all-gather-implementation": ["ring"],
                                   "reduce-scatter-implementation": ["ring"], "all-to-all-implementation": ["ring"],
                                   "collective-optimization": "localBWAware", "local-mem-bw": 1600}))
    prefix, timeline = tmp_path / "dp16", tmp_path / "jobs.json"
    result = chakra("simulate", "--workload", prefix, "--workload", prefix, "--placement", "interleaved",
                    "--network", net, "--system", sysfile, "--mode", "aware", "--json", "--timeline", timeline)
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert [job_["npus"][:2] for job_ in doc["jobs"]] == [[0, 2], [1, 3]]
    assert all(1.4 <= job_["slowdown"] <= 2.2 and job_["alone_finish_ns"] < job_["finish_ns"] for job_ in doc["jobs"])
    trace = json.loads(timeline.read_text())
    names = [e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"]
    assert names == [f"job 0: {prefix}", f"job 1: {prefix}"]
    again = tmp_path / "again.json"
    drawn = chakra("timeline", "--workload", prefix, "--workload", prefix, "--placement", "interleaved",
                   "--network", net, "--system", sysfile, "--mode", "aware", "-o", again)
    assert drawn.returncode == 0 and "2 jobs" in drawn.stdout, drawn.stderr
    assert json.loads(again.read_text())["otherData"] == trace["otherData"]  # the same run, the same document
    text = chakra("simulate", "--workload", prefix, "--workload", prefix, "--network", net, "--system", sysfile)
    assert "the unaware network shares nothing" in text.stdout and "slowdown" in text.stdout
    assert_one_line_error(chakra("simulate", "--workload", prefix, "--workload", prefix, "--placement", "diagonal",
                                 "--network", net, "--system", sysfile), "placement 'diagonal'")
    assert_one_line_error(chakra("simulate", "--workload", prefix, "--workload", prefix, "--start-ns", "5",
                                 "--network", net, "--system", sysfile), "--start-ns '5'")


def test_a_job_a_shared_run_leaves_out_waits_as_the_one_it_copies(streaming16):
    # Ring 16 x Switch 2, packed: one NPU stands for all (both dimensions shared); job 1's waits (on
    # its own ring, behind its own chunks) are job 0's moved there, as the unshared run finds them
    net = network(("Ring", 16, 50, 500), ("Switch", 2, 25, 700))
    shared = two_copies(streaming16, "packed", net, STREAMING)
    assert shared.together.sharing["dimensions"] == [0, 1]
    assert shared.jobs[1].links[0]["link"].startswith("dim 0: NPU 1")
    assert [j.to_dict() for j in shared.jobs] == [j.to_dict() for j in two_copies(streaming16, "packed", net,
                                                                                 STREAMING, share=False).jobs]


def test_a_job_rerun_beside_idle_npus():
    # a pipeline job's holding tables conflict with its sends, so the run is repeated; the idle
    # NPUs' empty workloads must come back as they were (they once came back as their feeders)
    job_ = generate("transformer", 16, tp=2, pp=2, layers=2, seq=128).job("pp")
    net = network(("Ring", 4, 200, 500), ("Switch", 10, 50, 500))
    outcome = colocate([PlacedJob("pp", job_, place("random:0", [16], 40)[0])], net, BASE, mode="aware")
    assert outcome.together.npus[outcome.jobs[0].npus[0]].nodes == job_.tables[0].num_rows
    assert outcome.jobs[0].slowdown == 1.0


def test_collectives_without_a_group_column_stay_on_their_job():
    # a table without pg_name: every collective on all the job's NPUs, not the network's
    bare = [t.drop_columns(["pg_name"]) for t in job([all_reduce(1, 2**20)], [all_reduce(1, 2**20)])]
    placed = [PlacedJob("a", Job(bare), [0, 1]), PlacedJob("b", Job(bare), [2, 3])]
    outcome = colocate(placed, network(("Switch", 4, 50, 500)), BASE, mode="aware")
    assert [j.slowdown for j in outcome.jobs] == [1.0, 1.0]
    combined, _, _ = combine(placed, network(("Switch", 4, 50, 500)))
    assert combined.tables[2].column("pg_name").to_pylist() == ["2"]


@pytest.mark.parametrize("node, fragment", [
    ({"id": 7, "type": "COMM_COLL_NODE", "comm_type": 0, "comm_size": 64, "pg_name": "9"},
     "a.1.et: node 7: communicator group 9 not found"),
    ({"id": 7, "type": "COMM_SEND_NODE", "comm_dst": 5, "comm_size": 64, "comm_tag": 1},
     "a.1.et: node 7: comm_dst 5 is not a rank of the job (2 ranks)"),
])
def test_a_bad_node_is_named_by_its_file_and_id(node, fragment):
    bad = Job(job([comp(1, 1)], [comp(1, 1), node]))
    with pytest.raises(SimulationError, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        combine([PlacedJob("a", bad, [0, 1])], RING4)
