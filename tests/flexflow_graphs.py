"""FlexFlow task graphs for tests and benchmarks: the shipped graphs, counted by reading their labels
independently of the converter, and large graphs tiled from a real one."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from datapaths import DATASETS

FLEXFLOW = DATASETS / "other-formats" / "flexflow"
TEXT = DATASETS / "other-formats" / "text"
ALEXNET = FLEXFLOW / "alexnet.4.graph"
_NODE = re.compile(r"\bnode(\d+)\b")
_LABEL = re.compile(r'(node\d+) \[.*?label="\{(.*?)\}"')


def expected_per_device(path: Path) -> dict[int, Counter]:
    """Per device: compute tasks, sends, receives, and the compute tasks' run times (ms) summed."""
    found: dict[int, Counter] = {}
    for _, label in _LABEL.findall(path.read_text()):
        fields = dict(f.split("=", 1) for f in label.split("|") if "=" in f)
        if "COMP_NODE" in label:
            device = found.setdefault(int(fields["device_id"]), Counter())
            device["compute"] += 1
            device["ms"] += float(fields["simulated_run_time"])
        else:
            found.setdefault(int(fields["src_device_id"]), Counter())["sends"] += 1
            found.setdefault(int(fields["dst_device_id"]), Counter())["recvs"] += 1
    return found


def tiled_graph(source: Path, copies: int, devices: int) -> str:
    """`copies` copies of a real graph of d devices side by side in one digraph: copy k runs on
    devices d*(k mod devices/d) + 0..d-1 with its node numbers shifted, so the result has
    `devices` devices and copies/(devices/d) independent iterations on each."""
    text = source.read_text()
    body = text[text.index("{") + 1:text.rindex("}")]
    numbers = [int(n) for n in _NODE.findall(body)]
    span = max(numbers) + 1
    width = max(expected_per_device(source)) + 1
    parts = []
    for k in range(copies):
        node_shift, device_shift = k * span, width * (k % (devices // width))
        shifted = _NODE.sub(lambda m: f"node{int(m.group(1)) + node_shift}", body)
        shifted = re.sub(r"((?:src_|dst_)?device_id)=(\d+)", lambda m: f"{m.group(1)}={int(m.group(2)) + device_shift}",
                         shifted)
        parts.append(shifted)
    return "digraph taskgraph {" + "\n".join(parts) + "}"
