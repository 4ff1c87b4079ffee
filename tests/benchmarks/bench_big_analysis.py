"""Benchmark: `chakra stats` and `chakra simulate` of big converted traces, peak memory and CPU.

    .venv/bin/python tests/benchmarks/bench_big_analysis.py [--k 1 4 16 64] [--keep DIR [--reuse]]

Converts the shipped H200 `gpt` run (datasets/gpu-h200/gpt: one rank's ET and Kineto, 18,813
nodes) with `chakra convert`, then makes longer traces of it with the project's ET writer: the
converted graph repeated K times (`repeat_trace`), each copy's ids shifted past the one before,
its dependencies kept within the copy, a control dependency from copy k's last node to copy
k+1's first, its recorded times shifted by the run's span and its `ProfilerStep#N` steps
renumbered, so that the result is one consistent, K times longer profiled window. K = 64 gives
about 1.2 M nodes, the size of one rank of an 882 MB-JSON trace.

For each K it runs, each as its own process: `chakra info` of the file (the same-run baseline:
the interpreter, the imports and the file's metadata), `chakra stats` of it (the device section
included: the device analysis as recorded and as predicted, a simulation) and `chakra simulate`
of it on the reference analytical system (a Ring of one NPU, ASTRA-sim's Ring_4chunks.json).
Each process reports its own peak RSS (VmHWM, which exec resets; ru_maxrss of a child would
carry its parent's) and CPU seconds (user + system). Prints one line per K and command, and the
verdict against the target: stats and simulate each under 600 MB at about 1.2 M nodes.
Exit status 0 (a report).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))  # tests/: repeated_trace
GPT = ROOT / "datasets" / "gpu-h200" / "gpt"
SYSTEM = ROOT / "datasets" / "astra-sim-reference" / "configs" / "Ring_4chunks.json"
TARGET_MB = 600

# Runs the chakra command given in argv in this process, then prints its VmHWM and CPU time.
MEASURED = """
import json, resource, sys
from chakra_core.cli import main
try:
    status = main(sys.argv[1:])
finally:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    with open("/proc/self/status") as f:
        hwm = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
    print(json.dumps({"peak_mb": hwm / 1024, "cpu_s": usage.ru_utime + usage.ru_stime}), file=sys.stderr)
sys.exit(status)
"""


def _nodes(url: str) -> int:
    from chakra_core.format.etfile import ETReader

    with ETReader(url) as reader:
        return sum(batch.num_rows for batch in reader.iter_batches())


def _network(tmp: Path) -> Path:
    path = tmp / "ring_1npu.yml"
    path.write_text("topology: [ Ring ]\nnpus_count: [ 1 ]\nbandwidth: [ 50.0 ]\nlatency: [ 500.0 ]\n")
    return path


def measure(*argv: str) -> dict:
    """Peak RSS (MB) and CPU seconds of one chakra command in a process of its own."""
    done = subprocess.run([sys.executable, "-c", MEASURED, *argv], capture_output=True, text=True, cwd=ROOT)
    if done.returncode:
        raise SystemExit(f"chakra {' '.join(argv)} failed ({done.returncode}): {done.stderr[-2000:]}")
    return json.loads(done.stderr.strip().splitlines()[-1])


def main() -> None:
    from repeated_trace import repeat_trace

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--k", type=int, nargs="+", default=[1, 4, 16, 64])
    parser.add_argument("--keep", metavar="DIR", help="write the traces here and keep them (default: a temporary folder)")
    parser.add_argument("--reuse", action="store_true", help="with --keep: use the traces already there")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        tmp = Path(args.keep or scratch)
        tmp.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "chakra_core.cli", "convert", str(GPT), "-o", str(tmp / "gpt"),
                        "--prefix", "gpt"], check=True, capture_output=True, cwd=ROOT)
        network = _network(tmp)
        for k in args.k:
            prefix = tmp / f"gpt_x{k}"
            nodes = repeat_trace(str(tmp / "gpt" / "gpt.0.et"), f"{prefix}.0.et", k) if not args.reuse \
                or not Path(f"{prefix}.0.et").exists() else _nodes(f"{prefix}.0.et")
            (tmp / f"gpt_x{k}.comm_groups.json").write_text((tmp / "gpt" / "gpt.comm_groups.json").read_text())
            size = Path(f"{prefix}.0.et").stat().st_size
            base = measure("info", f"{prefix}.0.et")
            runs = {"stats": measure("stats", f"{prefix}.0.et"),
                    "simulate": measure("simulate", "--workload", str(prefix), "--network", str(network),
                                        "--system", str(SYSTEM))}
            print(f"K={k}: {nodes:,} nodes, {size / 1e6:,.0f} MB .et; baseline chakra info {base['peak_mb']:,.0f} MB, "
                  f"{base['cpu_s']:.2f} s CPU")
            for name, run in runs.items():
                verdict = f" [{'PASS' if run['peak_mb'] < TARGET_MB else 'FAIL'} < {TARGET_MB} MB]" if nodes > 1e6 else ""
                print(f"  chakra {name}: peak {run['peak_mb']:,.0f} MB ({run['peak_mb'] / base['peak_mb']:.1f}x the "
                      f"baseline), {run['cpu_s']:.2f} s CPU ({run['cpu_s'] - base['cpu_s']:.2f} s over it){verdict}",
                      flush=True)


if __name__ == "__main__":
    main()
