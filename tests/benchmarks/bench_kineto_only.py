"""Benchmark: converting from Kineto traces alone against the same runs with their execution traces.

Run it as a script (pytest does not collect it):

    .venv/bin/python tests/benchmarks/bench_kineto_only.py [--repeats 3]

Inputs: the shipped GPU runs (datasets/gpu-h200, gpu-h200-heldout) and the largest gloo run
(transformer_ddp-w4). Each run is converted in this process twice per repeat, with its
execution traces (the same-run baseline: `rank<R>.et.json.gz` + `rank<R>.kineto.json.gz`) and
from a copy of its folder without them; the figure is seconds per MB of the input read
(gzipped bytes), the median of the repeats, and the ratio of whole conversions. Target
(issue 36): no slower per MB than the baseline. Exit status 0 whatever the figures (a report).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from datapaths import DATASETS  # noqa: E402

from chakra_core.convert.sources import convert_source  # noqa: E402

RUNS = [DATASETS / "gpu-h200" / r for r in ("gpt", "mlp_tiny", "mlp_gloo2")] + \
    sorted(p for p in (DATASETS / "gpu-h200-heldout").iterdir() if p.is_dir()) + \
    [DATASETS / "pytorch-gloo" / "transformer_ddp-w4"]


def seconds_per_mb(src: Path, out: Path, repeats: int) -> tuple[float, float]:
    """(median seconds of a conversion, its input in MB)."""
    megabytes = sum(f.stat().st_size for f in src.iterdir() if ".json" in f.name) / 1e6
    seconds = []
    for k in range(repeats):
        started = time.perf_counter()
        convert_source(str(src), str(out / str(k)), "j")
        seconds.append(time.perf_counter() - started)
    return statistics.median(seconds), megabytes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(f"{'run':32s} {'ET+Kineto MB':>12s} {'s/MB':>7s} {'Kineto MB':>10s} {'s/MB':>7s} {'per MB':>7s} "
          f"{'whole':>6s}")
    ratios, wholes = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for run in RUNS:
            alone = Path(tmp) / "in" / run.name
            alone.mkdir(parents=True)
            for f in run.glob("rank*.kineto.json.gz"):
                shutil.copy(f, alone / f.name)
            convert_source(str(alone), f"{tmp}/warm", "j")  # imports and first-use costs out of the figures
            base_s, base_mb = seconds_per_mb(run, Path(tmp) / "et" / run.name, args.repeats)
            kin_s, kin_mb = seconds_per_mb(alone, Path(tmp) / "kineto" / run.name, args.repeats)
            ratio = (kin_s / kin_mb) / (base_s / base_mb)
            ratios.append(ratio)
            wholes.append(kin_s / base_s)
            print(f"{run.name:32s} {base_mb:12.2f} {base_s / base_mb:7.3f} {kin_mb:10.2f} {kin_s / kin_mb:7.3f} "
                  f"{ratio:7.2f} {kin_s / base_s:6.2f}")
    print(f"Kineto alone per MB / ET+Kineto per MB: median {statistics.median(ratios):.2f}, worst {max(ratios):.2f}"
          " (target: at most 1.00)")
    print(f"Kineto alone / ET+Kineto, whole conversion: median {statistics.median(wholes):.2f}, "
          f"worst {max(wholes):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
