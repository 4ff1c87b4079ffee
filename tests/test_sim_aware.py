"""The message-level replay and the congestion-aware model (docs/simulator.md): every algorithm,
several network dimensions, sub-groups, and collectives and sends that share links in one job.
Values marked [V] are what ASTRA-sim itself reports for the same configuration; the others are
worked out by hand from its rules."""

from __future__ import annotations

import itertools
import random

import pytest
from test_sim import (
    BASE,
    CONFIGS,
    FC8,
    RING8,
    SWITCH8,
    TWO_D,
    TWO_D_SYSTEM,
    MiB,
    all_reduce,
    comp,
    finish_times,
    impls,
    job,
    network,
    same_on_every_npu,
    system,
)

from chakra_core.generate.builder import JobBuilder
from chakra_core.sim.backends import BACKENDS
from chakra_core.sim.config import load_network
from chakra_core.sim.engine import Engine, SimulationDeadlock, simulate
from chakra_core.sim.events import EventQueue
from chakra_core.sim.network.aware import AWARE_MULTI_DIM_NOTE, AwareFabric, WatchedFabric
from chakra_core.sim.system.collectives import CollectiveModel, SimulationError
from chakra_core.sim.system.holding import group_rotation, translatable
from chakra_core.sim.system.packets import Replay, replay_alone
from chakra_core.sim.workload.feeder import GraphFeeder

aware_model = BACKENDS["aware"].collectives  # the congestion-aware back-end's collective model

THREE_D = network(("Ring", 3, 50, 500), ("FullyConnected", 4, 100, 300), ("Switch", 2, 25, 700))
OPS = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all")


def hop(size: int, latency: float = 500, gbps: float = 50) -> int:
    """One store-and-forward hop: floor(lat + m / bw)."""
    return int(latency + size / (gbps * 2**30 / 1e9))


# ---------------------------------------------------------------- the replay against the closed forms

CLOSED_FORM_CASES = [
    (name, net, sysname, changes, impl, op)
    for (name, net), (sysname, changes), impl, op in itertools.product(
        [("Ring8", RING8), ("Switch8", SWITCH8), ("Ring4xSwitch4", TWO_D), ("Ring3xFC4xSwitch2", THREE_D)],
        [("base", {}), ("active2", {"active_chunks_per_dim": 2}),
         ("2queues", {"num_queues_per_dim": 2, "active_chunks_per_dim": 2}),
         ("baseline", {"collective_optimization": "baseline"}), ("3splits", {"dataset_splits": 3})],
        ["ring", "direct", "halvingDoubling", "oneRing"], OPS)
    # halvingDoubling over the 3 NPUs of a dimension folds a rank in: its ranks differ, no closed form
    if not (impl == "halvingDoubling" and net is THREE_D and op != "all_to_all")
]


@pytest.mark.parametrize("name,net,sysname,changes,impl,op", CLOSED_FORM_CASES,
                         ids=["-".join(c[i] for i in (0, 2, 4, 5)) for c in CLOSED_FORM_CASES])
def test_the_packet_machines_reproduce_every_closed_form(name, net, sysname, changes, impl, op):
    # every NPU's chunks through its own queues, every message on the congestion-unaware
    # network, must give the flow shop of the closed-form phases (which is ASTRA-sim's, [V])
    sysc = system(**changes, **{op: impls(*[impl] * (1 if impl == "oneRing" else len(net.dims)))})
    model = CollectiveModel(net, sysc)
    assert model.plan(op, 1_000_000).symmetric
    assert set(model.replayed(op, 1_000_000)) == {model.duration(op, 1_000_000)}


HOLDING_CASES = [  # one phase, one chunk at a time: each finish is max_j (offset_j + L_ij)
    ("ring all-reduce, Ring 8", RING8, BASE, "all_reduce", None),
    ("ring all-to-all, Switch 8", SWITCH8, BASE, "all_to_all", None),
    ("doubleBinaryTree, FC 8", FC8, system(all_reduce=impls("doubleBinaryTree")), "all_reduce", None),
    ("halvingDoubling folded, Ring 6", network(("Ring", 6, 50, 500)), system(all_reduce=impls("halvingDoubling")),
     "all_reduce", None),
    ("Bruck, Ring 8, 2 queues", RING8, system(all_to_all=impls("halvingDoubling"), num_queues_per_dim=2,
                                               active_chunks_per_dim=2), "all_to_all", None),
    ("uneven sub-group ring", RING8, BASE, "reduce_scatter", (0, 1, 2, 3)),
    ("direct, 2 ranks", network(("FullyConnected", 2, 50, 500)), system(all_reduce=impls("direct")), "all_reduce",
     None),
]


@pytest.mark.parametrize("name,net,sysc,op,group", HOLDING_CASES, ids=[c[0] for c in HOLDING_CASES])
def test_members_issuing_apart_shift_the_replay_as_a_max_plus_system(name, net, sysc, op, group):
    model = CollectiveModel(net, sysc)
    assert model._offsets_only_shift(model.plan(op, MiB, None, group))  # the shortcut is what is checked
    n = len(group) if group else net.npus
    for seed in range(4):
        offsets = tuple((seed * 7919 + k * 104729) % (40_000 if seed < 3 else 7) for k in range(n))
        offsets = tuple(o - min(offsets) for o in offsets)
        assert model.member_finish(op, MiB, None, group, offsets) == model.replayed(op, MiB, None, group, offsets)


def test_members_issuing_apart_with_several_phases_are_replayed():
    model = CollectiveModel(TWO_D, TWO_D_SYSTEM)
    assert not model._offsets_only_shift(model.plan("all_reduce", MiB))  # chunks may change order in a queue
    offsets = tuple(1000 * (npu % 3) for npu in range(16))
    finishes = model.member_finish("all_reduce", MiB, None, None, offsets)
    assert finishes == model.replayed("all_reduce", MiB, None, None, offsets)
    # as with a straggler (test_sim.py), the last issuers end as if everyone had started with
    # them, the others earlier
    assert max(finishes) == 2000 + 61230 > min(finishes)


# ---------------------------------------------------------------- aware, one dimension, every algorithm

ASTRA_SIM_AWARE = [  # ASTRA-sim's congestion-aware binary [V]
    ("direct all-to-all, Ring 8", RING8, system(all_to_all=impls("direct")), "all_to_all", 28480),
    # 7 messages leave back to back through the uplink: 20 + 6 * 610 + 2 * 1110 = 5900 per chunk
    ("direct all-to-all, Switch 8", SWITCH8, system(all_to_all=impls("direct")), "all_to_all", 4 * 5900),
    ("doubleBinaryTree, Switch 8 (last NPU)", SWITCH8, system(all_reduce=impls("doubleBinaryTree")), "all_reduce",
     299510),
]


@pytest.mark.parametrize("name,net,sysc,op,expected", ASTRA_SIM_AWARE, ids=[c[0] for c in ASTRA_SIM_AWARE])
def test_aware_algorithms_match_astra_sim(name, net, sysc, op, expected):
    assert max(aware_model(net, sysc).member_durations(op, MiB)) == expected


@pytest.mark.parametrize("impl,op", [(i, o) for i in ("ring", "direct", "halvingDoubling") for o in OPS])
def test_aware_equals_unaware_where_no_link_carries_two_messages(impl, op):
    # FullyConnected 8, one chunk at a time: every message has its own link and one hop, so
    # per-hop and per-message serialization agree (facts 5)
    sysc = system(**{op: impls(impl)})
    unaware = CollectiveModel(FC8, sysc).duration(op, MiB)
    assert aware_model(FC8, sysc).member_durations(op, MiB) == (unaware,) * 8


def test_aware_serial_algorithms_pay_every_hop_on_a_switch():
    # halvingDoubling all-reduce on Switch 8: one message per NPU in flight, partners a
    # permutation, so no waiting; each step 2 hops: 2 * hop(m) + e, plus p on packets 2 and 3
    steps = [(131072, 120), (65536, 60), (32768, 0), (32768, 0), (65536, 0), (131072, 0)]
    per_chunk = 10 + sum(2 * hop(m) + 10 + p for m, p in steps)
    assert per_chunk == 23334
    hd = aware_model(SWITCH8, system(all_reduce=impls("halvingDoubling")))
    assert hd.member_durations("all_reduce", MiB) == (4 * per_chunk,) * 8
    # Bruck's all-to-all (the extension): 3 steps of D/2 = 131072
    bruck = aware_model(SWITCH8, system(all_to_all=impls("halvingDoubling")))
    assert bruck.member_durations("all_to_all", MiB) == (4 * (10 + 3 * (2 * hop(131072) + 10)),) * 8
    assert any("Bruck" in n for n in bruck.notes)


def test_aware_direct_all_gather_queues_on_the_uplink():
    # as the facts' all-to-all: 7 messages of D = 262144 leave through the uplink one after
    # the other (occupying floor(m / bw) = 4882 each); the last reaches its NPU 2 hops later
    occupy = int((MiB // 4) / (50 * 2**30 / 1e9))
    per_chunk = 2 * 10 + 6 * occupy + 2 * hop(MiB // 4)
    assert aware_model(SWITCH8, system(all_gather=impls("direct"))).member_durations("all_gather", MiB) == \
        (4 * per_chunk,) * 8


def test_aware_double_binary_tree_chunks_share_links():
    # FC 8: a rank that has just sent a chunk down to a child starts its next chunk, where it
    # may be that child's leaf, and its message up waits on the same link: slower than unaware
    dbt = system(all_reduce=impls("doubleBinaryTree"))
    aware, unaware = (m(FC8, dbt).member_durations("all_reduce", MiB) for m in (aware_model, CollectiveModel))
    assert max(unaware) == 123052 and max(aware) > max(unaware)
    # one chunk alone: no link carries two messages at once, so the facts' 7e + 6d + 5p
    single = aware_model(FC8, system(all_reduce=impls("doubleBinaryTree"), dataset_splits=1))
    assert max(single.member_durations("all_reduce", MiB // 4)) == 34807


# ---------------------------------------------------------------- aware, several dimensions


def test_aware_on_two_dimensions_is_the_one_dimensional_model_per_dimension():
    # Ring 4 (200 GB/s, 500 ns) x Switch 4 (50 GB/s, 1000 ns), as the facts' 61230 derivation:
    # RS dim 0 = 2815 and AG dim 0 = 2455 (1 hop, as unaware); the dim-1 phase crosses 2 hops
    # each paying serialization: hop = floor(1000 + 16384 / 53.69) = 1305, d = 2610, so
    # AR dim 1 = 10 + 6 (2610 + 10) + 3 * 30 = 15820 (unaware 13990) and RS dim 1 = 10 + 3 (2610 + 10 + 30) = 7960
    model = aware_model(TWO_D, TWO_D_SYSTEM)
    assert model.member_durations("all_reduce", MiB) == (2815 + 4 * 15820 + 2455,) * 16
    assert model.member_durations("reduce_scatter", MiB) == (2815 + 4 * 7960,) * 16
    assert model.notes == [AWARE_MULTI_DIM_NOTE]
    # rings and fully-connected dimensions: 1 hop per message, one phase per dimension at a time
    ring_fc = network(("Ring", 4, 200, 500), ("FullyConnected", 4, 50, 1000))
    for op in OPS:
        assert aware_model(ring_fc, TWO_D_SYSTEM).member_durations(op, MiB) == \
            (CollectiveModel(ring_fc, TWO_D_SYSTEM).duration(op, MiB),) * 16


def test_messages_across_dimensions_are_routed_lowest_dimension_first():
    fabric = AwareFabric(network(("Ring", 4, 50, 500), ("Switch", 2, 50, 500)), EventQueue())
    # NPU 3 = (3, 0) to NPU 4 = (0, 1): dim 0 ring 3 -> 0 (1 hop, the short way), then dim 1 0 -> switch -> 1
    assert [link for link, _ in fabric.route(3, 4)] == [(0, 0, 3, 0), (1, 0, 0, "up"), (1, 0, 1, "down")]
    # a line of dim 0 is named by the NPU whose dim-0 coordinate is 0: NPU 6 = (2, 1) -> 4 = (0, 1),
    # 2 hops either way round: the tie goes clockwise
    assert [link for link, _ in fabric.route(6, 4)] == [(0, 4, 2, 3), (0, 4, 3, 0)]
    assert fabric.route(5, 5) == ()


def test_aware_one_ring_over_two_dimensions_pays_the_extra_hops():
    # oneRing on Ring 4 x Ring 2: neighbours 3 -> 4 and 7 -> 0 cross both dimensions (2 hops
    # store and forward); one ring of 8 with two slower links costs more than unaware
    net = network(("Ring", 4, 50, 500), ("Ring", 2, 50, 500))
    sysc = system(all_reduce=impls("oneRing"))
    aware = aware_model(net, sysc).member_durations("all_reduce", MiB)
    assert min(aware) > CollectiveModel(net, sysc).duration("all_reduce", MiB) == 64440


def test_a_job_on_a_multi_dimensional_aware_network_lists_the_extension():
    for reuse in (True, False):  # its replay alone reused, or live
        result = simulate(same_on_every_npu([all_reduce(1, MiB)], npus=16), TWO_D, TWO_D_SYSTEM, mode="aware",
                          reuse_alone=reuse)
        assert [n.finish_ns for n in result.npus] == [2815 + 4 * 15820 + 2455] * 16
        assert result.notes == [AWARE_MULTI_DIM_NOTE]
    one_d = simulate(same_on_every_npu([all_reduce(1, MiB)]), RING8, BASE, mode="aware")
    assert one_d.notes == []


# ---------------------------------------------------------------- aware jobs: sub-groups, holding, sends


def test_aware_sub_groups_on_links_of_their_own():
    # facts 2.5: 2 groups of 4 on FC 8 with e fixed at 10: 43000; each message has its own link
    tables = job(*[[all_reduce(1, MiB, pg_name="1" if npu < 4 else "2")] for npu in range(8)])
    groups = {1: (0, 1, 2, 3), 2: (4, 5, 6, 7)}
    assert finish_times(tables, net=FC8, sysc=system(endpoint_delay_ns=100), comm_groups=groups, mode="aware") == \
        [43000] * 8


def test_aware_sub_group_with_a_long_way_round():
    # members 0-3 on Ring 8, one chunk of 262144 B (m = 65536): as the unaware case in
    # test_sim.py, but the wrap-around 3 -> 0 (anticlockwise, 3 hops, links no one else uses)
    # costs 3 * hop(m) = 5160: r(1) = 1860 (5300 on member 0), r(2) = 7150/7150/3710/3710,
    # r(3) = 9000/9000/9000/5560, r(4) = 10730, r(5) = 15900/12460/12460/12460,
    # r(6) = 17630/17630/14190/14190; group 4-7 alike on its own links, at the same time
    tables = job(*[[all_reduce(1, MiB // 4, pg_name="1" if npu < 4 else "2")] for npu in range(8)])
    times = finish_times(tables, sysc=system(dataset_splits=1), comm_groups={1: (0, 1, 2, 3), 2: (4, 5, 6, 7)},
                         mode="aware")
    assert times == [17630, 17630, 14190, 14190] * 2


def test_aware_late_member_runs_ahead_into_its_own_link():
    # Ring 2, NPU 1 computes 100 us first (the unaware case is in test_sim.py: 121679, 124620).
    # Here NPU 0, once ahead, sends its next chunk's first message while its previous second
    # message still occupies its only link (O = floor(131072 / 53.69) = 2441). Traced by hand
    # (ticks after 100 us): NPU 1 ends every chunk at k * 6155; NPU 0 ends chunk 1 at 5402,
    # chunk 2 at 11790, then settles, its first message leaving as the link frees: 17945, 24100
    tables = job([all_reduce(1, MiB)], [comp(1, 100), all_reduce(2, MiB, 1)])
    assert finish_times(tables, net=network(("Ring", 2, 50, 500)), mode="aware") == [124100, 124620]


def send(node_id, dst, size, tag=1, *deps):
    return {"id": node_id, "type": "COMM_SEND_NODE", "comm_dst": dst, "comm_size": size, "comm_tag": tag,
            "data_deps": list(deps)}


def recv(node_id, src, size, tag=1, *deps):
    return {"id": node_id, "type": "COMM_RECV_NODE", "comm_src": src, "comm_size": size, "comm_tag": tag,
            "data_deps": list(deps)}


def test_aware_sends_queue_behind_each_other():
    # Ring 4: NPU 1 sends 4 MiB to NPU 2 (link 1 -> 2 busy for 4 MiB / 53.69 = 78125 ns);
    # NPU 0 sends 1 KiB to NPU 2 the short way (a tie: clockwise), 0 -> 1 -> 2: it reaches
    # NPU 1 at hop(1 KiB) = 519, waits for the link until 78125, and arrives at 78125 + 519
    big, small = 4 * MiB, 1024
    tables = job([send(1, 2, small)], [send(1, 2, big, 2)], [recv(1, 0, small), recv(2, 1, big, 2)], [comp(1, 1)])
    net4 = network(("Ring", 4, 50, 500))
    assert finish_times(tables, net=net4, mode="aware")[:3] == [78125 + hop(small), hop(big), 78125 + hop(small)]
    assert finish_times(tables, net=net4)[0] == int(2 * 500 + small / (50 * 2**30 / 1e9))  # unaware: no queueing


def test_aware_collective_waits_for_a_send_on_a_shared_link():
    # Ring 8. NPU 0 sends 4 MiB to NPU 3 (clockwise 0 -> 1 -> 2 -> 3): it holds link 1 -> 2
    # from 78625 to 156750 and arrives at 3 * 78625 = 235875. NPUs 1 and 2 compute 79 us,
    # then all-reduce 131072 B as group (1, 2) (one chunk, m = 65536: hop 1720, O = 1220,
    # p = 120, e = 10). NPU 1's two messages (sent 79010 and 80860) wait for link 1 -> 2:
    # they leave at 156750 and 157970 and arrive at 158470 and 159690; NPU 2's go the other
    # way unhindered. NPU 2: receive 1 at 158470, sends at 158600, receive 2 at 159690, done
    # 159700; NPU 1: receives NPU 2's second message at 158600 + 1720, done 160330
    nodes = [[send(1, 3, 4 * MiB)], [comp(1, 79), all_reduce(2, 131072, 1, pg_name="1")],
             [comp(1, 79), all_reduce(2, 131072, 1, pg_name="1")], [recv(1, 0, 4 * MiB)]] + [[comp(1, 1)]] * 4
    sysc = system(dataset_splits=1)
    times = finish_times(job(*nodes), sysc=sysc, comm_groups={1: (1, 2)}, mode="aware")
    assert times[:4] == [235875, 160330, 159700, 235875]
    unaware = finish_times(job(*nodes), sysc=sysc, comm_groups={1: (1, 2)})
    assert unaware[1] == unaware[2] == 79000 + 10 + 2 * (hop(65536) + 10) + 120


def test_aware_comm_scale_scales_every_link_endpoint_and_reduction_time():
    # e = 5, p = 30, hop = floor(0.5 * 1110.35) = 555: 5 + 14 * 560 + 7 * 30 = 8055 per chunk
    assert finish_times(same_on_every_npu([all_reduce(1, MiB)]), mode="aware", comm_scale=0.5) == [4 * 8055] * 8


def test_aware_all_to_all_of_uneven_sizes_starts_when_its_last_member_issues():
    # its plan needs every member's size: timed at the largest, from the last issue
    tables = job(*[[comp(1, 5 if npu == 2 else 0),
                    {"id": 2, "type": "COMM_COLL_NODE", "comm_type": 6, "comm_size": MiB + 8 * npu, "data_deps": [1]}]
                   for npu in range(8)])
    result = simulate(tables, RING8, BASE, mode="aware")
    alone = aware_model(RING8, BASE).member_durations("all_to_all", MiB + 56)
    assert [n.finish_ns for n in result.npus] == [5000 + t for t in alone]
    assert any("uneven" in note for note in result.notes)


def test_aware_limits_are_clear_errors():
    with pytest.raises(SimulationError, match="not modelled yet"):
        aware_model(RING8, system(all_reduce=impls("direct3"))).member_durations("all_reduce", MiB)


REUSE_JOBS = [  # jobs with only all-NPU collectives: where a collective's replay alone may be reused
    ("HGX, contention inside, 3 all-reduces", network(("Switch", 8, 400, 936.25)),
     system(local_mem_bw_gbps=3350, active_chunks_per_dim=2),
     [all_reduce(1, MiB), comp(2, 3, 1), all_reduce(3, MiB, 2), all_reduce(4, 2 * MiB, 3)]),
    ("doubleBinaryTree: NPUs finish apart, the next starts early", FC8, system(all_reduce=impls("doubleBinaryTree")),
     [all_reduce(1, MiB), all_reduce(2, MiB, 1), comp(3, 1, 2), all_reduce(4, MiB, 3)]),
    ("2-D, all-reduce then all-gather", TWO_D, TWO_D_SYSTEM,
     [all_reduce(1, MiB), {"id": 2, "type": "COMM_COLL_NODE", "comm_type": 2, "comm_size": MiB, "data_deps": [1]}]),
]


@pytest.mark.parametrize("name,net,sysc,nodes", REUSE_JOBS, ids=[j[0] for j in REUSE_JOBS])
def test_reusing_a_collective_replayed_alone_changes_nothing(name, net, sysc, nodes):
    tables = same_on_every_npu(nodes, npus=net.npus)
    if "doubleBinaryTree" in name:  # and a straggler: members join at different ticks
        tables[5] = job([comp(0, 7)] + [dict(n, data_deps=n["data_deps"] or [0]) for n in nodes])[0]
    reused, live = (simulate(tables, net, sysc, mode="aware", reuse_alone=flag) for flag in (True, False))
    assert [n.to_dict() for n in reused.npus] == [n.to_dict() for n in live.npus]
    if "HGX" in name:  # its first all-reduce, reused from its replay alone, is ASTRA-sim's 57426 (facts 5)
        timeline = simulate(tables, net, sysc, mode="aware", record_timeline=True).timeline
        assert {event.end_ns for event in timeline if event.node_id == 1} == {57426}


def test_every_member_runs_a_collectives_chunks_in_the_order_they_were_made():
    # ASTRA-sim gives all chunks of one collective one priority (Sys::generate_collective), so a
    # chunk queues behind every chunk already waiting: each NPU runs c0, c1, c2, c3 through every
    # queue, and members that reach a queue at different ticks still agree on its order. The
    # gradient all-reduce of datasets/gpu-h200/mlp_gloo2 on the default sweep's ring4xswitch4-16
    # (its 2 ranks on 16 NPUs: the odd NPUs issue it 878 us late; issue 49) waited there for ever
    # when each chunk had a priority of its own; now the late members end the collective's
    # duration after they issue it (2,587,185 ns unaware, 4,464,681 aware)
    size, late_us = 268_795_944, 878
    late = [comp(0, late_us), dict(all_reduce(1, size), data_deps=[0])]
    tables = job(*[late if npu % 2 else [all_reduce(1, size)] for npu in range(16)])
    for mode, alone in (("unaware", 2_587_185), ("aware", 4_464_681)):
        model = BACKENDS[mode].collectives(TWO_D, TWO_D_SYSTEM)
        assert model.duration("all_reduce", size) == alone
        offsets = tuple(late_us * 1000 * (npu % 2) for npu in range(16))
        assert model.member_finish("all_reduce", size, None, None, offsets)[1::2] == (late_us * 1000 + alone,) * 8
        assert finish_times(tables, TWO_D, TWO_D_SYSTEM, mode=mode)[1::2] == [late_us * 1000 + alone] * 8
    # ranks that end phases at different times (halvingDoubling folding in the third NPU of each
    # line of 3) ordered dimension 0 differently and waited for one another; now they finish
    sysc = system(all_reduce=impls(*["halvingDoubling"] * 3))
    assert set(CollectiveModel(THREE_D, sysc).member_durations("all_reduce", MiB)) == {60221, 62338, 62348}
    live = finish_times(same_on_every_npu([all_reduce(1, MiB)], npus=24), THREE_D, sysc, mode="aware",
                        reuse_alone=False)
    assert live == list(aware_model(THREE_D, sysc).member_durations("all_reduce", MiB))


# ---------------------------------------------------------------- members issuing apart: holding tables


def drifting_job(npus: int, steps: int, shortest_us: int = 10) -> list:
    """Every rank alternates its own compute times (shortest_us + 0..5 us) and a 1 MiB all-reduce."""
    job = JobBuilder(npus)
    for rank in range(npus):
        graph, previous = job.rank(rank), None
        for step in range(steps):
            compute = graph.compute(f"compute {step}", [previous],
                                    duration_us=shortest_us + (rank * step + 3 * rank + step) % 6)
            previous = graph.collective(f"all-reduce {step}", "ALL_REDUCE", MiB, [compute])
    return job.tables()


DBT = system(all_reduce=impls("doubleBinaryTree"))
DRIFTING = [  # each NPU's finish as the live replay of every collective gave it before holding tables existed
    ("Ring 8", RING8, BASE, 50, 10, [3903130, 3903640, 3904150, 3904660, 3905170, 3905600, 3906110, 3906620]),
    ("Switch 8", SWITCH8, BASE, 50, 10, [6980380, 6982000, 6980660, 6980280, 6981900, 6981520, 6981140, 6982760]),
    ("doubleBinaryTree, FC 8", FC8, DBT, 50, 10,
     [7299038, 7316192, 7310800, 7316192, 7304919, 7316192, 7310800, 7316192]),
    ("Ring 64", network(("Ring", 64, 50, 500)), BASE, 5, 10,
     [1550930, 1551440, 1551950, 1552460, 1552970, 1553480, 1550930, 1551440, 1551950, 1552460, 1552970, 1553480,
      1550930, 1551440, 1551950, 1552460, 1552970, 1553480, 1550930, 1551440, 1551950, 1552460, 1552970,
      1553480, 1550930, 1551440, 1551950, 1552460, 1552970, 1553480, 1551950, 1552460, 1552970, 1553480,
      1552930, 1553440, 1551950, 1552460, 1552970, 1553480, 1552930, 1553440, 1550890, 1551400, 1551910,
      1552420, 1552930, 1553440, 1550890, 1551400, 1551910, 1552420, 1552930, 1553440, 1551950, 1552460,
      1552970, 1553480, 1550930, 1551440, 1551950, 1552460, 1552970, 1553480]),
    ("Ring 8, back to back", RING8, BASE, 50, 0,
     [3403130, 3403640, 3404150, 3404660, 3405170, 3405600, 3406110, 3406620]),
    # links still busy when the next all-reduce is issued: those are replayed from the links' state
    ("Switch 8, back to back", SWITCH8, BASE, 50, 0,
     [6480380, 6482000, 6480660, 6480280, 6481900, 6481520, 6481140, 6482760]),
]


@pytest.mark.parametrize("name,net,sysc,steps,shortest_us,expected", DRIFTING, ids=[c[0] for c in DRIFTING])
def test_ranks_that_drift_apart_finish_as_before_from_holding_tables_and_live(name, net, sysc, steps, shortest_us,
                                                                               expected):
    tables = drifting_job(net.npus, steps, shortest_us)
    for shortcuts in (True, False):  # holding tables where exact, or every collective replayed live
        assert finish_times(tables, net=net, sysc=sysc, mode="aware", reuse_alone=shortcuts) == expected


HOLDING_TABLES = [  # collectives with a holding table whose every link is entered from one place only
    ("ring, Ring 8", RING8, BASE, "all_reduce", None),
    ("ring all-to-all, Switch 8", SWITCH8, BASE, "all_to_all", None),
    ("ring, dimension 0 of Ring 4 x Switch 4", TWO_D, TWO_D_SYSTEM, "reduce_scatter", (True, False)),
    ("ring, dimension 1 of Ring 4 x Switch 4", TWO_D, TWO_D_SYSTEM, "all_gather", (False, True)),
    ("doubleBinaryTree, FC 8", FC8, DBT, "all_reduce", None),
    ("halvingDoubling, FC 8", FC8, system(all_reduce=impls("halvingDoubling")), "all_reduce", None),
]


@pytest.mark.parametrize("name,net,sysc,op,involved", HOLDING_TABLES, ids=[c[0] for c in HOLDING_TABLES])
@pytest.mark.parametrize("model_class", [CollectiveModel, aware_model])
def test_holding_tables_give_each_finish_and_link_of_members_issuing_apart(name, net, sysc, op, involved,
                                                                           model_class):
    model = model_class(net, sysc)
    table, plan = model.holding(op, MiB, involved, None), model.plan(op, MiB, involved)
    assert translatable(plan) == ("ring" in name)  # one replay then gives every member's column
    for seed in range(3):
        offsets = tuple((seed * 7919 + k * 104729) % (30_000 if seed < 2 else 5) for k in range(net.npus))
        finishes, link_free = model.replay_alone(plan, offsets)
        assert table.finishes(offsets) == finishes
        assert table.frees(offsets) == link_free  # aware: the tick each link is free from; unaware: no links


def test_a_member_that_never_issues_a_collective_left_to_its_table_is_reported_as_live():
    tables = same_on_every_npu([all_reduce(1, MiB)], npus=4)
    tables[3] = job([comp(1, 5)])[0]
    reports = []
    for shortcuts in (True, False):
        with pytest.raises(SimulationDeadlock) as info:
            simulate(tables, load_network(CONFIGS / "Ring_4npus.yml"), BASE, mode="aware", reuse_alone=shortcuts)
        reports.append(info.value.report)
    assert reports[0] == reports[1]
    assert reports[0][0][0] == ("all_reduce (collective #0 of group all) runs chunk 0's all_reduce on dimension 0 "
                                "while chunk 1's all_reduce on dimension 0 waits behind it")


# ---------------------------------------------------------------- holding tables on shared links


def aware_run(tables, net, sysc, groups=None, shortcuts=True):
    """(result, engine) of an aware run; engine.attempts: how many runs of the job it took."""
    engine = Engine([GraphFeeder(t) for t in tables], net, sysc, comm_groups=groups, mode="aware",
                    reuse_alone=shortcuts)
    return engine.run(), engine


SUB_GROUP_TABLES = [  # a sub-group's table, from another group's (moved along the torus) or one member's replay
    ("Switch 8, moved from (0, 1, 2, 3), rotated", SWITCH8, BASE, (4, 5, 6, 7)),
    ("Switch 8, strided, rotated", SWITCH8, BASE, (1, 3, 5, 7)),
    ("Switch 8, out of order, moved and rotated", SWITCH8, BASE, (6, 1, 3)),
    ("Ring 8, evenly spaced, rotated", RING8, BASE, (1, 3, 5, 7)),
    ("Ring 8, unevenly spaced: a replay per member", RING8, BASE, (2, 3, 4, 5)),
    ("Ring 4 x Switch 4, dimension 0, rotated", TWO_D, TWO_D_SYSTEM, (4, 5, 6, 7)),
    ("Ring 4 x Switch 4, dimension 1, rotated", TWO_D, TWO_D_SYSTEM, (1, 5, 9, 13)),
]


@pytest.mark.parametrize("name,net,sysc,group", SUB_GROUP_TABLES, ids=[c[0] for c in SUB_GROUP_TABLES])
@pytest.mark.parametrize("op", ["all_reduce", "reduce_scatter", "all_gather"])
def test_sub_group_holding_tables_give_what_their_replays_give(name, net, sysc, group, op):
    model = aware_model(net, sysc)
    table, plan = model.holding(op, MiB, None, group), model.plan(op, MiB, None, group)
    assert (group_rotation(net, plan) is None) == ("per member" in name)
    for seed in range(3):
        offsets = tuple((seed * 7919 + k * 104729) % (40_000 if seed < 2 else 5) for k in range(len(group)))
        events = EventQueue()
        fabric = model.replay_network(events, record=True)
        finishes = replay_alone(Replay(model.system, model.ranks, events, fabric, model.timer.p), plan, group, offsets)
        # each member's finish, each link's free tick and the tick its first message entered it
        ends, frees, enters = table.evaluate(offsets)
        assert (ends, dict(zip(table.links, frees)), dict(zip(table.links, enters))) == (
            list(finishes), fabric.free, fabric.entered)
        unaware = CollectiveModel(net, sysc)
        assert unaware.holding(op, MiB, None, group).finishes(offsets) == unaware.replayed(op, MiB, None, group, offsets)


def pipeline_job(npus: int, width: int, seed: int, steps: int = 10, longest_us: int = 15,
                 sizes: tuple[int, ...] = (65536, MiB, 3 * MiB)) -> tuple[list, dict]:
    """The same steps on every rank, each after its own compute of 0..longest_us us (ranks drift
    apart): a collective of its group of `width` consecutive NPUs (tensor parallel), of its
    group of every width-th NPU (data parallel), or a send to the next or previous group
    (pipeline stages) whose receive is posted from the start. Returns (tables, groups)."""
    draw = random.Random(seed)
    groups = {1 + b // width: tuple(range(b, b + width)) for b in range(0, npus, width)}
    groups.update({100 + r: tuple(range(r, npus, width)) for r in range(width)})
    steps = [(draw.choice(["tp", "tp", "dp", "send"]), draw.choice([0, 2, 7]), draw.choice(sizes),
              draw.choice([width, -width])) for _ in range(steps)]
    ranks = []
    for npu in range(npus):
        own, nodes, previous = random.Random(seed * 1000 + npu), [], None
        for step, (kind, comm_type, size, peer) in enumerate(steps):
            nodes.append(comp(len(nodes), own.randint(0, longest_us), *([previous] if previous is not None else [])))
            previous = len(nodes) - 1
            if kind == "send":
                nodes.append(send(len(nodes), (npu + peer) % npus, size, step, previous))
                nodes.append(recv(len(nodes), (npu - peer) % npus, size, step))
                previous = len(nodes) - 2
            else:
                group = 1 + npu // width if kind == "tp" else 100 + npu % width
                nodes.append({"id": len(nodes), "type": "COMM_COLL_NODE", "comm_type": comm_type, "comm_size": size,
                              "pg_name": str(group), "data_deps": [previous]})
                previous = len(nodes) - 1
        ranks.append(nodes)
    return job(*ranks), groups


SHARED_LINK_JOBS = [  # links entered from several places: switch down links, a ring's links on longer routes
    ("Switch 8, groups of 4", SWITCH8, BASE, 4),
    ("Switch 16, groups of 4", network(("Switch", 16, 50, 500)), BASE, 4),
    ("Ring 4 x Switch 4, groups of 4: sends cross the switch", TWO_D, TWO_D_SYSTEM, 4),
    ("Ring 4 x Switch 4, groups of 8", TWO_D, TWO_D_SYSTEM, 8),
    ("Ring 8, groups of 2", RING8, BASE, 2),
    ("Switch 8, latency 936.25", network(("Switch", 8, 400, 936.25)), BASE, 4),
    ("Switch 8, latency 936.25, messages of 323 B and less: one may overtake another", network(
        ("Switch", 8, 400, 936.25)), BASE, 4),
]


@pytest.mark.parametrize("name,net,sysc,width", SHARED_LINK_JOBS, ids=[c[0] for c in SHARED_LINK_JOBS])
def test_jobs_whose_traffic_shares_links_finish_as_live_with_holding_tables(name, net, sysc, width):
    # 323 B take 0.752 ns at 400 GB/s: a hop of floor(936.25 + 0.752) = 937 ns, on the link for
    # 0 ns; 8 B take 936: sent just after, they arrive first, so a link's order is not its
    # place's order there (aware.WatchedFabric.overtaking)
    sizes = (8, 323, 2048) if "overtake" in name else (65536, MiB, 3 * MiB)
    assert WatchedFabric(net, EventQueue()).may_overtake({0: set(sizes)}) == ("overtake" in name)
    for seed in range(4):
        for longest_us in (15, 0):  # drifting ranks, or back to back
            tables, groups = pipeline_job(net.npus, width, seed, longest_us=longest_us, sizes=sizes)
            fast, _ = aware_run(tables, net, sysc, groups)
            live, _ = aware_run(tables, net, sysc, groups, shortcuts=False)
            assert [n.to_dict() for n in fast.npus] == [n.to_dict() for n in live.npus], (seed, longest_us)


def test_a_send_into_a_collective_timed_from_its_table_runs_the_job_again_with_it_live():
    # Switch 8: group (4, 5, 6, 7) runs two 1 MiB all-reduces from 1 us, 1,000 .. 85,280 and
    # .. 169,560 alone (one table serves both). NPU 0 sends 4 MiB to NPU 5 at once: it enters
    # NPU 5's down link at 78,626, inside the first all-reduce's reservation, and holds it
    # 78,125 ns. The first run, from tables, sees it enter: the job runs again, that all-reduce
    # live, as ASTRA-sim's links run it. Sent at 200 us, after both, it meets nothing: one run
    pair = [comp(1, 1), all_reduce(2, MiB, 1, pg_name="2"), all_reduce(3, MiB, 2, pg_name="2")]
    groups = {1: (0, 1, 2, 3), 2: (4, 5, 6, 7)}
    for sent_at, expected, attempts in [
            (0, [157251, 1000, 1000, 1000, 241751, 243981, 246211, 239521], 2),
            (200, [357250, 1000, 1000, 1000, 169560, 357250, 169560, 169560], 1)]:
        nodes = [[comp(0, sent_at), send(1, 5, 4 * MiB, 1, 0)]] + [[comp(1, 1)]] * 3 + [pair] * 4
        nodes[5] = pair + [recv(4, 0, 4 * MiB)]
        for shortcuts in (True, False):
            result, engine = aware_run(job(*nodes), SWITCH8, BASE, groups, shortcuts)
            assert [n.finish_ns for n in result.npus] == expected
            assert engine.attempts == (attempts if shortcuts else 1)


def test_two_messages_entering_a_shared_link_in_one_tick_run_the_job_again_live():
    # NPUs 0 and 1 each send 64 KiB to NPU 2 at tick 0: both reach its down link at 1,720, and
    # which goes first is the order of that tick's events, which holding tables (used here for
    # group (4, 5, 6, 7)) may change: the job runs again with every collective live
    pair = [comp(1, 1), all_reduce(2, MiB, 1, pg_name="2"), all_reduce(3, MiB, 2, pg_name="2")]
    nodes = [[send(1, 2, 65536)], [send(1, 2, 65536, 2)], [recv(1, 0, 65536), recv(2, 1, 65536, 2)], [comp(1, 1)]]
    result, engine = aware_run(job(*nodes, *[pair] * 4), SWITCH8, BASE, {1: (0, 1, 2, 3), 2: (4, 5, 6, 7)})
    assert [n.finish_ns for n in result.npus] == [3440, 4660, 4660, 1000] + [169560] * 4
    assert engine.attempts == 2
