"""What a recorded run issued (tools/collect.py): the recording schedule (the steps the profiler
records) and ProgramLog, the ground truth of every collective and point-to-point call the
program issues in them (rank<R>.program.json), with the DDP communication hook that logs the
gradient all_reduces through it.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.distributed as dist

WARMUP = 1
ACTIVE = 2
STEPS = WARMUP + ACTIVE + 1  # one more step after the recorded window
# The profiler schedule is wait=0, warmup=WARMUP, active=ACTIVE and `rec.step()` ends each
# step, so the steps with these 0-based indices are the recorded ones (ProfilerStep#N, N=index).
RECORDED_STEPS = range(WARMUP, WARMUP + ACTIVE)


# --------------------------------------------------------------------------------------------
# Ground truth: what the program issued
# --------------------------------------------------------------------------------------------

def _nbytes(tensors) -> int:
    if tensors is None:
        return 0
    if isinstance(tensors, torch.Tensor):
        return tensors.numel() * tensors.element_size()
    return sum(t.numel() * t.element_size() for t in tensors)


def _dtype_name(tensor) -> str | None:
    if tensor is None:
        return None
    if not isinstance(tensor, torch.Tensor):
        tensor = tensor[0]
    return str(tensor.dtype).removeprefix("torch.")


class ProgramLog:
    """Logs every collective / p2p call the program issues during the recorded steps.

    The helper methods log and then call `dist.<name>` by attribute, so the recorder's
    annotation applies. `bytes` is defined per op (see datasets/pytorch-gloo/README.md): the bytes of the tensor(s)
    this rank passes as the op's input, except for `recv`/`irecv` and `scatter`, where it is the
    tensor that receives, and `barrier` (0).
    """

    def __init__(self, rank: int, world: int):
        self.rank = rank
        self.world = world
        self.step = -1
        self.entries: list[dict] = []

    @property
    def active(self) -> bool:
        return self.step in RECORDED_STEPS

    def begin_step(self, step: int) -> None:
        self.step = step

    def log(self, op: str, group, *, nbytes: int, dtype: str | None, peer: int | None = None,
            tag: int | None = None, **extra) -> None:
        if not self.active:
            return
        group = group if group is not None else dist.group.WORLD
        entry = {
            "op": op,
            "bytes": nbytes,
            "dtype": dtype,
            "group_ranks": dist.get_process_group_ranks(group),
            "pg_name": dist.distributed_c10d._get_process_group_name(group),
            "peer": peer,
            "tag": tag,
            "step": self.step,
        }
        entry.update(extra)
        self.entries.append(entry)

    def write(self, path: Path) -> None:
        # one entry per line: small, and diffs/greps stay readable
        body = ",\n".join(json.dumps(e) for e in self.entries)
        path.write_text(f"[\n{body}\n]\n" if body else "[]\n")

    # -- collectives -----------------------------------------------------------------------
    def all_reduce(self, t, group=None, async_op=False, via=None):
        self.log("all_reduce", group, nbytes=_nbytes(t), dtype=_dtype_name(t), numel=t.numel(),
                 **({"via": via} if via else {}))
        return dist.all_reduce(t, group=group, async_op=async_op)

    def broadcast(self, t, src, group=None, via=None):
        self.log("broadcast", group, nbytes=_nbytes(t), dtype=_dtype_name(t), numel=t.numel(),
                 root=src, **({"via": via} if via else {}))
        return dist.broadcast(t, src=src, group=group)

    def reduce(self, t, dst, group=None):
        self.log("reduce", group, nbytes=_nbytes(t), dtype=_dtype_name(t), numel=t.numel(), root=dst)
        return dist.reduce(t, dst=dst, group=group)

    def all_gather(self, outs, t, group=None):
        self.log("all_gather", group, nbytes=_nbytes(t), dtype=_dtype_name(t), numel=t.numel(),
                 out_bytes=_nbytes(outs))
        return dist.all_gather(outs, t, group=group)

    def all_gather_into_tensor(self, out, t, group=None):
        self.log("all_gather_into_tensor", group, nbytes=_nbytes(t), dtype=_dtype_name(t),
                 numel=t.numel(), out_bytes=_nbytes(out))
        return dist.all_gather_into_tensor(out, t, group=group)

    def reduce_scatter(self, out, ins, group=None):
        self.log("reduce_scatter", group, nbytes=_nbytes(ins), dtype=_dtype_name(out),
                 numel=sum(t.numel() for t in ins), out_bytes=_nbytes(out))
        return dist.reduce_scatter(out, ins, group=group)

    def reduce_scatter_tensor(self, out, t, group=None):
        self.log("reduce_scatter_tensor", group, nbytes=_nbytes(t), dtype=_dtype_name(t),
                 numel=t.numel(), out_bytes=_nbytes(out))
        return dist.reduce_scatter_tensor(out, t, group=group)

    def all_to_all_single(self, out, t, out_splits=None, in_splits=None, group=None, via=None):
        self.log("all_to_all_single", group, nbytes=_nbytes(t), dtype=_dtype_name(t),
                 numel=t.numel(), out_bytes=_nbytes(out), in_splits=in_splits,
                 out_splits=out_splits, **({"via": via} if via else {}))
        return dist.all_to_all_single(out, t, output_split_sizes=out_splits,
                                      input_split_sizes=in_splits, group=group)

    def all_to_all(self, outs, ins, group=None):
        self.log("all_to_all", group, nbytes=_nbytes(ins), dtype=_dtype_name(ins),
                 numel=sum(t.numel() for t in ins), out_bytes=_nbytes(outs),
                 in_numels=[t.numel() for t in ins], out_numels=[t.numel() for t in outs])
        return dist.all_to_all(outs, ins, group=group)

    def gather(self, t, gather_list, dst, group=None):
        self.log("gather", group, nbytes=_nbytes(t), dtype=_dtype_name(t), numel=t.numel(),
                 root=dst, out_bytes=_nbytes(gather_list) if gather_list is not None else None)
        return dist.gather(t, gather_list, dst=dst, group=group)

    def scatter(self, out, scatter_list, src, group=None):
        self.log("scatter", group, nbytes=_nbytes(out), dtype=_dtype_name(out), numel=out.numel(),
                 root=src, in_bytes=_nbytes(scatter_list) if scatter_list is not None else None)
        return dist.scatter(out, scatter_list, src=src, group=group)

    def barrier(self, group=None):
        self.log("barrier", group, nbytes=0, dtype=None, numel=0)
        return dist.barrier(group=group)

    # -- point to point (peer = GLOBAL rank) -------------------------------------------------
    def send(self, t, dst, group=None, tag=0):
        return self._point_to_point("send", dist.send, t, dst, group, tag)

    def recv(self, t, src, group=None, tag=0):
        return self._point_to_point("recv", dist.recv, t, src, group, tag)

    def isend(self, t, dst, group=None, tag=0):
        return self._point_to_point("isend", dist.isend, t, dst, group, tag)

    def irecv(self, t, src, group=None, tag=0):
        return self._point_to_point("irecv", dist.irecv, t, src, group, tag)

    def _point_to_point(self, kind: str, call, t, peer: int, group, tag: int):
        self.log(kind, group, nbytes=_nbytes(t), dtype=_dtype_name(t), numel=t.numel(), peer=peer, tag=tag)
        return call(t, peer, group=group, tag=tag)

    def batch_isend_irecv(self, ops: list[tuple[str, torch.Tensor, int]], group=None, tag=0):
        """ops: [("isend"|"irecv", tensor, global peer)]; one entry per op, in list order."""
        p2p = []
        for kind, t, peer in ops:
            self.log(kind, group, nbytes=_nbytes(t), dtype=_dtype_name(t), numel=t.numel(),
                     peer=peer, tag=tag, via="batch_isend_irecv")
            fn = dist.isend if kind == "isend" else dist.irecv
            p2p.append(dist.P2POp(fn, t, peer, group=group, tag=tag))
        return dist.batch_isend_irecv(p2p)


def ddp_allreduce_hook(state, bucket):
    """DDP communication hook: all_reduce the bucket through the Python API and log it."""
    log, group, world = state
    buf = bucket.buffer()
    fut = log.all_reduce(buf, group=group, async_op=True,
                         via=f"ddp_comm_hook:bucket{bucket.index()}").get_future()
    return fut.then(lambda f: f.value()[0].div_(world))
