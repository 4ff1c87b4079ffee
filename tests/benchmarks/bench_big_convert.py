"""Benchmark: converting production-size traces, against the same run's gunzip time as the floor.

Run it as a script (pytest does not collect it):

    .venv/bin/python tests/benchmarks/bench_big_convert.py [--k 1 4 8] [--run gpt] [--keep DIR]
        [--compare-with CHECKOUT]

Inputs: one rank of a shipped GPU run (datasets/gpu-h200/<run>: its execution trace and its
Kineto trace) repeated K times into one longer, consistent recording (bigtrace.py: node ids,
record-function ids, External ids, correlations, tensor and storage ids and profiler step
numbers shifted per repeat, Kineto times shifted by the window's length), gzip'd like the
shipped files. For each K, in fresh child processes whose CPU time (user + sys) and peak RSS
come from os.wait4:
- floor: `gzip -dc` of the same files (the least any reader of them must spend);
- ET+Kineto: `chakra convert` of the folder;
- Kineto alone: `chakra convert` of a folder holding the Kineto trace only.
Printed per K: JSON MB, nodes out, CPU s, MB of JSON per CPU s, CPU time / floor, peak RSS.
When K = 1 comes first in --k, the nodes out of each larger K are checked against K times the
single recording's, less what a recording has once (the process-group node; roots are dropped
anyway); a mismatch exits 1.

--compare-with CHECKOUT: convert every trace again with another checkout of the project (its
code, built in place, run from its folder by this checkout's interpreter, so that both run with
the same libraries; e.g. main) and check the .et files are byte-identical (exit 1 if not); its
times are printed beside. Targets (issue 40): ET+Kineto CPU at most 2.5x the floor, peak RSS under
750 MB on an 882 MB trace (K = 32 of gpt); issue 36: Kineto alone no slower per MB.
"""

from __future__ import annotations

import argparse
import filecmp
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import bigtrace  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
FLOOR_TARGET, RSS_TARGET_MB = 2.5, 750


def measured(argv: list[str], cwd: Path = REPO) -> tuple[float, float, str]:
    """(CPU seconds user + sys, peak RSS MiB, stdout) of a child process."""
    with tempfile.TemporaryFile() as out:
        child = subprocess.Popen(argv, stdout=out, stderr=subprocess.PIPE, cwd=cwd)
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
        err = child.stderr.read().decode(errors="replace")
        out.seek(0)
        text = out.read().decode(errors="replace")
    if child.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({child.returncode}): {err.strip()[-2000:]}")
    return usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, text


def make(source: Path, dest: Path, k: int) -> bigtrace.Made:
    """bigtrace.make in a child process: a child's peak RSS counts the memory of the process it
    was forked from, so this one stays small."""
    text = subprocess.run([sys.executable, bigtrace.__file__, str(source), str(dest), str(k)], check=True,
                          capture_output=True, text=True).stdout
    return bigtrace.Made(**json.loads(text))


def floor(files: list[Path]) -> tuple[float, float]:
    cpu, rss, _ = measured(["sh", "-c", " ".join(f"gzip -dc {f} >/dev/null;" for f in files)])
    return cpu, rss


def convert(checkout: Path, src: Path, out: Path) -> tuple[float, float, int]:
    """(CPU s, peak RSS MiB, nodes written) of `chakra convert src -o out --json` by a checkout's code
    (`-m` imports chakra_core from the folder it runs in)."""
    cpu, rss, text = measured([sys.executable, "-m", "chakra_core.cli", "convert", str(src), "-o", str(out), "--json"],
                              checkout)
    return cpu, rss, json.loads(text)["nodes"]


def same_outputs(a: Path, b: Path) -> bool:
    names = sorted(p.name for p in a.iterdir() if p.suffix == ".et")
    return bool(names) and names == sorted(p.name for p in b.iterdir() if p.suffix == ".et") and all(
        filecmp.cmp(a / n, b / n, shallow=False) for n in names)


def row(label: str, mb: float, nodes: int, cpu: float, floor_cpu: float, rss: float) -> str:
    return f"{label:22s} {mb:9.1f} {nodes:10,d} {cpu:8.2f} {mb / cpu:8.1f} {cpu / floor_cpu:7.2f} {rss:9.0f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--k", type=int, nargs="+", default=[1, 4, 8], help="repeats of the recording (default 1 4 8)")
    parser.add_argument("--run", default="gpt", help="the run of datasets/gpu-h200 to repeat (default gpt)")
    parser.add_argument("--keep", type=Path, help="make the traces here and keep them (reused when present)")
    parser.add_argument("--compare-with", metavar="CHECKOUT", type=Path,
                        help="another checkout of the project: check its .et files are identical")
    args = parser.parse_args()
    source = REPO / "datasets" / "gpu-h200" / args.run
    ok = True
    with tempfile.TemporaryDirectory(prefix="bench-big-") as tmp:
        where = args.keep or Path(tmp)
        print(f"{'K, path':22s} {'JSON MB':>9s} {'nodes':>10s} {'CPU s':>8s} {'MB/CPU s':>8s} {'/floor':>7s} "
              f"{'peak MiB':>9s}")
        single = None
        for k in args.k:
            both = where / f"{args.run}-k{k}"
            made = make(source, both, k)
            alone = where / f"{args.run}-k{k}-kineto"
            bigtrace.kineto_only(both, alone)
            for label, src, in_mb in (("ET+Kineto", both, made.json_bytes / 1e6),
                                      ("Kineto alone", alone, made.kineto_bytes / 1e6)):
                floor_cpu, floor_rss = floor(sorted(src.glob("*.json.gz")))
                print(row(f"K={k} {label}", in_mb, 0, floor_cpu, floor_cpu, floor_rss) + "  (gunzip: the floor)")
                out = Path(tmp) / "out" / f"{label}-{k}"
                cpu, rss, nodes = convert(REPO, src, out)
                print(row("  converted", in_mb, nodes, cpu, floor_cpu, rss))
                if label == "ET+Kineto":
                    if single is None and k == 1:
                        single = nodes
                    elif single is not None and nodes != made.expected_nodes(single):
                        print(f"  !! {nodes:,} nodes, expected {made.expected_nodes(single):,}")
                        ok = False
                if args.compare_with:
                    ref = Path(tmp) / "ref" / f"{label}-{k}"
                    ref_cpu, ref_rss, _ = convert(args.compare_with, src, ref)
                    same = same_outputs(out, ref)
                    ok = ok and same
                    print(row("  reference", in_mb, nodes, ref_cpu, floor_cpu, ref_rss) +
                          f"  .et {'identical' if same else 'DIFFERENT'}")
    print(f"targets: ET+Kineto CPU <= {FLOOR_TARGET}x the floor and peak < {RSS_TARGET_MB} MB at 882 MB of JSON;"
          " Kineto alone no slower per MB than ET+Kineto")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
