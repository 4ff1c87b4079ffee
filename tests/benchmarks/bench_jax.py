"""JAX runs simulated as recorded (docs/jax.md): per run, the recorded span of its profiled steps
and the simulated finish time, on ASTRA-sim's example ring (50 GB/s, 500 ns) and on a ring
fitted to the runs' own collectives (`chakra calibrate`'s fit, one network for the CPU runtime
of all the runs given), both without a host-overhead model.

    .venv/bin/python tests/benchmarks/bench_jax.py [RUN_FOLDER ...]

Default: the shipped runs of datasets/jax-cpu/ and the held-out runs of datasets/jax-cpu-heldout/.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import pyarrow as pa  # noqa: E402

from chakra_core.convert.jax.run import convert_jax_run  # noqa: E402
from chakra_core.format.job import Job  # noqa: E402
from chakra_core.replay.calibrate import fit, samples_from_jobs, system_json  # noqa: E402
from chakra_core.replay.hostfit import reference_ring  # noqa: E402
from chakra_core.replay.plan import recorded_ns  # noqa: E402
from chakra_core.sim.config import load_system, system_from_document  # noqa: E402
from chakra_core.sim.engine import simulate  # noqa: E402

RUNS = sorted((REPO / "datasets" / "jax-cpu").iterdir()) + sorted((REPO / "datasets" / "jax-cpu-heldout").iterdir())
REFERENCE_SYSTEM = REPO / "datasets" / "astra-sim-reference" / "configs" / "Ring_4chunks.json"


def measure(runs: list[Path]) -> list[dict]:
    """Per run: name, recorded span (the first step's start to the last op's end over every
    device: one clock), simulated on the reference ring and on the fitted ring (ns)."""
    work = Path(tempfile.mkdtemp(prefix="bench-jax-"))
    converted = []
    for run in runs:
        result = convert_jax_run(str(run), str(work / run.name), "job")
        converted.append((run.name, result, Job.read(str(work / run.name / "job"))))
    fitted = fit(samples_from_jobs([job for _, _, job in converted]))
    calibrated = system_from_document("<calibrated>", system_json())
    reference = load_system(str(REFERENCE_SYSTEM))
    rows = []
    for name, result, job in converted:
        network = reference_ring(job.npus, fitted["latency_ns"], fitted["bandwidth_gbps"])
        rows.append({"run": name, "npus": job.npus, "recorded_ns": recorded_ns(pa.concat_tables(job.tables)),
                     "reference_ns": simulate(job, reference_ring(job.npus), reference).finish_ns,
                     "calibrated_ns": simulate(job, network, calibrated).finish_ns,
                     "latency_ns": fitted["latency_ns"], "bandwidth_gbps": fitted["bandwidth_gbps"]})
    return rows


def main(runs: list[Path]) -> None:
    began = time.perf_counter()
    rows = measure(runs)
    print(f"ring fitted to the runs' collectives: {rows[0]['bandwidth_gbps']:.3f} GB/s, "
          f"{rows[0]['latency_ns'] / 1e3:.1f} us latency")
    print(f"{'run':10} {'recorded':>11} {'reference ring':>20} {'fitted ring':>20}")
    for r in rows:
        ref, cal = (r[k] / r["recorded_ns"] - 1 for k in ("reference_ns", "calibrated_ns"))
        print(f"{r['run']:10} {r['recorded_ns'] / 1e6:8.2f} ms {r['reference_ns'] / 1e6:8.2f} ms ({ref:+6.1%})"
              f" {r['calibrated_ns'] / 1e6:8.2f} ms ({cal:+6.1%})")
    print(f"({time.perf_counter() - began:.1f} s)")


if __name__ == "__main__":
    main([Path(a) for a in sys.argv[1:]] or RUNS)
