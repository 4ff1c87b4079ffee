"""Benchmark: FlexFlow task graphs and ASTRA-sim text workloads -> Chakra, whole process.

Run it as a script (pytest does not collect it):

    .venv/bin/python tests/benchmarks/bench_convert_sources.py [--repeats 3] [--copies 48]

Inputs: a FlexFlow graph of 64 devices tiled from the real AlexNet graph of
datasets/other-formats (48 copies: 2.2 MB, 11,520 tasks and transfers), and the shipped text
workloads on 64 NPUs (ResNet-50 DATA and the HYBRID_DATA_MODEL MLP, 10 passes). Each
conversion is `chakra convert` in a fresh process, timed from start to exit (median of the
repeats). The same-run baselines are `chakra --version`, the floor of any command (interpreter
start and the CLI's imports), and the real 43 KB AlexNet graph, the fixed cost of a conversion
(the converter's imports, writing a job). Target (issue 30): a 2 MB graph in under 5 s whole process.
Exit status 0 whatever the figures (a report).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from flexflow_graphs import ALEXNET, TEXT, tiled_graph  # noqa: E402

CHAKRA = str(Path(sys.executable).parent / "chakra")
TARGET_SECONDS = 5.0


def timed(argv: list[str], repeats: int) -> float:
    """Median wall seconds of `argv` as a fresh process."""
    seconds = []
    for _ in range(repeats):
        started = time.perf_counter()
        subprocess.run(argv, check=True, capture_output=True)
        seconds.append(time.perf_counter() - started)
    return statistics.median(seconds)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--copies", type=int, default=48, help="copies of the AlexNet graph (48: 64 devices, 2.2 MB)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        graph = Path(tmp) / "tiled.graph"
        graph.write_text(tiled_graph(ALEXNET, args.copies, 64))
        cases = [
            ("baseline: chakra --version", [CHAKRA, "--version"], ""),
            ("FlexFlow graph, 4 devices, 43 KB (the fixed cost)",
             [CHAKRA, "convert", str(ALEXNET), "-o", f"{tmp}/small"], ""),
            (f"FlexFlow graph, 64 devices, {graph.stat().st_size / 1e6:.1f} MB",
             [CHAKRA, "convert", str(graph), "-o", f"{tmp}/ff"], "target"),
            ("text DATA ResNet-50, 64 NPUs, 10 passes",
             [CHAKRA, "convert", str(TEXT / "Resnet50_DataParallel.txt"), "-o", f"{tmp}/resnet", "--npus", "64",
              "--passes", "10"], ""),
            ("text HYBRID_DATA_MODEL MLP, 64 NPUs, 10 passes",
             [CHAKRA, "convert", str(TEXT / "MLP_HybridParallel_Data_Model.txt"), "-o", f"{tmp}/mlp", "--npus", "64",
              "--passes", "10"], ""),
        ]
        baseline = None
        print(f"{'case':<52} {'seconds':>8} {'minus baseline':>15}")
        for label, argv, mark in cases:
            seconds = timed(argv, args.repeats)
            baseline = seconds if baseline is None else baseline
            verdict = f"  ({'meets' if seconds < TARGET_SECONDS else 'MISSES'} < {TARGET_SECONDS:g} s)" if mark else ""
            print(f"{label:<52} {seconds:>8.2f} {seconds - baseline:>15.2f}{verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
