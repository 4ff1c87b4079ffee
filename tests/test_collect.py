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
