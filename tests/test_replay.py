"""`chakra replay` on real torch.distributed (gloo processes on this CPU)."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from datapaths import GLOO

from chakra_core.format.job import read_comm_groups
from chakra_core.generate.builder import JobBuilder
from chakra_core.replay.launch import replay_job
from chakra_core.replay.plan import ReplayError, plan_rank, recorded_ns, with_all_to_all_sizes

import torch.distributed  # noqa: F401  (needed: a missing dependency fails, not skips)


def _converted(tmp_path_factory, run: str, prefix: str) -> str:
    from chakra_core.convert.pytorch.job import convert_job

    out = tmp_path_factory.mktemp(prefix)
    convert_job(str(GLOO / run), str(out), prefix)
    return str(out / prefix)


@pytest.fixture(scope="module")
def mlp(tmp_path_factory) -> str:
    return _converted(tmp_path_factory, "mlp_ddp-w2", "mlp")


def test_a_recorded_gloo_job_replays_near_its_recorded_time(tmp_path_factory):
    """transformer_ddp-w2: its recording is steady (mlp_ddp-w2's all-reduces stalled while it
    was recorded, tests/test_prediction.py, and no replay repeats a stall)."""
    from chakra_core.format.etfile import read_table

    prefix = _converted(tmp_path_factory, "transformer_ddp-w2", "tf")
    result = replay_job(prefix, iterations=2, warmup=1, timeout_s=30)
    spans = [recorded_ns(read_table(f"{prefix}.{rank}.et")) for rank in (0, 1)]
    assert result["ranks"] == 2 and len(result["iterations_ns"]) == 2 and result["recorded_ns"] == max(spans)
    assert sorted({(n["rank"], n["kind"]) for n in result["nodes"]}) == [
        (0, "all_reduce"), (0, "broadcast"), (1, "all_reduce"), (1, "broadcast")]
    # compute is replayed for its recorded time and communication overlaps it as recorded (-9%
    # here); a loaded 2-core machine stays within twice the recording
    assert 0.7 * result["recorded_ns"] < result["median_ns"] < 2 * result["recorded_ns"], result


def _pipeline_job(tmp_path) -> tuple[str, dict]:
    """4 ranks: pairs {0,1} and {2,3} reduce, then 0 -> 2 and 1 -> 3 send, all with compute."""
    job = JobBuilder(4, flops_per_s=1e12)
    pairs = [job.group([0, 1]), job.group([2, 3])]
    for rank in range(4):
        g = job.rank(rank)
        x = g.compute("fwd", num_ops=2e9, tensor_size=1 << 20)
        ar = g.collective("grads", "ALL_REDUCE", 1 << 16, [x], pg_name=pairs[rank // 2])
        if rank < 2:
            g.send("act", rank + 2, 1 << 12, 7, [ar])
        else:
            g.recv("act", rank - 2, 1 << 12, 7, [ar])
    job.write(str(tmp_path), "pipe")
    return str(tmp_path / "pipe"), read_comm_groups(str(tmp_path / "pipe.comm_groups.json"))


def test_sub_groups_and_sends_replay_with_compute_skipped(tmp_path):
    prefix, groups = _pipeline_job(tmp_path)
    result = replay_job(prefix, groups, iterations=1, warmup=0, compute="none", timeout_s=30)
    kinds = sorted((n["rank"], n["kind"], n["group"]) for n in result["nodes"])
    assert kinds == [(0, "all_reduce", "1"), (0, "send", "0"), (1, "all_reduce", "1"), (1, "send", "0"),
                     (2, "all_reduce", "2"), (2, "recv", "0"), (3, "all_reduce", "2"), (3, "recv", "0")]
    beside = replay_job(prefix, iterations=1, warmup=0, compute="none", timeout_s=30)  # pipe.comm_groups.json
    assert sorted((n["rank"], n["kind"], n["group"]) for n in beside["nodes"]) == kinds
    with pytest.raises(ReplayError, match=r"pipe\.0\.et: node \d+: process group 1 is not in the communicator groups"):
        replay_job(prefix, {}, iterations=1)


def test_a_missing_peer_fails_with_the_waiting_rank_and_node_never_hangs(tmp_path):
    job = JobBuilder(2)
    for rank in range(2):
        g = job.rank(rank)
        first = g.collective("first", "ALL_REDUCE", 1024, [])
        if rank == 0:  # rank 1 never issues the second all-reduce
            g.collective("second", "ALL_REDUCE", 1024, [first])
    job.write(str(tmp_path), "lonely")
    started = time.monotonic()
    with pytest.raises(ReplayError, match=r"rank 0 failed at node 1 \(all_reduce 'second'\)"):
        replay_job(str(tmp_path / "lonely"), iterations=1, warmup=0, timeout_s=3)
    assert time.monotonic() - started < 60


def test_an_uneven_all_to_all_replays_with_each_members_bytes(tmp_path):
    """Members of an all_to_all may send different totals (uneven splits): each sends its own in
    equal shares and receives the others' (an equal split of each rank's own total crashed gloo)."""
    job = JobBuilder(2)
    for rank, nbytes in enumerate((1 << 10, 3 << 12)):
        job.rank(rank).collective("exchange", "ALL_TO_ALL", nbytes, [])
    job.write(str(tmp_path), "uneven")
    prefix = str(tmp_path / "uneven")
    from chakra_core.format.etfile import read_table

    plans = [plan_rank(read_table(f"{prefix}.{rank}.et"), "t") for rank in range(2)]
    assert [s.sizes for s in with_all_to_all_sizes(plans, {})[1]] == [(1 << 10, 3 << 12)]
    result = replay_job(prefix, iterations=1, warmup=0, compute="none", timeout_s=30)
    assert sorted((n["rank"], n["kind"], n["bytes"]) for n in result["nodes"]) == [
        (0, "all_to_all", 1 << 10), (1, "all_to_all", 3 << 12)]


def test_steps_follow_dependencies_then_ascending_ids(tmp_path):
    import pyarrow as pa

    from chakra_core import normalize_table

    table = normalize_table(pa.table({"id": pa.array([5, 3, 9, 1], pa.uint64()), "type": pa.array([4] * 4, pa.int32()),
                                      "duration_micros": pa.array([1] * 4, pa.uint64()),
                                      "data_deps": pa.array([[], [9], [], []], pa.list_(pa.uint64()))}))
    assert [s.node_id for s in plan_rank(table, "t")] == [1, 5, 9, 3]


def test_communication_waits_only_where_a_node_depends_on_it(tmp_path):
    job = JobBuilder(1)
    g = job.rank(0)
    grads = g.collective("grads", "ALL_REDUCE", 1 << 20, [])
    backward = g.compute("backward", [], duration_us=10)  # beside the all-reduce
    after = g.memory("after", [grads], tensor_size=4)  # skipped by a replay: hands its wait on
    g.compute("step", [after, backward], duration_us=10)
    job.write(str(tmp_path), "overlap")
    from chakra_core.format.etfile import read_table

    plan = plan_rank(read_table(str(tmp_path / "overlap.0.et")), "t")
    assert [(s.name, s.waits) for s in plan] == [("grads", ()), ("backward", ()), ("step", (0,))]
    scaled = plan_rank(read_table(str(tmp_path / "overlap.0.et")), "t", compute_scale=0.5)
    assert [s.size for s in scaled] == [1 << 20, 5_000, 5_000]  # --compute-scale: compute only


def _overlap_job(folder, compute_us: int, size: int = 64 << 20) -> str:
    job = JobBuilder(2)
    for rank in range(2):
        g = job.rank(rank)
        grads = g.collective("grads", "ALL_REDUCE", size, [])
        backward = g.compute("backward", [], duration_us=compute_us)
        g.compute("step", [grads, backward], duration_us=1)
    job.write(str(folder), "overlap")
    return str(folder / "overlap")


def test_compute_beside_communication_overlaps_it(tmp_path):
    """A collective and the compute that does not depend on it run at once, as DDP's bucket
    all-reduces run during backward: the iteration takes about the longer of the two, not both."""
    communication = replay_job(_overlap_job(tmp_path, 1), iterations=3, warmup=1, compute="none",
                               timeout_s=60)["median_ns"]
    compute_ns = max(communication, 50_000_000)  # as long as the all-reduce: serial would take both
    both = replay_job(_overlap_job(tmp_path, compute_ns // 1000), iterations=3, warmup=1, timeout_s=60)["median_ns"]
    assert both < 0.8 * (compute_ns + communication), (both, communication)


def test_the_command_prints_iterations_and_the_recorded_time(mlp):
    run = subprocess.run([sys.executable, "-m", "chakra_core.cli", "replay", mlp, "--iterations", "1", "--warmup",
                          "0", "--timeout", "30"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "2 ranks, iterations (ms): " in run.stdout and "the trace recorded" in run.stdout
