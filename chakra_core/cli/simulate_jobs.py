"""`chakra simulate` with several --workload (or a --placement): jobs placed together on one
network (sim/colocation.py), each job's finish together and alone, and who it waited behind."""

from __future__ import annotations

import sys

from chakra_core.cli.common import EXIT_FINDINGS, EXIT_OK, print_json
from chakra_core.errors import ChakraError
from chakra_core.terminal import console, plain_table

UNSHARED_NOTE = "the {mode} network shares nothing between messages: every job runs as alone (slowdown 1)"


def refused_options(args) -> list[str]:
    """The single-job options a run of several jobs does not take."""
    given = {"--traced-npus": args.traced_npus, "--npu-speed": args.npu_speed, "--comm-group": args.comm_group}
    return [name for name, value in given.items() if value]


def cmd_simulate_jobs(args) -> int:
    from chakra_core.sim.colocation import colocate
    from chakra_core.sim.config import load_network, load_system
    from chakra_core.sim.errors import SimulationDeadlock
    from chakra_core.sim.files import read_placed
    from chakra_core.sim.placement import start_offsets

    refused = refused_options(args)
    if refused:
        raise ChakraError(f"{', '.join(refused)}: not taken with several jobs (each job's groups are read beside "
                          "its files)")
    network, system = load_network(args.network), load_system(args.system)
    placed = read_placed(args.workload, args.placement, start_offsets(args.start_ns, len(args.workload)),
                         network, system, timeline=args.timeline is not None)
    try:
        outcome = colocate(placed, network, system, mode=args.mode, share=not args.no_share,
                           record_timeline=args.timeline is not None, compute_scale=args.compute_scale,
                           comm_scale=args.comm_scale)
    except SimulationDeadlock as exc:  # the jobs together (or one alone) can never finish
        print(f"chakra simulate: {exc}", file=sys.stderr)
        return EXIT_FINDINGS
    if args.timeline is not None:
        from chakra_core.viz.timeline import timeline_from_jobs, write_timeline

        write_timeline(timeline_from_jobs(outcome.together, placed), args.timeline)
        print(f"timeline: one process per job -> {args.timeline}", file=sys.stderr)
    if args.json:
        print_json({**outcome.to_dict(), "placement": args.placement})
        return EXIT_OK
    _print(outcome, args.placement)
    return EXIT_OK


def _print(outcome, placement: str) -> None:
    out = console()
    table = plain_table("job", "workload", "NPUs", "start (ns)", "finish (ns)", "alone (ns)", "slowdown",
                        "waited behind (ns, bytes)")
    for i, job in enumerate(outcome.jobs):
        behind = ", ".join(f"{'itself' if b['job'] == i else 'job ' + str(b['job'])} {b['waited_ns']:,} ns "
                           f"{b['bytes']:,} B" for b in job.behind) or "-"
        table.add_row(str(i), job.workload, _npu_ranges(job.npus), f"{job.start_ns:,}", f"{job.finish_ns:,}",
                      f"{job.alone_finish_ns:,}", f"{job.slowdown:.3f}", behind)
    out.print(table)
    for i, job in enumerate(outcome.jobs):
        if job.links:
            out.print(f"job {i} waited longest on: " + "; ".join(f"{link['link']} {link['waited_ns']:,} ns"
                                                                 for link in job.links))
    if not outcome.shares_links:
        out.print(UNSHARED_NOTE.format(mode=outcome.mode))
    shared = outcome.together.sharing
    if shared and "unshared" not in shared:
        out.print(f"shared simulation: {shared['simulated_npus']:,} of {shared['npus']:,} NPUs simulated")
    out.print(f"{len(outcome.jobs)} job(s) placed {placement} ({outcome.mode} network); "
              f"{outcome.alone_runs} alone run(s) for their finishes alone")


def _npu_ranges(npus: list[int]) -> str:
    """[0, 1, 2, 5, 7, 8] -> '0-2,5,7-8'."""
    runs: list[list[int]] = []
    for npu in npus:
        if runs and npu == runs[-1][1] + 1:
            runs[-1][1] = npu
        else:
            runs.append([npu, npu])
    text = ",".join(f"{a}-{b}" if a != b else str(a) for a, b in runs)
    return text if len(text) <= 40 else text[:37] + "..."
