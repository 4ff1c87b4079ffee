"""Benchmark: a transformer of 1,024 to 16,384 NPUs generated and simulated, both network models.

    .venv/bin/python tests/benchmarks/bench_scale.py [--sizes 1024,4096,16384] [--baseline-upto 4096]
        [--before DIR [--before-upto 4096]] [--system FILE] [--bandwidths 200,50,50]

Each size is `chakra generate transformer --npus N --tp 8 --pp 8 --layers 32 --batch 1024`
(145-153 nodes per rank) on Ring 8 x Switch 8 x Switch N/64 (200, 50, 50 GB/s, 500 ns) with
the reference folder's Ring_4chunks.json, each phase a whole `chakra` process: generate (the
rank files written), simulate unaware and simulate aware (shared: sim/symmetry.py), and, up
to --baseline-upto NPUs, the same two simulations with --no-share (every NPU simulated, as
before shared simulation), whose results must be the same per NPU. --before DIR runs the
same phases with the code of another source tree as well (the same-run baseline of the code
before this round: `git archive main | tar -x -C DIR` and the built chakra_core/_native/*.so
copied in; it runs with PYTHONPATH=DIR), up to --before-upto NPUs, and checks its results too.
--system and --bandwidths run the same on another system file and links (issue 39's held-out
one: `--system DIR/lifo.json --bandwidths 400,200,50` with a system file of LIFO, localBWAware,
one active chunk per dimension and four dataset splits). Prints wall and CPU seconds and peak
RSS of each process. Targets at 16,384 NPUs: generated <= 30 s, simulated
unaware <= 15 s and aware <= 60 s, each under 4 GB, every NPU finishing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SYSTEM = ROOT / "datasets" / "astra-sim-reference" / "configs" / "Ring_4chunks.json"


def run(args: list[str], out: Path | None = None, tree: str | None = None) -> tuple[float, float, float]:
    """(wall s, CPU s, peak RSS GB) of one `chakra` process (with the code of source tree
    `tree`, if given); stdout to `out` (else dropped)."""
    env = {**os.environ, "PYTHONPATH": tree} if tree else None
    with open(out or os.devnull, "w") as sink:
        start = time.perf_counter()
        process = subprocess.Popen([sys.executable, "-m", "chakra_core.cli", *args], stdout=sink,
                                   stderr=subprocess.PIPE, text=True, env=env, cwd=tree)
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status):
        raise SystemExit(f"chakra {' '.join(args)} failed: {process.stderr.read()}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024 ** 2


def network(npus: int, folder: Path, bandwidths: str = "200,50,50") -> Path:
    path = folder / "net.yml"
    path.write_text(f"topology: [ Ring, Switch, Switch ]\nnpus_count: [ 8, 8, {npus // 64} ]\n"
                    f"bandwidth: [ {', '.join(f'{float(b)}' for b in bandwidths.split(','))} ]\n"
                    "latency: [ 500.0, 500.0, 500.0 ]\n")
    return path


def one_size(npus: int, baseline: bool, before: str | None, folder: Path, system: Path = SYSTEM,
             bandwidths: str = "200,50,50") -> str:
    """The table's line for one size: each phase as this code runs it, then as the baselines do."""
    fmt = (lambda t: f"{t[0]:.1f} s ({t[1]:.1f} CPU s), {t[2]:.2f} GB")
    generate = ["generate", "transformer", "--npus", str(npus), "--tp", "8", "--pp", "8", "--layers", "32",
                "--batch", "1024", "--json"]
    cells = [fmt(run(generate + ["-o", str(folder)]))]
    if before:
        cells[0] += f"; before {fmt(run(generate + ['-o', str(folder / 'before')], tree=before))}"
    net = network(npus, folder, bandwidths)
    for mode in ("unaware", "aware"):
        base = ["simulate", "--mode", mode, "--workload", str(folder / "transformer"), "--network", str(net),
                "--system", str(system), "--json"]
        shared = run(base, folder / f"{mode}.json")
        result = json.loads((folder / f"{mode}.json").read_text())
        finished = all(n["nodes"] >= 145 for n in result["npus"])
        cell = f"{fmt(shared)}, {result['sharing'].get('simulated_npus', npus)} simulated" + (
            "" if finished else ", NOT every NPU finished")
        for label, extra, tree in (("unshared", ["--no-share"], None), ("before", [], before)):
            if (label == "unshared" and baseline) or (label == "before" and tree):
                timed = run(base + extra, folder / f"{mode}.{label}.json", tree)
                equal = result["npus"] == json.loads((folder / f"{mode}.{label}.json").read_text())["npus"]
                cell += f"; {label} {fmt(timed)}, {'identical' if equal else 'DIFFERENT'}"
        cells.append(cell)
    return f"| {npus:,} | " + " | ".join(cells) + " |"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1024,4096,16384")
    parser.add_argument("--baseline-upto", type=int, default=4096, help="run --no-share up to this many NPUs")
    parser.add_argument("--before", metavar="DIR", help="a source tree of the code before (PYTHONPATH=DIR)")
    parser.add_argument("--before-upto", type=int, default=4096, help="run --before up to this many NPUs")
    parser.add_argument("--system", type=Path, default=SYSTEM, help="the system file (default Ring_4chunks.json)")
    parser.add_argument("--bandwidths", default="200,50,50", help="GB/s of the three dimensions' links")
    args = parser.parse_args(argv)
    print(f"load average before: {os.getloadavg()[0]:.1f}")
    print("| NPUs | generate | simulate, congestion-unaware | simulate, congestion-aware |")
    print("|---|---|---|---|")
    for npus in map(int, args.sizes.split(",")):
        with tempfile.TemporaryDirectory(prefix=f"bench_scale_{npus}_") as folder:
            before = args.before if args.before and npus <= args.before_upto else None
            print(one_size(npus, npus <= args.baseline_upto, before, Path(folder), args.system, args.bandwidths),
                  flush=True)
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
