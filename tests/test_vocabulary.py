"""Issue 49, item 2: one vocabulary of kernels and operators. Every device kernel of every shipped
GPU run gets an operator class from its kernel family (analysis/stats.py KERNEL_CLASS), so a
kernel's class and family never disagree (a direct-copy kernel of the `elementwise` family was
the class `memory` by keyword, a softmax-backward `reduction` kernel the class `attention`): one
slowed family is one flagged cause, not also a class."""

from __future__ import annotations

import gzip
from collections import defaultdict

import orjson
import pyarrow.compute as pc
from datapaths import DATASETS

from chakra_core.analysis import stats
from chakra_core.analysis.kernels import family
from chakra_core.convert.sources import convert_source
from chakra_core.format.columns import device_compute
from chakra_core.format.job import Job

GPU_RUNS = ("gpu-h200", "gpu-h200-heldout", "gpu-h200-more", "gpu-h200-retimed", "kineto-nccl")


def _kernel_names() -> set[str]:
    names = set()
    for folder in GPU_RUNS:
        for path in (DATASETS / folder).rglob("*.kineto.json.gz"):
            events = orjson.loads(gzip.decompress(path.read_bytes())).get("traceEvents", [])
            names |= {e["name"] for e in events if isinstance(e, dict) and e.get("cat") == "kernel"}
    return names


def test_every_shipped_kernel_has_the_class_of_its_family():
    names = _kernel_names()
    assert len(names) > 400  # every run's distinct kernels (486 today), not an empty glob
    family_classes = set(stats.CLASS_OF_FAMILY.values())  # gemm, convolution, attention, memory, ...
    # a kernel in one of those classes is in the family of that class, and a family's kernels are in its class
    disagree = [(n[:80], family(n), stats.kernel_class(n)) for n in names
                if stats.kernel_class(n) != stats.CLASS_OF_FAMILY.get(family(n), stats.kernel_class(n))
                or (stats.kernel_class(n) in family_classes and family(n) not in stats.CLASS_OF_FAMILY)]
    assert disagree == []
    assert set(stats.KERNEL_CLASS.values()) <= set(stats.OP_CLASS_NAMES)  # the synthesizer's vocabulary


def test_a_converted_runs_device_time_by_class_is_its_time_by_family(tmp_path):
    """End to end on a real run: trace_row's compute by class, for the device's kernels, adds up
    family by family."""
    convert_source(str(DATASETS / "gpu-h200" / "gpt"), str(tmp_path), "gpt")
    table = Job.read(str(tmp_path / "gpt")).tables[0]
    classes = stats.compute_classes(table).to_pylist()
    comp = table.filter(pc.equal(table.column("type"), stats.COMP))
    on_npu = device_compute(comp).to_pylist()
    by_family, by_class = defaultdict(int), defaultdict(int)
    for name, micros, cls, device in zip(comp.column("name").to_pylist(), comp.column("duration_micros").to_pylist(),
                                         classes, on_npu):
        if device:
            by_family[stats.KERNEL_CLASS[family(name)]] += micros
            by_class[cls] += micros
    assert by_class == by_family and by_class["gemm"] > 0 and "other" in by_class
