"""An ad hoc what-if sweep: jobs from anywhere on the systems of a sweep file, on Ray.

    python -m flows.sweep --sweep FILE [--name NAME] [--warehouse URL] [--num-cpus N] [--max-points N]
        [--jobs URL ...] [--date D] [--synthetic MODEL --npus N[,N...] --count K] [--generate SPEC ...]
        [--convert SPEC ...]

Jobs: folders of job folders (`<name>.<rank>.et` + `<name>.comm_groups.json`, local or s3://),
the jobs the nightly flow converted on a day, synthetic jobs sampled from a saved model,
generated ones ('transformer --npus 64 --tp 2', the options of `chakra generate`) and converted
ones ('alexnet.4.graph', 'dlrm.txt --npus 8 --passes 2', the options of `chakra convert`). The sweep
file names systems and grids of ASTRA-sim parameters (docs/sweeps.md). Rows land in
WAREHOUSE/tables/sweep_results/sweep=<name>/ (with --date: .../sweep=<name>/date=<d>/) as
numbered parts; a re-run simulates only the (job, point) pairs not yet there.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

# first: it sets Prefect's environment
from flows.stages import DEFAULT_WAREHOUSE, STORAGE_FAILURES, StageFailed, from_cwd, run_stage
from prefect import flow, get_run_logger  # noqa: E402
from prefect.artifacts import create_progress_artifact, update_progress_artifact  # noqa: E402
from prefect.exceptions import FailedRun  # noqa: E402
from prefect.states import Failed  # noqa: E402

from chakra_core.days import iso_day  # noqa: E402
from chakra_core.errors import ChakraError  # noqa: E402
from pipeline.cluster import start_ray, stopped_by  # noqa: E402
from pipeline.simulation import DEFAULT_SWEEP  # noqa: E402
from pipeline.sweep.file import DEFAULT_MAX_POINTS, load_sweep_file  # noqa: E402
from pipeline.sweep.jobs import Sources  # noqa: E402
from pipeline.sweep.run import plan, run_sweep  # noqa: E402
from pipeline.sweep.table import sweep_folder  # noqa: E402

REPORT_SECONDS = 2.0  # how often a stage's Prefect progress artifact is updated


def _stage(name, step, counts):
    """A stage of the sweep; a sweep that cannot run (a bad job source, too many simulations,
    storage down) fails it with one line, no traceback."""
    return run_stage(name, step, counts, (ChakraError, *STORAGE_FAILURES), log_failure=True)


class _Reported:
    """Progress to the terminal (the callback given) and as the running task's Prefect
    progress artifact, updated every REPORT_SECONDS at most."""

    def __init__(self, terminal=None):
        self.terminal = terminal
        self.artifacts: dict[str, tuple[object, float]] = {}

    def __call__(self, label: str, done: int, total: int) -> None:
        if self.terminal:
            self.terminal(label, done, total)
        percent = 100.0 * done / total if total else 100.0
        if label not in self.artifacts:
            self.artifacts[label] = (create_progress_artifact(percent, description=f"sweep: {label}"), time.monotonic())
        artifact, last = self.artifacts[label]
        if done == total or time.monotonic() - last >= REPORT_SECONDS:
            update_progress_artifact(artifact, percent)
            self.artifacts[label] = (artifact, time.monotonic())


@flow(name="sweep")
def sweep(date: str | None = None, sweep: str | None = None, name: str | None = None,
          warehouse: str = DEFAULT_WAREHOUSE, num_cpus: int | None = None, jobs: list[str] | None = None,
          synthetic: str | None = None, npus: list[int] | None = None, count: int = 0,
          generate: list[str] | None = None, max_points: int = DEFAULT_MAX_POINTS, progress=None,
          convert: list[str] | None = None) -> dict:
    """Simulate the jobs on the sweep's points; returns the summary (docs/sweeps.md).

    Args:
        date: a day the nightly flow processed: its converted jobs (results under date=<d>/)
        sweep: the sweep file; none: pipeline/sweeps/default.yaml
        name: the sweep's name in the table path; none: the file's stem
        warehouse: where the table (and made jobs, under sweeps/<name>/jobs/) go (an fsspec URL)
        num_cpus: CPUs of a local Ray; none: every CPU (ignored on the cluster RAY_ADDRESS names)
        jobs: folders of job folders (fsspec URLs)
        synthetic, npus, count: a synthesizer model file, the NPU counts and jobs per count to sample
        generate: `chakra generate` specs, e.g. "transformer --npus 64 --tp 2"
        convert: `chakra convert` specs of FlexFlow graphs and text workloads, e.g. "dlrm.txt --npus 8"
        max_points: refuse a sweep of more simulations
        progress: a progress callback, for the command line only
    """
    path = sweep or DEFAULT_SWEEP
    name = name or Path(path).stem
    sources = Sources(tuple(jobs or ()), date, warehouse, synthetic, tuple(npus or ()), count, tuple(generate or ()),
                      tuple(convert or ()))
    try:
        sweep_folder(warehouse, name, date)  # a name that is no folder name is refused before anything starts
        grid = load_sweep_file(path, max_points)
    except ChakraError as e:
        get_run_logger().error(str(e))
        return Failed(message=str(e))
    try:
        planned = _stage("plan", lambda: plan(grid, sources, max_points), lambda p: p.describe(grid))
        start_ray(num_cpus)  # only now: a sweep refused above has started nothing
        result = run_sweep(grid, planned, warehouse, name, date, _Reported(progress), _stage)
    except StageFailed as e:
        return Failed(message=str(e))
    ok = result.status.get("ok", 0)
    get_run_logger().info("sweep: %d rows (%d ok), %d already in %s", result.rows, ok, result.skipped, result.folder)
    return {"table": result.parts[0] if result.parts else result.folder, "folder": result.folder,
            "parts": result.parts, "planned": result.planned, "skipped": result.skipped, "rows": result.rows,
            "ok": ok, "status": result.status, "problems": result.problems, "seconds": result.seconds}


def _counts(text: str) -> list[int]:
    try:
        return [int(n) for n in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected N or N,N,..., got {text!r}") from None


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m flows.sweep", description=__doc__.split("\n")[0])
    parser.add_argument("--sweep", required=True, help="sweep file: systems and/or grid (docs/sweeps.md)")
    parser.add_argument("--name", help="the sweep's name in the table path (default: the file's stem)")
    parser.add_argument("--warehouse", default=DEFAULT_WAREHOUSE, type=from_cwd)
    parser.add_argument("--num-cpus", type=int)
    parser.add_argument("--max-points", type=int, default=DEFAULT_MAX_POINTS, metavar="N",
                        help=f"refuse more simulations than this (default {DEFAULT_MAX_POINTS:,})")
    jobs = parser.add_argument_group("jobs (any combination)")
    jobs.add_argument("--jobs", action="append", default=[], metavar="URL", type=from_cwd,
                      help="a folder of job folders (<name>.<rank>.et), local or s3://; repeatable")
    jobs.add_argument("--date", type=iso_day, help="the jobs the nightly flow converted that day, YYYY-MM-DD")
    jobs.add_argument("--synthetic", metavar="MODEL", type=from_cwd,
                      help="sample jobs from this synthesizer model file")
    jobs.add_argument("--npus", type=_counts, default=[], metavar="N[,N...]", help="NPU counts of the synthetic jobs")
    jobs.add_argument("--count", type=int, default=0, metavar="K", help="synthetic jobs per NPU count")
    jobs.add_argument("--generate", action="append", default=[], metavar="SPEC",
                      help="a generated job: 'WORKLOAD --npus N [--option value ...]' (chakra generate); repeatable")
    jobs.add_argument("--convert", action="append", default=[], metavar="SPEC",
                      help="a converted job: 'SRC [--npus N --passes P ...]', a FlexFlow task graph or an ASTRA-sim "
                      "text workload and chakra convert's options; repeatable")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:  # a bad file or name is refused before Prefect and Ray start
        sweep_folder(args.warehouse, args.name or Path(args.sweep).stem, args.date)
        load_sweep_file(args.sweep, args.max_points)
    except ChakraError as e:
        print(f"sweep: {e}", file=sys.stderr)
        return 2
    from chakra_core.terminal import Progress

    try:
        with Progress(items=True) as progress:
            result = sweep(args.date, args.sweep, args.name, args.warehouse, args.num_cpus, args.jobs,
                           args.synthetic, args.npus, args.count, args.generate, args.max_points, progress,
                           args.convert)
    except BaseException as e:
        if stopper := stopped_by(e):  # Ctrl-C, or a stop signal (start_ray's end_on_signals)
            print(f"sweep: stopped by {stopper}; a re-run skips the points already done", file=sys.stderr)
            return 130
        if not isinstance(e, FailedRun):
            raise
        print(f"sweep: {e}", file=sys.stderr)  # a stage's one line
        return 2
    print(f"{result['rows']} simulations ({result['ok']} ok), {result['skipped']} already done -> {result['folder']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
