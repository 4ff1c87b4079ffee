"""Record a PyTorch execution trace and its Kineto trace for the same training steps.

Usage, inside each rank's process (after torch.distributed is initialised, so that the
execution trace carries the `## process_group:init ##` node)::

    from chakra_core.convert.pytorch.collect import TraceRecorder

    with TraceRecorder("traces/job1") as recorder:
        for batch in loader:
            train_step(batch)
            recorder.step()

Each rank writes `rank<R>.et.json` (the ExecutionTraceObserver output) and
`rank<R>.kineto.json` (the Chrome trace) into the folder, gzipped with a `.gz` suffix when
`compress=True`. Both cover exactly the same
`active` steps, which appear as `ProfilerStep#N` nodes in both files, so
`chakra convert` can link them. With `timed_steps=K`, the K steps after the recorded ones are
timed with the profiler off (from one `step()` call to the next) and written to
`rank<R>.timing.json` (`{"steps_ns": [...]}`): what a step costs without the profiler, which
`chakra convert` carries into the job's report and `chakra calibrate` turns into the compute
scale (the profiler's cost lies in every recorded operator's duration). PyTorch is an optional dependency (`pip install .[torch]`);
importing this module without it is fine, constructing a recorder is not.

Why the process-group annotation: with gloo, PyTorch records the process group of a
`c10d::*` op only as "<Object>", so a trace alone cannot say which group a collective used.
While recording, the recorder wraps the `torch.distributed` collective and point-to-point
functions so that each call runs inside a `record_function` named
`chakra::pg=<pg_name>`; the converter reads the group from that enclosing node.
Collectives issued from C++ (DDP's reducer) bypass the wrapper; the converter infers their
group (see chakra_core.convert.pytorch.groups).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import os
import time
from pathlib import Path

PG_ANNOTATION_PREFIX = "chakra::pg="

# torch.distributed functions whose process group is annotated while recording.
ANNOTATED_FUNCTIONS = (
    "all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_single", "reduce_scatter",
    "reduce_scatter_tensor", "reduce_scatter_single", "all_to_all", "all_to_all_single", "broadcast", "reduce",
    "gather", "scatter", "barrier", "monitored_barrier", "send", "recv", "isend", "irecv",
    "batch_isend_irecv",
)


class TraceRecorder:
    """Context manager driving torch.profiler with an ExecutionTraceObserver attached.

    `warmup` steps run with the profiler armed but not recording; the next `active` steps are
    recorded. Two warm-up steps absorb first-call costs and DDP's rebuild of its gradient
    buckets, which it does in its second iteration, so that the recorded steps repeat one
    another as a predicted step time assumes (chakra stats says where they do not:
    analysis/step_work.py). Call `step()` once at the end of every training step; steps after
    the recorded window cost nothing.
    """

    def __init__(self, out_dir: str | os.PathLike, *, warmup: int = 2, active: int = 2,
                 rank: int | None = None, record_shapes: bool = True,
                 annotate_process_groups: bool = True, compress: bool = False, timed_steps: int = 0):
        try:
            import torch
            from torch.profiler import (
                ExecutionTraceObserver,
                ProfilerActivity,
                profile,
                schedule,
            )
        except ImportError as exc:  # pragma: no cover - exercised only without torch
            raise RuntimeError("trace collection needs PyTorch: pip install '.[torch]'") from exc
        if warmup < 0 or active < 1 or timed_steps < 0:
            raise ValueError("warmup must be >= 0, active >= 1 and timed_steps >= 0")
        self.rank = _current_rank(torch) if rank is None else rank
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        suffix = ".json.gz" if compress else ".json"
        self.et_path = self.out_dir / f"rank{self.rank}.et{suffix}"
        self.kineto_path = self.out_dir / f"rank{self.rank}.kineto{suffix}"
        self.timing_path = self.out_dir / f"rank{self.rank}.timing.json"
        self._window, self._calls, self._timed_steps = warmup + active, 0, timed_steps
        self._steps_ns: list[int] = []
        self._last_step_end: int | None = None
        self._observer = ExecutionTraceObserver().register_callback(str(self.et_path))
        self._profiler = profile(
            activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else []),
            schedule=schedule(wait=0, warmup=warmup, active=active, repeat=1),
            record_shapes=record_shapes,
            execution_trace_observer=self._observer,
            on_trace_ready=lambda prof: prof.export_chrome_trace(str(self.kineto_path)),
        )
        self._annotations = _ProcessGroupAnnotations() if annotate_process_groups else contextlib.nullcontext()

    def __enter__(self) -> "TraceRecorder":
        self._annotations.__enter__()
        try:
            self._profiler.__enter__()
        except BaseException:
            self._annotations.__exit__(None, None, None)
            raise
        return self

    def step(self) -> None:
        """Call at the end of every training step."""
        self._calls += 1
        if self._calls <= self._window:
            self._profiler.step()  # the step() that ends the window also writes the traces
        elif self._last_step_end is not None and len(self._steps_ns) < self._timed_steps:
            self._steps_ns.append(time.perf_counter_ns() - self._last_step_end)
        self._last_step_end = time.perf_counter_ns()

    def __exit__(self, *exc_info) -> None:
        try:
            self._profiler.__exit__(*exc_info)
        finally:
            self._observer.unregister_callback()
            self._annotations.__exit__(None, None, None)
        if self._steps_ns:
            self.timing_path.write_text(json.dumps({"steps_ns": self._steps_ns}) + "\n")


class _ProcessGroupAnnotations:
    """Wraps torch.distributed functions in `record_function("chakra::pg=<name>")`."""

    def __init__(self):
        import torch.distributed as dist
        import torch.distributed.distributed_c10d as c10d

        self._namespaces = (dist, c10d)
        self._originals = {name: getattr(c10d, name) for name in ANNOTATED_FUNCTIONS
                           if hasattr(c10d, name)}

    def __enter__(self):
        wrapped = {name: _annotated(original) for name, original in self._originals.items()}
        if "batch_isend_irecv" in wrapped:
            wrapped["batch_isend_irecv"] = _batch_with_current_functions(wrapped["batch_isend_irecv"], self._originals,
                                                                         wrapped)
        for name, function in wrapped.items():
            for namespace in self._namespaces:
                setattr(namespace, name, function)
        return self

    def __exit__(self, *exc_info):
        for name, original in self._originals.items():
            for namespace in self._namespaces:
                setattr(namespace, name, original)


def _annotated(function):
    from torch.profiler import record_function

    signature = inspect.signature(function)

    @functools.wraps(function)
    def call(*args, **kwargs):
        pg_name = _group_name_of_call(signature, args, kwargs)
        if pg_name is None:
            return function(*args, **kwargs)
        with record_function(PG_ANNOTATION_PREFIX + pg_name):
            return function(*args, **kwargs)

    return call


def _batch_with_current_functions(batch, originals: dict, wrapped: dict):
    """torch's batch_isend_irecv tells sends from receives by `op.op is isend`: a P2POp built
    with the function not currently installed (before or during recording) must be pointed
    at the installed one for the call."""
    swap = {}
    for name in ("isend", "irecv"):
        if name in originals:
            swap[originals[name]] = wrapped[name]

    @functools.wraps(batch)
    def call(p2p_op_list, *args, **kwargs):
        saved = [op.op for op in p2p_op_list]
        for op in p2p_op_list:
            op.op = swap.get(op.op, op.op)
        try:
            return batch(p2p_op_list, *args, **kwargs)
        finally:
            for op, function in zip(p2p_op_list, saved):
                op.op = function

    return call


def _group_name_of_call(signature, args, kwargs) -> str | None:
    import torch.distributed as dist

    if not dist.is_initialized():
        return None
    arguments = signature.bind_partial(*args, **kwargs).arguments
    if "p2p_op_list" in arguments:  # batch_isend_irecv: every op of a batch shares a group
        ops = arguments["p2p_op_list"]
        group = ops[0].group if ops else None
    else:
        group = arguments.get("group")
    group = group if group is not None else dist.group.WORLD
    try:
        return dist.distributed_c10d._get_process_group_name(group)
    except Exception:  # a group object torch cannot name: leave the call unannotated
        return None


def _current_rank(torch) -> int:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank()
    return int(os.environ.get("RANK", "0"))
