"""Benchmark: how many bytes the nightly job's per-job task reads, against the bytes of its input.

    .venv/bin/python tests/benchmarks/bench_ingest_reads.py [--copies-of-real 1]

Writes a day's drop with tools/make_drop.py (recorded gloo and GPU jobs, generated jobs, other
formats, corrupt files), then runs pipeline.nightly.jobs.process_job on every job, one after the other
in this process, twice: into a fresh warehouse (every job converted), then again into the same
one (every job found unchanged and reused). Every file the library opens goes through
chakra_core.inputs.open_raw; for this count its local files are opened without a file number,
so that what a reader would map it streams, and every byte read is counted, whether of an input,
a staged output read back or an earlier run's output. Prints, per pass, the bytes read from the
drop and from the warehouse against the bytes of the jobs' input files, with the same-run
baseline of hashing every input once (the least a pass can read of the drop). A drop ratio near
1 means each input is read once. Exit status 0 whatever the figures.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

DATE = "2026-11-20"


class Counted:
    """A local file whose reads are counted by where the file lies; no fileno, so nothing is mapped."""

    read_by_root: dict[str, int] = {}

    def __init__(self, f, root: str):
        self._f, self._root = f, root

    def read(self, size=-1):
        data = self._f.read(size)
        Counted.read_by_root[self._root] = Counted.read_by_root.get(self._root, 0) + len(data)
        return data

    read1 = read

    def readinto(self, buffer):
        n = self._f.readinto(buffer)
        Counted.read_by_root[self._root] = Counted.read_by_root.get(self._root, 0) + n
        return n

    def __getattr__(self, name):
        if name == "fileno":
            raise AttributeError(name)
        return getattr(self._f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._f.close()


def count_reads(roots: list[str]) -> None:
    import chakra_core.inputs as inputs

    opened = inputs._open_local  # noqa: SLF001 - the benchmark counts what the library's one opener reads

    def counted(path: str, url: str):
        return Counted(opened(path, url), next((r for r in roots if path.startswith(r)), "elsewhere"))

    inputs._open_local = counted


def measured(label: str, work, roots: dict[str, str], input_bytes: int) -> None:
    Counted.read_by_root.clear()
    start = time.perf_counter()
    work()
    seconds = time.perf_counter() - start
    figures = "  ".join(f"{name} {Counted.read_by_root.get(root, 0) / input_bytes:5.2f} x" for name, root in roots.items())
    print(f"{label:<36} {figures}  (of the input's bytes)  {seconds:5.1f} s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--copies-of-real", type=int, default=1)
    args = parser.parse_args()
    from chakra_core.inputs import sha256
    from pipeline.nightly.drop import list_day
    from pipeline.nightly.jobs import process_job
    from tools.make_drop import make_drop

    with tempfile.TemporaryDirectory(prefix="bench-reads-") as tmp:
        roots = {"drop": str(Path(tmp, "drop")), "warehouse": str(Path(tmp, "wh"))}
        source, warehouse = Path(roots["drop"]).as_uri(), Path(roots["warehouse"]).as_uri()
        make_drop(source, DATE, copies_of_real=args.copies_of_real, other_formats=True)
        jobs, _ = list_day(source, DATE)
        files = [f for job in jobs if job.problem is None for f in job.files if f.problem is None]
        input_bytes = sum(f.bytes for f in files)
        print(f"{len(jobs)} jobs, {len(files)} input files, {input_bytes / 2**20:.1f} MiB")
        count_reads(list(roots.values()))

        def run_jobs() -> None:
            for job in jobs:
                process_job(job, DATE, warehouse, "bench")

        measured("baseline: hash each input once", lambda: [sha256(f.url) for f in files], roots, input_bytes)
        measured("process_job, first run (convert)", run_jobs, roots, input_bytes)
        measured("process_job, re-run (reuse)", run_jobs, roots, input_bytes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
