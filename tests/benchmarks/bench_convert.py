"""Benchmark: PyTorch ET JSON -> Chakra .et conversion throughput and peak memory.

Run it as a script (pytest does not collect it):

    .venv/bin/python tests/benchmarks/bench_convert.py [--copies 35] [--out DIR]

Two inputs: the 14,392-node ResNet DDP trace shipped in datasets/pytorch-et, and a large
trace built from real iterations: that trace's nodes repeated `--copies` times with their
ids, parents, tensor and storage ids shifted (35 copies = 503,720 nodes), written as plain
JSON. Each conversion (what `chakra convert` does, with its Arrow allocator: read, convert,
write NAME.0.et) runs in a fresh subprocess that reports its wall time and peak RSS above the RSS after imports, then converts
the same file once more in that process (what a pipeline worker sees after its first file). The same
subprocess style times `json.load` of the same file, the floor of any converter that parses
the whole document with the standard library, as the same-run baseline.

Targets (the issue): >= 80,000 nodes/s, and peak memory <= 3x the JSON size. For scale, the
reference Chakra converter took 5.2 s (2,800 nodes/s) and ~12x the JSON size on the ResNet
trace on this kind of machine. Exit status 0 whatever the figures (a report).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

RESNET = Path(__file__).resolve().parents[2] / "datasets" / "pytorch-et" / "resnet_ddp.rank0.et.json.gz"
NODES_PER_SECOND_TARGET = 80_000
MEMORY_RATIO_TARGET = 3.0

_CHILD = r"""
import json, resource, sys, time
mode, src, out = sys.argv[1:4]
def rss_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
warm = None
if mode == "convert":
    from chakra_core.cli import configure_arrow_memory
    from chakra_core.convert.pytorch.job import convert_job
    configure_arrow_memory()  # as the chakra command does
    base = rss_kib()
    t = time.perf_counter()
    result = convert_job(src, out, "bench")
    elapsed = time.perf_counter() - t
    nodes = result.host_nodes
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t = time.perf_counter()
    convert_job(src, out + "-again", "bench")  # the same file again in the same process
    warm = time.perf_counter() - t
else:
    import gzip
    base = rss_kib()
    t = time.perf_counter()
    opener = gzip.open if src.endswith(".gz") else open
    with opener(src, "rb") as f:
        nodes = len(json.load(f)["nodes"])
    elapsed = time.perf_counter() - t
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"seconds": elapsed, "warm_seconds": warm, "nodes": nodes,
                  "peak_above_base_bytes": (peak - base) * 1024}))
"""


def _run(mode: str, src: Path, out: Path) -> dict:
    done = subprocess.run([sys.executable, "-c", _CHILD, mode, str(src), str(out)], check=True, capture_output=True,
                          text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def build_large(copies: int, path: Path) -> int:
    """The ResNet trace's nodes repeated `copies` times with shifted ids: real node shapes at scale."""
    with gzip.open(RESNET, "rt") as f:
        trace = json.load(f)
    nodes = trace["nodes"]
    span = max(n["id"] for n in nodes) + 1
    tensor_span = 1 << 24

    def shift_values(values, k):
        out = []
        for v in values:
            if isinstance(v, list) and len(v) == 6 and isinstance(v[0], int) and isinstance(v[5], str):
                out.append([v[0] + k * tensor_span, v[1] + k * tensor_span] + v[2:])
            elif isinstance(v, list):
                out.append(shift_values(v, k))
            else:
                out.append(v)
        return out

    with open(path, "w") as f:
        f.write(json.dumps({k: v for k, v in trace.items() if k != "nodes"})[:-1] + ', "nodes": [')
        first = True
        for k in range(copies):
            for n in nodes:
                copy = dict(n, id=n["id"] + k * span,
                            ctrl_deps=(n["ctrl_deps"] + k * span) if n.get("ctrl_deps") else n.get("ctrl_deps"))
                for io in ("inputs", "outputs"):
                    copy[io] = dict(n[io], values=shift_values(n[io]["values"], k))
                f.write(("" if first else ",\n") + json.dumps(copy))
                first = False
        f.write("]}")
    return copies * len(nodes)


def _json_size(path: Path) -> int:
    if path.suffix == ".gz":
        with gzip.open(path, "rb") as f:
            return sum(len(chunk) for chunk in iter(lambda: f.read(1 << 20), b""))
    return path.stat().st_size


def report(label: str, src: Path, workdir: Path) -> None:
    size = _json_size(src)
    convert = _run("convert", src, workdir / f"{label}-out")
    baseline = _run("json_load", src, workdir)
    rate = convert["nodes"] / convert["seconds"]
    warm_rate = convert["nodes"] / convert["warm_seconds"]
    memory_ratio = convert["peak_above_base_bytes"] / size
    print(f"\n{label}: {convert['nodes']:,} nodes, JSON {size / 1e6:.1f} MB")
    print(f"  chakra convert, first file of a fresh process: {convert['seconds']:.2f} s = {rate:,.0f} nodes/s "
          f"[{'PASS' if rate >= NODES_PER_SECOND_TARGET else 'FAIL'} >= {NODES_PER_SECOND_TARGET:,}]; "
          f"{rate / 2800:.1f}x the reference converter's 2,800 nodes/s")
    print(f"  the same file again in that process (a worker's steady state): {convert['warm_seconds']:.2f} s = "
          f"{warm_rate:,.0f} nodes/s [{'PASS' if warm_rate >= NODES_PER_SECOND_TARGET else 'FAIL'}]")
    print(f"  peak memory above imports: {convert['peak_above_base_bytes'] / 1e6:.0f} MB = {memory_ratio:.2f}x the JSON "
          f"[{'PASS' if memory_ratio <= MEMORY_RATIO_TARGET else 'FAIL'} <= {MEMORY_RATIO_TARGET}x]")
    print(f"  same-run baseline, json.load alone: {baseline['seconds']:.2f} s, "
          f"{baseline['peak_above_base_bytes'] / size:.1f}x the JSON; convert / json.load time = "
          f"{convert['seconds'] / baseline['seconds']:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--copies", type=int, default=35, help="ResNet copies in the large trace (35 = 503,720 nodes)")
    parser.add_argument("--out", help="keep the work files here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(args.out or tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        report("resnet (gzip)", RESNET, workdir)
        large = workdir / "large.et.json"
        nodes = build_large(args.copies, large)
        print(f"\nbuilt {large} ({nodes:,} nodes)")
        report("large", large, workdir)
    os.sync()


if __name__ == "__main__":
    main()
