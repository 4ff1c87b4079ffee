"""Benchmark: what the device analysis adds to `chakra stats` on the shipped gpt run.

    .venv/bin/python tests/benchmarks/bench_device.py [--repeat 7]

Converts datasets/gpu-h200/gpt (2,749 device events, 18,813 nodes) once, then times, interleaved
in one process, `chakra stats` as it was (read the trace, trace_row, collective_rows: the
same-run baseline), the device analysis as recorded alone, and the whole device analysis it
now adds on top (JobAnalysis.gpu: the recorded figures and the prediction, a simulation with
its timeline). Prints the medians and the
difference against the target: under 0.3 s added. Exit status 0 (a report).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

TARGET_S = 0.3
GPT = Path(__file__).resolve().parents[2] / "datasets" / "gpu-h200" / "gpt"


def main() -> None:
    from chakra_core.analysis.facade import JobAnalysis
    from chakra_core.analysis.stats import collective_rows, trace_row
    from chakra_core.convert.pytorch.job import convert_job
    from chakra_core.format.etfile import read_table
    from chakra_core.format.job import Job

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        convert_job(str(GPT), tmp, "gpt")
        url = f"{tmp}/gpt.0.et"
        baseline, recorded, device = [], [], []
        for _ in range(args.repeat + 1):  # the first round warms caches and imports; not counted
            start = time.perf_counter()
            table = read_table(url)
            trace_row(table)
            collective_rows(table)
            middle = time.perf_counter()
            JobAnalysis(Job([table], {}, "gpt"), predict=False).gpu()
            alone = time.perf_counter()
            gpu = JobAnalysis(Job([table], {}, "gpt")).gpu()
            end = time.perf_counter()
            baseline.append(middle - start)
            recorded.append(alone - middle)
            device.append(end - alone)
    base, added = statistics.median(baseline[1:]), statistics.median(device[1:])
    print(f"gpt: {table.num_rows:,} nodes, {gpu[0]['launches']:,} device items; chakra stats' work {base:.3f} s; "
          f"the device analysis as recorded alone {statistics.median(recorded[1:]):.3f} s; with the prediction "
          f"(a simulation with its timeline) it adds {added:.3f} s (median of {args.repeat}; range "
          f"{min(device[1:]):.3f}-{max(device[1:]):.3f} s) [{'PASS' if added < TARGET_S else 'FAIL'} < {TARGET_S} s]")


if __name__ == "__main__":
    main()
