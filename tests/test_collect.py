"""chakra_core.convert.pytorch.collect.TraceRecorder on a real 2-process gloo run (torch, CPU)."""

from __future__ import annotations

import json
import os
import socket
import statistics

import pytest

import torch


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, world: int, out: str, port: int) -> None:
    import torch.distributed as dist

    from chakra_core.convert.pytorch.collect import TraceRecorder

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), GLOO_SOCKET_IFNAME="lo")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    pair = dist.new_group([0, 1])
    with TraceRecorder(out, warmup=1, active=1, timed_steps=2) as recorder:
        for _ in range(5):  # the third and fourth are timed with the profiler off, the fifth is not
            t = torch.ones(8) * rank
            dist.all_reduce(t, group=pair)
            if rank == 0:
                dist.send(torch.ones(4), dst=1, tag=5)
            else:
                dist.recv(torch.zeros(4), src=0, tag=5)
            recorder.step()
    dist.destroy_process_group()


def _record_ddp(out, warmup: int | None) -> None:
    """Five DDP steps of a small MLP in this process (one rank, gloo, as the H200 DDP runs were
    recorded on one GPU), recorded with the recorder's default warm-up (None) or `warmup`."""
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{_free_port()}", rank=0, world_size=1)
    try:
        _train_ddp(out, warmup)  # its model is freed on return, while its process group still runs
    finally:
        dist.destroy_process_group()


def _train_ddp(out, warmup: int | None) -> None:
    from torch.nn.parallel import DistributedDataParallel

    from chakra_core.convert.pytorch.collect import TraceRecorder

    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                                        torch.nn.Linear(32, 4)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    with TraceRecorder(out, active=2, **({} if warmup is None else {"warmup": warmup})) as recorder:
        for _ in range(5):
            optimizer.zero_grad()
            model(torch.randn(8, 16)).sum().backward()
            optimizer.step()
            recorder.step()


def test_the_recorders_default_warmup_keeps_ddps_bucket_rebuild_out_of_the_recorded_steps(tmp_path):
    """DDP rebuilds its buckets in its second iteration: recorded from it (warmup=1), the first
    recorded step holds operators the second does not; with the default warm-up the steps repeat."""
    from chakra_core.analysis.facade import JobAnalysis
    from chakra_core.convert.pytorch.job import convert_job

    one_time = {}
    for label, warmup in (("one", 1), ("default", None)):
        _record_ddp(tmp_path / label, warmup)
        convert_job(str(tmp_path / label), str(tmp_path / f"{label}-out"), "t")
        steps = JobAnalysis.from_files(str(tmp_path / f"{label}-out" / "t"), prediction_file=None).recorded_steps()
        one_time[label] = [{x["name"] for x in row} for row in steps.column("one_time").to_pylist()]
    # the first recorded step: the new buckets' views and the gradients copied into them
    assert one_time["one"][0] >= {"aten::as_strided", "aten::copy_"} and one_time["one"][1] == set()
    assert one_time["default"] == [set(), set()]


@pytest.mark.slow
def test_recorder_writes_matching_et_and_kineto_with_group_annotations(tmp_path):
    import torch.multiprocessing as mp

    from chakra_core.convert.pytorch.job import convert_job

    mp.spawn(_worker, args=(2, str(tmp_path), _free_port()), nprocs=2)
    for rank in (0, 1):
        et = json.loads((tmp_path / f"rank{rank}.et.json").read_text())
        names = [n["name"] for n in et["nodes"]]
        assert et["schema"].startswith("1.1.1") and "## process_group:init ##" in names
        assert "chakra::pg=1" in names and any(n.startswith("ProfilerStep#") for n in names)
        assert (tmp_path / f"rank{rank}.kineto.json").exists()
    result = convert_job(str(tmp_path), str(tmp_path / "out"), "t")
    assert result.mismatches == []
    report = result.reports[0]
    assert report["counts"]["communication: all_reduce"] == 1 and report["counts"]["communication: send"] == 1
    assert any("from annotation" in note for note in report["notes"])
    # the unprofiled steps: per rank, then the slowest rank's per step in the job's report
    timed = [json.loads((tmp_path / f"rank{rank}.timing.json").read_text())["steps_ns"] for rank in (0, 1)]
    assert [len(t) for t in timed] == [2, 2] and all(ns > 0 for t in timed for ns in t)
    assert result.unprofiled_step_ns == [max(a, b) for a, b in zip(*timed)]
    assert json.loads((tmp_path / "out" / "t.report.json").read_text())["unprofiled_step_ns"] == result.unprofiled_step_ns
    from chakra_core.format.etfile import read_table
    from chakra_core.replay.calibrate import compute_scale
    from chakra_core.replay.plan import recorded_ns

    span = max(recorded_ns(read_table(url)) for url in result.et_files)  # one recorded step
    assert compute_scale(str(tmp_path / "out" / "t")) == pytest.approx(statistics.median(result.unprofiled_step_ns) / span)


def test_collect_on_gpus_says_in_one_line_when_the_machine_has_none(capsys):
    """tools/collect.py --device cuda records on GPUs (docs/gpu.md); where there is no CUDA device
    (CI, this machine) it says so and exits 2 instead of failing inside a worker."""
    from tools import collect

    if torch.cuda.is_available():  # a GPU machine runs the real recording in the GPU benchmark instead
        with pytest.raises(SystemExit) as exit_:
            collect.main(["--device", "cuda", "--scenario", "dlrm", "--world-sizes", "1"])
        assert "only mlp_ddp, transformer_ddp run on GPUs" in capsys.readouterr().err
    else:
        with pytest.raises(SystemExit) as exit_:
            collect.main(["--device", "cuda", "--scenario", "mlp_ddp", "--world-sizes", "1"])
        assert "no CUDA device" in capsys.readouterr().err
    assert exit_.value.code == 2


def _broadcasts_by_step(run_dir) -> dict[str, int]:
    """ProfilerStep#N -> the c10d::broadcast_ operators recorded inside it (rank 0's ET)."""
    import gzip

    nodes = json.loads(gzip.open(run_dir / "rank0.et.json.gz").read())["nodes"]
    by_id = {n["id"]: n for n in nodes}
    counts: dict[str, int] = {}
    for node in nodes:
        if node["name"] == "c10d::broadcast_":
            step = node
            while step is not None and not step["name"].startswith("ProfilerStep#"):
                step = by_id.get(step.get("ctrl_deps"))
            key = step["name"] if step else "outside"
            counts[key] = counts.get(key, 0) + 1
    return counts


@pytest.mark.slow
def test_collect_settle_steps_keep_ddps_bucket_rebuild_out_of_the_recorded_steps(tmp_path):
    """DDP rebuilds its gradient buckets in its second iteration (a broadcast of the bucket order
    among the ranks): without settle steps that is the first recorded step, which the timed
    steps never repeat; with --settle-steps 1 it falls before the recording (docs/gpu.md, 'Errors
    per run'). The settle steps are not logged: the program log holds the recorded steps only."""
    from tools import collect

    plain = collect.run("mlp_ddp", 2, tmp_path / "plain")
    settled = collect.run("mlp_ddp", 2, tmp_path / "settled", settle_steps=1)
    assert _broadcasts_by_step(plain).get("ProfilerStep#1", 0) > 0
    assert _broadcasts_by_step(settled) == {}
    assert json.loads((settled / "job.json").read_text())["settle_steps_before_recording"] == 1
    logged = json.loads((settled / "rank0.program.json").read_text())
    assert logged == json.loads((plain / "rank0.program.json").read_text())  # same calls, same steps
    assert {entry["step"] for entry in logged} == {1, 2}
