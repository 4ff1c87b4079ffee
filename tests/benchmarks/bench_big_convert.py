"""Benchmark: converting production-size traces, against the same run's gunzip time as the floor.

Run it as a script (pytest does not collect it):

    .venv/bin/python tests/benchmarks/bench_big_convert.py [--k 1 4 8 | --json-mb MB]
        [--run gpt ... | --all-runs] [--keep DIR] [--compare-with CHECKOUT]

Inputs: one rank of a shipped GPU run (datasets/gpu-h200/<run> or datasets/<dataset>/<run>: its
execution trace and its Kineto trace) repeated K times into one longer, consistent recording
(bigtrace.py: node ids, record-function ids, External ids, correlations, tensor and storage ids
and profiler step numbers shifted per repeat, Kineto times shifted by the window's length),
gzip'd like the shipped files. For each K, in fresh child processes whose CPU time (user + sys)
and peak RSS come from os.wait4:
- floor: `gzip -dc` of the same files (the least any reader of them must spend);
- ET+Kineto: `chakra convert` of the folder;
- Kineto alone: `chakra convert` of a folder holding the Kineto trace only.
Printed per K: JSON MB, nodes out, CPU s, MB of JSON per CPU s, CPU time / floor, peak RSS.
When K = 1 comes first in --k, the nodes out of each larger K are checked against K times the
single recording's, less what a recording has once (the process-group node; roots are dropped
anyway); a mismatch exits 1.

--json-mb MB picks K per run so that its JSON is about MB (from one recording's size);
--all-runs repeats every shipped single-rank GPU run, so a model unlike `gpt` is measured too.
The end gives each run's ratio to the floor and peak against issue 40's targets.

--compare-with CHECKOUT: convert every trace again with another checkout of the project (its
code, built in place, run from its folder by this checkout's interpreter, so that both run with
the same libraries; e.g. main) and check the .et files are byte-identical (exit 1 if not); its
times are printed beside. Targets (issue 40): ET+Kineto CPU at most 2.5x the floor, peak RSS under
750 MB on an 882 MB trace (K = 37 of gpt); issue 36: Kineto alone no slower per MB than
ET+Kineto was when that issue was filed (36-42 MB per CPU s).
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
DATASETS = REPO / "datasets"
FLOOR_TARGET, RSS_TARGET_MB = 2.5, 750
ISSUE36_MB_PER_S = 40  # ET+Kineto per CPU s when issue 36 was filed (issue 40's table: 36-42)


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


def run_folder(run: str) -> Path:
    """A run named as DATASET/RUN under datasets/, or RUN alone for datasets/gpu-h200/RUN."""
    folder = DATASETS / (run if "/" in run else f"gpu-h200/{run}")
    if not (folder / "rank0.et.json.gz").is_file() or not (folder / "rank0.kineto.json.gz").is_file():
        raise SystemExit(f"{folder}: no rank0.et.json.gz and rank0.kineto.json.gz to repeat")
    return folder


def single_rank_runs() -> list[str]:
    """Every shipped GPU run of one rank (DATASET/RUN), for --all-runs."""
    return sorted(f"{p.parent.parent.name}/{p.parent.name}" for p in DATASETS.glob("gpu-h200*/*/rank0.et.json.gz")
                  if not (p.parent / "rank1.et.json.gz").exists())


def repeats_for(source: Path, where: Path, json_mb: float) -> int:
    """K that makes about json_mb of JSON, from the size of one recording."""
    one = make(source, where / f"{source.parent.name}-{source.name}-k1", 1)
    return max(1, round(json_mb * 1e6 / one.json_bytes))


class Summary:
    """Worst ratio to the floor and peak per run, checked against the targets."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.met = True

    def add(self, run: str, k: int, mb: float, ratio: float, rss: float) -> None:
        ok = ratio <= FLOOR_TARGET and rss * 2**20 / 1e6 < RSS_TARGET_MB  # rss in MiB, the target in MB
        self.met = self.met and ok
        self.lines.append(f"{run:40s} K={k:<4d} {mb:7.1f} MB  {ratio:5.2f}x the floor  {rss:5.0f} MiB"
                          f"  {'met' if ok else 'MISSED'}")


def bench_run(run: str, ks: list[int], where: Path, tmp: Path, compare_with: Path | None,
              summary: Summary) -> bool:
    """Convert `run` repeated K times for each K; False when a check fails."""
    source = run_folder(run)
    name = f"{source.parent.name}-{source.name}"
    ok, single = True, None
    for k in ks:
        both = where / f"{name}-k{k}"
        made = make(source, both, k)
        alone = where / f"{name}-k{k}-kineto"
        bigtrace.kineto_only(both, alone)
        for label, src, in_mb in (("ET+Kineto", both, made.json_bytes / 1e6),
                                  ("Kineto alone", alone, made.kineto_bytes / 1e6)):
            floor_cpu, floor_rss = floor(sorted(src.glob("*.json.gz")))
            print(row(f"K={k} {label}", in_mb, 0, floor_cpu, floor_cpu, floor_rss) + "  (gunzip: the floor)")
            out = tmp / "out" / f"{name}-{label}-{k}"
            cpu, rss, nodes = convert(REPO, src, out)
            print(row("  converted", in_mb, nodes, cpu, floor_cpu, rss))
            if label == "ET+Kineto":
                summary.add(run, k, in_mb, cpu / floor_cpu, rss)
                if single is None and k == 1:
                    single = nodes
                elif single is not None and nodes != made.expected_nodes(single):
                    print(f"  !! {nodes:,} nodes, expected {made.expected_nodes(single):,}")
                    ok = False
            if compare_with:
                ref = tmp / "ref" / f"{name}-{label}-{k}"
                ref_cpu, ref_rss, _ = convert(compare_with, src, ref)
                same = same_outputs(out, ref)
                ok = ok and same
                print(row("  reference", in_mb, nodes, ref_cpu, floor_cpu, ref_rss) +
                      f"  .et {'identical' if same else 'DIFFERENT'}")
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--k", type=int, nargs="+", default=[1, 4, 8], help="repeats of the recording (default 1 4 8)")
    parser.add_argument("--json-mb", type=float, metavar="MB",
                        help="instead of --k: per run, the K that makes about MB of JSON")
    parser.add_argument("--run", nargs="+", default=["gpt"],
                        help="runs to repeat: DATASET/RUN under datasets/, or RUN of gpu-h200 (default gpt)")
    parser.add_argument("--all-runs", action="store_true", help="every shipped single-rank GPU run")
    parser.add_argument("--keep", type=Path, help="make the traces here and keep them (reused when present)")
    parser.add_argument("--compare-with", metavar="CHECKOUT", type=Path,
                        help="another checkout of the project: check its .et files are identical")
    args = parser.parse_args()
    runs = single_rank_runs() if args.all_runs else args.run
    ok, summary = True, Summary()
    with tempfile.TemporaryDirectory(prefix="bench-big-") as tmp:
        where = args.keep or Path(tmp)
        print(f"{'K, path':22s} {'JSON MB':>9s} {'nodes':>10s} {'CPU s':>8s} {'MB/CPU s':>8s} {'/floor':>7s} "
              f"{'peak MiB':>9s}")
        for run in runs:
            ks = [repeats_for(run_folder(run), where, args.json_mb)] if args.json_mb else args.k
            print(f"-- {run}")
            ok = bench_run(run, ks, where, Path(tmp), args.compare_with, summary) and ok
    print("\nET+Kineto per run and K:\n" + "\n".join(summary.lines))
    print(f"targets (issue 40): ET+Kineto CPU <= {FLOOR_TARGET}x the floor and peak < {RSS_TARGET_MB} MB at 882 MB "
          f"of JSON: {'met' if summary.met else 'MISSED'}; (issue 36) Kineto alone at least "
          f"{ISSUE36_MB_PER_S} MB per CPU s, the ET+Kineto rate when that issue was filed")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
