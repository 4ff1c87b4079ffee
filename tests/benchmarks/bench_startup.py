"""Benchmark: start-up of the `chakra` command, each command a whole fresh process.

Run it as a script (pytest does not collect it):

    .venv/bin/python tests/benchmarks/bench_startup.py [--runs 15] [--file IN.et]

Times `chakra --help`, `chakra --version`, `chakra info F` and `chakra validate F` on a small
trace (default: a one-node all-reduce of the microbenchmarks), and, as same-run baselines,
`python -c pass` (the interpreter alone) and `python -c "import pyarrow"` (the floor of any
command that reads a trace). The runs are interleaved, one of each case per round, so that
other load on the machine falls on every case alike; each figure is the median over the
rounds of wall time and of CPU time (user + system, which other load disturbs less).

Target (the issue): --help, info and validate each under 0.35 s wall. Exit status 0
whatever the figures (a report), 1 if a command fails.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

TARGET_S = 0.35
SMALL_TRACE = (Path(__file__).resolve().parents[2] / "datasets" / "astra-sim-microbenchmarks" / "all_reduce"
               / "4npus_1MB" / "all_reduce.0.et")


def cases(trace: str) -> dict[str, tuple[list[str], bool]]:
    """name -> (command line, held to the target)."""
    python = sys.executable
    chakra = str(Path(python).parent / "chakra")
    return {
        "python -c pass": ([python, "-c", "pass"], False),
        "python -c 'import pyarrow'": ([python, "-c", "import pyarrow"], False),
        "chakra --help": ([chakra, "--help"], True),
        "chakra --version": ([chakra, "--version"], False),
        "chakra info F": ([chakra, "info", trace], True),
        "chakra validate F": ([chakra, "validate", trace], True),
    }


# As installed: compiled modules are cached, so that the untimed first run writes the .pyc files
# a PYTHONDONTWRITEBYTECODE environment would have every run compile again.
CHILD_ENV = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}


def run_once(argv: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one run; the process must succeed."""
    before = os.times()
    start = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=CHILD_ENV, check=True)
    wall = time.perf_counter() - start
    after = os.times()
    return wall, (after.children_user - before.children_user) + (after.children_system - before.children_system)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=15, help="rounds (default 15)")
    parser.add_argument("--file", default=str(SMALL_TRACE), metavar="IN.et", help="the trace for info and validate")
    args = parser.parse_args(argv)

    todo = cases(args.file)
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in todo}
    try:
        for name, (command, _) in todo.items():  # once untimed: the page cache and .pyc files warm
            run_once(command)
        for _ in range(args.runs):
            for name, (command, _) in todo.items():
                times[name].append(run_once(command))
    except subprocess.CalledProcessError as exc:
        print(f"FAILED: {' '.join(exc.cmd)} exited {exc.returncode}: {exc.stderr.decode(errors='replace')}",
              file=sys.stderr)
        return 1

    median = {name: (statistics.median(w for w, _ in runs), statistics.median(c for _, c in runs))
              for name, runs in times.items()}
    baseline = median["python -c pass"][0]
    print(f"F = {args.file}; median of {args.runs} interleaved runs; {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.2f}")
    print(f"{'command':<28} {'wall (s)':>9} {'cpu (s)':>8} {'x python':>9}  target {TARGET_S} s")
    for name, (command, held) in todo.items():
        wall, cpu = median[name]
        verdict = ("PASS" if wall < TARGET_S else "FAIL") if held else "-"
        print(f"{name:<28} {wall:>9.3f} {cpu:>8.3f} {wall / baseline:>8.1f}x  {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
