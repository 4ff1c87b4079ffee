#!/usr/bin/env python
"""Measure the profiler's cost per operator on this machine (docs/gpu.md, 'The profiler's cost').

Usage::

    python -m tools.profcost --out DIR [--device cpu|cuda] [--calls 300] [--repeats 3]

Runs a fixed set of operators (CASES: factories, views, element-wise ops with tensor and scalar
inputs, matrix products, a module, concatenations and multi-tensor ops of 2 to 32 tensors), each
`--calls` times in a row, once with the recording recipe's profiler on (the execution-trace
observer attached to torch.profiler with CPU (and CUDA) activities and `record_shapes=True`, as
tools/collect.py and chakra_core.convert.collect.TraceRecorder record) and once without, and
writes `DIR/profiler_cost.json`: per case the host time per call with and without the profiler,
and what the profiler saw of one call (operators, their inputs, tensor inputs, device launches).
The repeats alternate profiled and unprofiled loops; each figure is the median of the repeats.
Tensors are tiny, so a loop is bound by the host even on a GPU (its kernels take less time than
their launches): the difference is the profiler's cost in host time, which `chakra calibrate`
reads when the file lies beside a run's traces.

The cost depends on the machine (its CPU) and on the torch version, which is why the recorder
runs it where it records (`tools/collect.py --probe`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.profiler import ExecutionTraceObserver, ProfilerActivity, profile, record_function

FILE_NAME = "profiler_cost.json"
VERSION = 1
CASE_PREFIX = "profcost::"
# Kineto's names of the runtime calls that start device work (as chakra_core.convert.kineto reads them).
LAUNCH_CALLS = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx",
                "cudaMemcpyAsync", "cudaMemsetAsync", "cudaGraphLaunch")


def cases(device: torch.device) -> dict:
    """case name -> a function of no arguments making one call of the case's operator(s)."""
    gen = torch.Generator().manual_seed(0)

    def t(*shape):
        return torch.rand(*shape, generator=gen).to(device)

    a, b, m, w, bias = t(64), t(64), t(16, 16), t(16, 16), t(16)
    lists = {k: [t(8) for _ in range(k)] for k in (2, 8, 32)}
    return {
        "empty": lambda: torch.empty(64, device=device),
        "view": lambda: a.view(8, 8),
        "add": lambda: torch.add(a, b),
        "add_scalar": lambda: torch.add(a, 1.5),
        "mul_": lambda: a.mul_(1.0),
        "relu": lambda: torch.relu(a),
        "sum": lambda: a.sum(),
        "mm": lambda: torch.mm(m, w),
        "linear": lambda: F.linear(m, w, bias),
        "zeros": lambda: torch.zeros(64, device=device),
        "clone": lambda: a.clone(),
        **{f"cat_{k}": (lambda xs=xs: torch.cat(xs)) for k, xs in lists.items()},
        **{f"foreach_add_{k}": (lambda xs=xs: torch._foreach_add_(xs, 1.0)) for k, xs in lists.items()},
    }


def _loop(fn, calls: int, device: torch.device) -> int:
    """Host time of `calls` calls of fn, in ns, from an idle device to the last call's return."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter_ns()
    for _ in range(calls):
        fn()
    elapsed = time.perf_counter_ns() - start
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return elapsed


def _profiler(device: torch.device, et_path: Path):
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    observer = ExecutionTraceObserver().register_callback(str(et_path))
    return profile(activities=activities, record_shapes=True, execution_trace_observer=observer), observer


def _seen_per_call(events, calls: int) -> dict[str, dict]:
    """What the profiler recorded under each case's record_function, per call: operators, their
    inputs, tensor inputs (inputs with a shape) and device launches (runtime calls)."""
    seen = {}
    for event in events:
        # with CUDA activity a record_function also appears as a device-side annotation, without children
        if not event.name.startswith(CASE_PREFIX) or not event.cpu_children:
            continue
        ops = inputs = tensors = launches = 0
        # the time the trace gives the call's operators: the spans of the outermost ones
        spans_us = sum(c.time_range.elapsed_us() for c in event.cpu_children if not c.name.startswith("cuda"))
        stack = list(event.cpu_children)
        while stack:
            child = stack.pop()
            stack.extend(child.cpu_children)
            if child.name in LAUNCH_CALLS:
                launches += 1
            elif not child.name.startswith("cuda"):  # other runtime calls are no operators
                ops += 1
                shapes = child.input_shapes or []
                inputs += len(shapes)
                tensors += sum(_tensors_in(s) for s in shapes)
        seen[event.name[len(CASE_PREFIX):]] = {"ops_per_call": ops / calls, "inputs_per_call": inputs / calls,
                                               "tensor_inputs_per_call": tensors / calls,
                                               "launches_per_call": launches / calls,
                                               "recorded_ns": round(spans_us * 1e3 / calls, 1)}
    return seen


def _tensors_in(shape) -> int:
    """Tensors behind one recorded input shape: a tensor's shape is a list of ints (a scalar
    tensor's is empty, as a non-tensor's), a tensor list's a list of shapes."""
    if shape and isinstance(shape[0], (list, tuple)):
        return len(shape)
    return 1 if shape else 0


def measure(device: torch.device, calls: int = 300, repeats: int = 3) -> dict:
    """The profiler_cost.json document for `device` (see the module docstring)."""
    fns = cases(device)
    for fn in fns.values():  # first calls load kernels and libraries: not the profiler's cost
        _loop(fn, 5, device)
    plain: dict[str, list[int]] = {name: [] for name in fns}
    profiled: dict[str, list[int]] = {name: [] for name in fns}
    seen: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="profcost-") as tmp:
        for repeat in range(repeats):
            for name, fn in fns.items():
                plain[name].append(_loop(fn, calls, device))
            prof, observer = _profiler(device, Path(tmp) / f"et{repeat}.json")
            with prof:
                for name, fn in fns.items():
                    with record_function(CASE_PREFIX + name):
                        profiled[name].append(_loop(fn, calls, device))
            observer.unregister_callback()
            if repeat == 0:
                seen = _seen_per_call(prof.events(), calls)
    rows = []
    for name in fns:
        off, on = statistics.median(plain[name]) / calls, statistics.median(profiled[name]) / calls
        rows.append({"case": name, "unprofiled_ns": round(off, 1), "profiled_ns": round(on, 1),
                     "cost_ns": round(on - off, 1), **seen.get(name, {})})
    return {"probe": "tools/profcost.py", "version": VERSION, "device": _device_name(device),
            "torch": torch.__version__, "calls": calls, "repeats": repeats, "cases": rows}


def _device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


def write(out_dir: Path, document: dict) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / FILE_NAME
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(document, indent=1) + "\n")
    tmp.replace(path)
    return path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help=f"folder to write {FILE_NAME} into")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--calls", type=int, default=300, help="calls per case and loop")
    parser.add_argument("--repeats", type=int, default=3, help="profiled and unprofiled loops per case")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: this machine has no CUDA device")
    if args.calls < 1 or args.repeats < 1:
        parser.error("--calls and --repeats must be at least 1")
    torch.set_num_threads(1)
    document = measure(torch.device(args.device), args.calls, args.repeats)
    path = write(args.out, document)
    for row in document["cases"]:
        print(f"{row['case']:16} {row['unprofiled_ns'] / 1e3:8.2f} us -> {row['profiled_ns'] / 1e3:8.2f} us "
              f"(+{row['cost_ns'] / 1e3:.2f} us; {row.get('ops_per_call', 0):.0f} ops, "
              f"{row.get('inputs_per_call', 0):.0f} inputs, {row.get('launches_per_call', 0):.0f} launches)")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
