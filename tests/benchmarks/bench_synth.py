"""Benchmark: synthesis throughput (synthetic nodes per second) and peak memory of `chakra_core.synth`.

    .venv/bin/python tests/benchmarks/bench_synth.py [--npus 64] [--nodes 100000]

Fits the synthesizer once on a small fleet (the 8 real gloo runs of datasets/pytorch-gloo,
converted, and 6 jobs of chakra_core.generate.workloads: MLP data parallel and transformer
tensor x ZeRO data parallel at 4, 8 and 16 NPUs), then, each case in a fresh process,
samples one job of NPUS NPUs with at least NODES nodes on every rank (its operations per
rank set to reach them) and writes it as .et files. Printed per case: nodes per second over
all ranks (sampling, and sampling + writing), and peak RSS over the imports and the loaded
model (VmHWM minus VmRSS before sampling).

Cases:
- lockstep: the MLP data-parallel cluster; every rank runs the same nodes, so one table is
  built, encoded once and copied to the other ranks' files;
- distinct ranks: the cluster of the real gloo transformer runs; every rank has its own
  compute noise and broadcast times, so NPUS tables are built and encoded.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
REAL = REPO / "datasets" / "pytorch-gloo"
CASES = {"lockstep": "mlp-dp", "distinct ranks": "transformer_ddp"}


def _rss_mb(field: str) -> float:
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1]) / 1024
    return 0.0


def fit_fleet(work: Path) -> tuple[str, dict[str, int]]:
    """Writes the fleet under work/, fits, saves the model; returns its path and the cluster of each case."""
    from chakra_core.convert.job import convert_job
    from chakra_core.generate.workloads import generate
    from chakra_core.synth.model import save_model
    from chakra_core.synth.synthesize import fit, load_training

    fleet = work / "fleet"
    for run in sorted(p for p in REAL.iterdir() if p.is_dir()):
        convert_job(str(run), str(fleet / run.name), run.name)
    for name, (workload, options) in {"mlp-dp": ("mlp", {"parallelism": "dp"}),
                                      "transformer-tp": ("transformer", {"tp": 2, "micro_batches": 2})}.items():
        for npus in (4, 8, 16):
            generate(workload, npus, steps=2, **options).write(str(fleet / f"{name}-n{npus}"), f"{name}-n{npus}")
    fitted = fit(load_training([str(fleet)]))
    path = str(work / "model.json")
    save_model(fitted.model, path)
    clusters = {case: next(c for job, c in fitted.cluster_of.items() if job.startswith(prefix))
                for case, prefix in CASES.items()}
    return path, clusters


def find_length(model_path: str, cluster: int, npus: int, nodes: int) -> int:
    """Operations per rank that give every rank at least `nodes` nodes (runs in its own process)."""
    from chakra_core.synth.model import load_model
    from chakra_core.synth.sample import sample_job

    model = load_model(model_path)
    length = 64
    while True:
        fewest = min(t.num_rows for t in sample_job(model, npus, seed=2, cluster=cluster, length=length).tables)
        if fewest >= nodes:
            return length
        length = math.ceil(length * nodes / fewest * 1.05)


def run_one(model_path: str, cluster: int, npus: int, length: int, out: str) -> dict:
    """Samples and writes one job (runs in its own process, so that its peak memory is its own)."""
    from chakra_core.synth.model import load_model
    from chakra_core.synth.sample import sample_job, write_sampled_job

    model = load_model(model_path)
    base_rss = _rss_mb("VmRSS:")
    t0 = time.perf_counter()
    job = sample_job(model, npus, seed=2, cluster=cluster, length=length)
    sample_s = time.perf_counter() - t0
    files = write_sampled_job(job, out, "bench")
    total_s = time.perf_counter() - t0
    per_rank = [t.num_rows for t in job.tables]
    return {"npus": npus, "operations_per_rank": job.operations, "min_nodes_per_rank": min(per_rank),
            "nodes": job.nodes, "distinct_tables": job.distinct_tables, "sample_s": sample_s, "total_s": total_s,
            "sample_nodes_per_s": job.nodes / sample_s, "nodes_per_s": job.nodes / total_s,
            "bytes": sum(Path(f).stat().st_size for f in files), "peak_mb": _rss_mb("VmHWM:") - base_rss}


def _child(*args: str) -> dict | int:
    run = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, check=True)
    return json.loads(run.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--npus", type=int, default=64)
    parser.add_argument("--nodes", type=int, default=100_000, help="at least this many nodes per rank")
    parser.add_argument("--_length", help=argparse.SUPPRESS)
    parser.add_argument("--_one", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args._length:
        model_path, cluster = args._length.split("|")
        print(json.dumps(find_length(model_path, int(cluster), args.npus, args.nodes)))
        return 0
    if args._one:
        model_path, cluster, length, out = args._one.split("|")
        print(json.dumps(run_one(model_path, int(cluster), args.npus, int(length), out)))
        return 0
    work = Path(tempfile.mkdtemp(prefix="bench-synth-"))
    try:
        t0 = time.perf_counter()
        model_path, clusters = fit_fleet(work)
        print(f"fitted on the fleet in {time.perf_counter() - t0:.1f} s (convert, validate, simulate, fit)", flush=True)
        for case, cluster in clusters.items():
            out = work / case.replace(" ", "-")
            size = ["--npus", str(args.npus), "--nodes", str(args.nodes)]
            length = _child(*size, "--_length", f"{model_path}|{cluster}")
            r = _child(*size, "--_one", f"{model_path}|{cluster}|{length}|{out}")
            print(f"{case}: {r['npus']} NPUs x >= {r['min_nodes_per_rank']:,} nodes ({r['nodes']:,} in all, "
                  f"{r['operations_per_rank']:,} operations per rank, {r['distinct_tables']} distinct rank tables): "
                  f"sampled in {r['sample_s']:.2f} s ({r['sample_nodes_per_s']:,.0f} nodes/s), sampled and written "
                  f"in {r['total_s']:.2f} s ({r['nodes_per_s']:,.0f} nodes/s, {r['bytes'] / 2**20:,.0f} MiB of .et); "
                  f"peak {r['peak_mb']:,.0f} MB over the imports", flush=True)
            shutil.rmtree(out, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
