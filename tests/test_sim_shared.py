"""Shared simulation (sim/symmetry.py): NPUs that run alike simulated once must give exactly the
unshared run's results, per NPU and to the nanosecond, in both network models; where the job's
symmetry breaks, the job runs unshared."""

from __future__ import annotations

import random

import pytest
from test_sim import BASE, CONFIGS, MICRO, REFERENCE, TWO_D, TWO_D_SYSTEM, network, reference_rows
from test_sim import comp, job
from random_systems import random_network, random_system
from test_sim_aware import pipeline_job

from chakra_core.generate.families import FAMILIES, generate_family
from chakra_core.generate.workloads import generate
from chakra_core.sim.config import load_network, load_system
from chakra_core.sim.engine import SimulationDeadlock, simulate
from chakra_core.sim.files import simulate_files

MODES = ("unaware", "aware")


def both(tables, net, sysc, groups=None, mode="unaware", **knobs):
    """(shared result, unshared result); asserts they are the same per NPU."""
    shared = simulate(tables, net, sysc, comm_groups=groups, mode=mode, **knobs)
    unshared = simulate(tables, net, sysc, comm_groups=groups, mode=mode, share=False, **knobs)
    assert [n.to_dict() for n in shared.npus] == [n.to_dict() for n in unshared.npus]
    assert shared.notes == unshared.notes and unshared.sharing == {}
    return shared, unshared


# (workload options, network): the ranks lie on the network as the workload lays them out
GENERATED = [
    (dict(workload="transformer", npus=32, tp=2, pp=2, layers=4, batch=32),
     network(("Ring", 2, 200, 500), ("Switch", 2, 50, 500), ("Switch", 8, 50, 500))),
    (dict(workload="transformer", npus=64, tp=4, pp=2, layers=2, batch=64),
     network(("Ring", 4, 200, 500), ("Switch", 2, 50, 500), ("Ring", 8, 50, 500))),
    (dict(workload="mlp", npus=16, parallelism="mp-dp", mp=4), network(("Ring", 4, 200, 500), ("Switch", 4, 50, 1000))),
    (dict(workload="mlp", npus=8, parallelism="dp"), network(("Switch", 8, 50, 500))),
    (dict(workload="dlrm", npus=8), network(("Ring", 8, 50, 500))),
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("options,net", GENERATED, ids=[f"{o['workload']}-{o['npus']}" for o, _ in GENERATED])
def test_generated_jobs_shared_equal_unshared(options, net, mode):
    options = dict(options)
    name = options.pop("workload")
    built = generate(name, options.pop("npus"), **options).job(name)
    shared, _ = both(built.tables, net, TWO_D_SYSTEM, built.comm_groups, mode)
    if built.name != "dlrm" and (mode == "unaware" or net.npus != 32):  # DLRM's ranks own different tables
        assert shared.sharing["simulated_npus"] < net.npus  # a copy of the ranks ran, not all of them
    # (aware, the 32-NPU transformer's shared run has two completions meeting in a tick: it runs unshared)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_random_family_jobs_shared_equal_unshared(family, mode):
    for seed in range(3):
        net = network(("Ring", 4, 200, 500), ("Switch", 2, 50, 1000)) if seed % 2 else load_network(
            CONFIGS / "Switch_8npus.yml")
        _, tables = generate_family(family, net.npus, random.Random(seed))
        both(tables, net, TWO_D_SYSTEM, mode=mode)


@pytest.mark.parametrize("mode", MODES)
def test_random_jobs_of_groups_and_sends_shared_equal_unshared(mode):
    for seed in range(6):
        net = TWO_D if seed % 2 else network(("Switch", 8, 50, 500))
        sysc = TWO_D_SYSTEM if seed % 2 else BASE
        tables, groups = pipeline_job(net.npus, 4, seed, longest_us=0)  # back to back: every rank alike
        both(tables, net, sysc, groups, mode)


@pytest.mark.parametrize("mode", MODES)
def test_every_reference_run_shared_equals_unshared(mode):
    for row in reference_rows(mode):
        op = row["workload"].split("/")[0]
        args = (str(MICRO / row["workload"] / op), str(REFERENCE / row["network_config"]),
                str(REFERENCE / row["system_config"]))
        shared, _ = simulate_files(*args, mode=mode)
        unshared, _ = simulate_files(*args, mode=mode, share=False)
        assert [n.to_dict() for n in shared.npus] == [n.to_dict() for n in unshared.npus], row
        assert shared.sharing["simulated_npus"] == 1  # one collective per NPU, ids from the rank: NPU 0 runs


def test_a_straggler_or_a_rank_that_differs_breaks_the_symmetry_and_the_job_runs_unshared():
    net = network(("Ring", 4, 200, 500), ("Switch", 4, 50, 1000))
    _, tables = generate_family("data_parallel", 16, random.Random(1))
    speeds = [1.0] * 16
    speeds[5] = 0.5  # NPU 5 at half speed: no move along either dimension maps the job onto itself
    shared, _ = both(tables, net, TWO_D_SYSTEM, npu_speed=speeds)
    assert shared.sharing == {}
    speeds = [1.0, 1.0, 1.0, 1.0, 0.5, 0.5, 0.5, 0.5] * 2  # every second Switch coordinate slower: Ring shared
    shared, _ = both(tables, net, TWO_D_SYSTEM, npu_speed=speeds)
    assert shared.sharing["dimensions"] == [0]
    other = simulate(tables[:3] + [tables[3].slice(0, tables[3].num_rows - 1)] + tables[4:], net, TWO_D_SYSTEM)
    assert other.sharing == {}


@pytest.mark.parametrize("mode", MODES)
def test_completions_meeting_in_a_tick_no_longer_break_sharing(mode):
    # every NPU: a metadata node and an all-reduce with no dimension to run on, both done at
    # tick 0 and scheduled then: they run in the order of their node indices (workload/order.py),
    # whatever order the NPUs' events ran in, so the shared run stands for the job
    net = network(("Ring", 2, 200, 500), ("Switch", 2, 50, 1000))
    idle = {"id": 1, "type": "COMM_COLL_NODE", "comm_type": 0, "comm_size": 1 << 20, "involved_dim": [False, False]}
    tables = job(*[[{"id": 0, "type": "METADATA_NODE"}, idle, comp(2, 1, 0, 1)] for _ in range(4)])
    shared, _ = both(tables, net, TWO_D_SYSTEM, mode=mode)
    assert shared.sharing["simulated_npus"] == 1


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("npus,tp,pp", [(16, 2, 2), (32, 2, 2), (64, 4, 2)])
def test_random_system_files_share_and_equal_the_unshared_run(npus, tp, pp, mode):
    # scheduling policy, collective optimisation, chunks, splits, implementations per dimension,
    # bandwidths and latencies drawn at random: no run falls back, and each equals the unshared one
    # (and the reference folder's system file)
    built = generate("transformer", npus, tp=tp, pp=pp, layers=2, batch=npus).job("transformer")
    for seed in range(5):
        rng = random.Random(seed)
        net = random_network(rng, [("Ring", tp), ("Switch", pp), ("Switch", npus // tp // pp)])
        system = random_system(rng, 3) if seed else load_system(CONFIGS / "Ring_4chunks.json")
        shared, _ = both(built.tables, net, system, built.comm_groups, mode)
        assert shared.sharing["simulated_npus"] == pp, shared.sharing


def test_a_sweep_row_records_what_was_shared(monkeypatch):
    from chakra_core.format.job import Job
    from chakra_core.sim.engine import Engine
    from chakra_core.sim.sharing import SymmetryBroken
    from pipeline.sweep_point import SweepPoint
    from pipeline.simulation import simulate_job

    net = network(("Ring", 2, 200, 500), ("Switch", 2, 50, 1000))
    tables = job(*[[comp(0, 1), comp(1, 2, 0)] for _ in range(4)])

    def row():
        return simulate_job("j", Job(tables), 4, SweepPoint("s", net, TWO_D_SYSTEM))
    assert (row()["simulated_npus"], row()["unshared"]) == (1, None)

    def broken(self, workload, shortcuts):
        raise SymmetryBroken("a mirror ended late")
    monkeypatch.setattr(Engine, "_check_shared", broken)  # a shared run that cannot stand for the job
    fell_back = row()
    assert (fell_back["simulated_npus"], fell_back["unshared"]) == (4, "shared run not used: a mirror ended late")
    assert fell_back["finish_ns"] == simulate(tables, net, TWO_D_SYSTEM, share=False).finish_ns == 3000


def test_where_a_dimension_cannot_be_shared_the_others_still_are(monkeypatch):
    from chakra_core.sim.engine import Engine
    from chakra_core.sim.sharing import SymmetryBroken

    built = generate("transformer", 32, tp=2, pp=2, layers=2, batch=32).job("transformer")
    net = network(("Ring", 2, 200, 500), ("Switch", 2, 50, 500), ("Switch", 8, 50, 500))
    check = Engine._check_shared

    def broken_along_2(self, workload, shortcuts):  # as if copies along dimension 2 ran apart
        if 2 in self.sharing.dims:
            raise SymmetryBroken("a mirror ended late")
        check(self, workload, shortcuts)
    monkeypatch.setattr(Engine, "_check_shared", broken_along_2)
    shared, _ = both(built.tables, net, TWO_D_SYSTEM, built.comm_groups)
    assert shared.sharing == {"simulated_npus": 16, "npus": 32, "dimensions": [0], "not_shared": {
        "dimensions": [2], "why": "shared run not used: a mirror ended late", "shared_would_simulate": 2}}


def test_json_says_what_was_shared(tmp_path):
    import json
    import subprocess
    import sys

    generate("transformer", 16, tp=2, pp=2, layers=2, batch=16).write(str(tmp_path), "gpt")
    (tmp_path / "net.yml").write_text("topology: [ Ring, Switch, Switch ]\nnpus_count: [ 2, 2, 4 ]\n"
                                      "bandwidth: [ 200.0, 50.0, 50.0 ]\nlatency: [ 500.0, 500.0, 500.0 ]\n")
    run = [sys.executable, "-m", "chakra_core.cli", "simulate", "--workload", str(tmp_path / "gpt"), "--network",
           str(tmp_path / "net.yml"), "--system", str(CONFIGS / "Ring_4chunks.json"), "--json"]
    shared = json.loads(subprocess.run(run, capture_output=True, text=True, check=True).stdout)
    unshared = json.loads(subprocess.run(run + ["--no-share"], capture_output=True, text=True, check=True).stdout)
    assert shared["sharing"] == {"simulated_npus": 2, "npus": 16, "dimensions": [0, 2]}
    assert unshared["sharing"] == {} and shared["npus"] == unshared["npus"]
    summary = subprocess.run(run[:-1], capture_output=True, text=True, check=True).stdout
    assert "shared simulation: 2 of 16 NPUs simulated (alike along dimension(s) 0, 2)" in summary



def test_what_if_knobs_keep_the_results_of_the_unshared_run():
    _, tables = generate_family("data_parallel", 2, random.Random(4))
    net = network(("Ring", 4, 200, 500), ("Switch", 2, 50, 1000))
    for mode in MODES:  # a 2-rank trace scaled to 8 NPUs, a faster network, slower compute
        shared, _ = both(tables, net, TWO_D_SYSTEM, mode=mode, traced_npus=2, comm_scale=0.5, compute_scale=1.5)
        assert shared.sharing["simulated_npus"] == 1


def test_a_shared_run_that_deadlocks_leaves_the_report_to_the_unshared_run():
    # NPU (a, b) of Ring 2 x Switch 2 waits to receive from (1 - a, b) before sending to it
    net = network(("Ring", 2, 200, 500), ("Switch", 2, 50, 1000))
    ranks = []
    for npu in range(4):
        peer = npu ^ 1
        ranks.append([{"id": 1, "type": "COMM_RECV_NODE", "comm_src": peer, "comm_size": 8, "comm_tag": 1},
                      {"id": 2, "type": "COMM_SEND_NODE", "comm_dst": peer, "comm_size": 8, "comm_tag": 1,
                       "data_deps": [1]}])
    reports = []
    for share in (True, False):
        with pytest.raises(SimulationDeadlock) as info:
            simulate(job(*ranks), net, BASE, share=share)
        reports.append(info.value.report)
    assert reports[0] == reports[1] and set(reports[0]) == {0, 1, 2, 3}


def test_an_aware_run_that_replays_every_collective_live_is_not_shared():
    tables, groups = pipeline_job(8, 4, 0, longest_us=0)
    shared, _ = both(tables, network(("Switch", 8, 50, 500)), BASE, groups, "aware", reuse_alone=False)
    assert shared.sharing == {}


@pytest.mark.parametrize("mode", MODES)
def test_jobs_of_host_and_device_work_share_their_critical_paths(mode):
    # CPU ops launch kernels (the kernel's first data dependency) and wait for an all-reduce:
    # the critical path's attribution (sim/criticalpath.py) is the representative's too, with
    # and without the host-overhead model
    from chakra_core.sim.config import DEFAULT_HOST_OVERHEAD_SYSTEM, load_system

    rank = [comp(0, 5, is_cpu_op=True), comp(1, 20, 0), comp(2, 3, 0, is_cpu_op=True),
            {"id": 3, "type": "COMM_COLL_NODE", "comm_type": 0, "comm_size": 1 << 20, "data_deps": [1]},
            comp(4, 2, 3, 2, is_cpu_op=True)]
    net = network(("Ring", 2, 200, 500), ("Switch", 2, 50, 1000))
    for sysc in (TWO_D_SYSTEM, load_system(DEFAULT_HOST_OVERHEAD_SYSTEM).model_copy(
            update={"all_reduce": TWO_D_SYSTEM.all_reduce})):
        shared, _ = both(job(*[rank] * 4), net, sysc, mode=mode)
        assert shared.sharing["simulated_npus"] == 1 and shared.npus[3].critical_path
