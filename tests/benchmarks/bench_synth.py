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

The profile pass (`chakra_core.synth.profile.profile_job`, what fitting runs on every
training job) is timed first on a million-node real rank (the ResNet trace of
datasets/pytorch-et converted and repeated `--real-copies` times, ids shifted) and then on
each sampled job, against the same-run baseline: the per-node implementation it replaced
(a Python walk per node for the first compute descendant of each communication node,
op_class per distinct name), kept below; both must give the identical profile.
`--profile-only` runs the real rank alone (no fitting).
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
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from test_synthesize import _profile_digest as profile_digest  # noqa: E402  (the digest the test pins)


# ------------------------------------------------------------------ the profile pass and its baseline


def baseline_first_compute_descendant(table, comm_rows):
    """The per-node implementation that chakra_core.synth.profile replaced (the baseline)."""
    import numpy as np

    from chakra_core.format.depgraph import to_numpy
    from chakra_core.synth.profile import COMP, _edges

    n = table.num_rows
    ids = to_numpy(table.column("id")).astype(np.uint64)
    order = np.argsort(ids, kind="stable")
    src, dst = _edges(table, ids)  # the same edges the new pass walks; the walk is what it replaced
    by_child = np.argsort(dst, kind="stable")
    offsets = np.searchsorted(dst[by_child], np.arange(n + 1)).tolist()
    parents_of = src[by_child].tolist()
    types = to_numpy(table.column("type"), 0)
    comp_rows = order[types[order] == COMP].tolist()
    visited = bytearray(n)
    first = np.full(n, -1, np.int64)
    for v in comp_rows:
        visited[v] = 1
        vid = int(ids[v])
        stack = [v]
        while stack:
            u = stack.pop()
            for p in parents_of[offsets[u]:offsets[u + 1]]:
                if not visited[p]:
                    visited[p] = 1
                    first[p] = vid
                    stack.append(p)
    return first[comm_rows]


def baseline_op_class_indices(names):
    import numpy as np

    from chakra_core.analysis.stats import OP_CLASS_NAMES, op_class

    return np.array([OP_CLASS_NAMES.index(op_class(s or "")) for s in names.to_pylist()])


def time_profile(job: str, tables, groups, baseline: bool = True, repeats: int = 3) -> dict:
    """profile_job on the tables (best of `repeats`) and, once, with the baseline implementation
    patched in; nodes/s of each and whether the two profiles are identical."""
    from chakra_core.synth import profile as module

    nodes = sum(t.num_rows for t in tables)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        _, prof = module.profile_job(job, tables, groups)
        best = min(best, time.perf_counter() - t0)
    out = {"nodes": nodes, "profile_s": best, "profile_nodes_per_s": nodes / best, "digest": profile_digest(prof)}
    if baseline:
        saved = module._first_compute_descendant, module._op_class_indices
        module._first_compute_descendant, module._op_class_indices = \
            baseline_first_compute_descendant, baseline_op_class_indices
        try:
            t0 = time.perf_counter()
            _, old = module.profile_job(job, tables, groups)
            out["baseline_s"] = time.perf_counter() - t0
        finally:
            module._first_compute_descendant, module._op_class_indices = saved
        out["baseline_nodes_per_s"] = nodes / out["baseline_s"]
        out["identical"] = profile_digest(old) == out["digest"]
    return out


def print_profile(label: str, r: dict) -> None:
    line = (f"profile pass, {label}: {r['nodes']:,} nodes in {r['profile_s']:.2f} s = "
            f"{r['profile_nodes_per_s']:,.0f} nodes/s")
    if "baseline_s" in r:
        line += (f"; baseline (per-node walk) {r['baseline_s']:.2f} s = {r['baseline_nodes_per_s']:,.0f} nodes/s: "
                 f"{r['baseline_s'] / r['profile_s']:.1f}x; profiles {'identical' if r['identical'] else 'DIFFER'}")
    print(line, flush=True)


def real_rank_profile(copies: int, work: Path) -> dict:
    """The profile pass on one real rank of `copies` ResNet copies (runs in its own process)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_et_io import build_real_table

    table, _ = build_real_table(copies, str(work))
    return time_profile("resnet", [table], None)


def _rss_mb(field: str) -> float:
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1]) / 1024
    return 0.0


def fit_fleet(work: Path) -> tuple[str, dict[str, int]]:
    """Writes the fleet under work/, fits, saves the model; returns its path and the cluster of each case."""
    from chakra_core.convert.pytorch.job import convert_job
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
    peak_mb = _rss_mb("VmHWM:") - base_rss
    profile = time_profile("sampled", job.tables, job.comm_groups, repeats=1)
    return {"npus": npus, "operations_per_rank": job.operations, "min_nodes_per_rank": min(per_rank),
            "nodes": job.nodes, "distinct_tables": job.distinct_tables, "sample_s": sample_s, "total_s": total_s,
            "sample_nodes_per_s": job.nodes / sample_s, "nodes_per_s": job.nodes / total_s,
            "bytes": sum(Path(f).stat().st_size for f in files), "peak_mb": peak_mb, "profile": profile}


def _child(*args: str) -> dict | int:
    run = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, check=True)
    return json.loads(run.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--npus", type=int, default=64)
    parser.add_argument("--nodes", type=int, default=100_000, help="at least this many nodes per rank")
    parser.add_argument("--real-copies", type=int, default=70,
                        help="ResNet copies in the real rank of the profile pass (70 = 1,004,290 nodes)")
    parser.add_argument("--profile-only", action="store_true", help="only the profile pass on the real rank")
    parser.add_argument("--_length", help=argparse.SUPPRESS)
    parser.add_argument("--_one", help=argparse.SUPPRESS)
    parser.add_argument("--_real", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args._real:
        print(json.dumps(real_rank_profile(args.real_copies, Path(args._real))))
        return 0
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
        print_profile(f"one real rank ({args.real_copies} ResNet copies)",
                      _child("--real-copies", str(args.real_copies), "--_real", str(work)))
        if args.profile_only:
            return 0
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
            print_profile(f"{case} job ({r['npus']} ranks)", r["profile"])
            shutil.rmtree(out, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
