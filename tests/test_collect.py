"""chakra_core.convert.collect.TraceRecorder on a real 2-process gloo run (torch, CPU)."""

from __future__ import annotations

import json
import os
import socket

import pytest

torch = pytest.importorskip("torch")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, world: int, out: str, port: int) -> None:
    import torch.distributed as dist

    from chakra_core.convert.collect import TraceRecorder

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), GLOO_SOCKET_IFNAME="lo")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    pair = dist.new_group([0, 1])
    with TraceRecorder(out, warmup=1, active=1) as recorder:
        for _ in range(3):
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

    from chakra_core.convert.job import convert_job

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
