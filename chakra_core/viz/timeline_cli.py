"""`chakra timeline`: its parser and its command, over the timeline builders of timeline.py
(a simulation, several jobs placed together, a job as recorded, real traces, or a log)."""

from __future__ import annotations

import sys

from chakra_core.format.job import read_ranks
from chakra_core.viz.timeline import (
    DEFAULT_MAX_FLOWS,
    recorded_timeline,
    timeline_from_jobs,
    timeline_from_log,
    timeline_from_simulation,
    timeline_from_traces,
    write_timeline,
)


def add_timeline_parser(subparsers):
    from chakra_core.sim.backends import DEFAULT_MODE, MODES, modes_help

    p = subparsers.add_parser(
        "timeline", help="write a Perfetto / chrome://tracing timeline (Chrome Trace Event JSON)",
        description="One process per NPU (rank), one thread per track; overlapping events of a track go to "
        "sub-tracks so that Perfetto accepts them. Sources: a simulation (--workload with --network and "
        "--system), a job's converted traces as recorded (--recorded PREFIX, or its files: --trace), or the "
        "reference timeline visualizer's issue/callback log (--log with --npu-frequency). OUT ending in .gz is "
        "gzipped.")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--workload", metavar="PREFIX", action="append",
                        help="simulate PREFIX.0.et, PREFIX.1.et, ...; repeat it for several jobs placed together "
                        "(one process per job)")
    source.add_argument("--recorded", metavar="PREFIX", help="the job as recorded: its converted traces "
                        "PREFIX.0.et, PREFIX.1.et, ... at their start times and durations")
    source.add_argument("--trace", nargs="+", metavar="IN.et", help="one .et file per rank of one job, as recorded")
    source.add_argument("--log", metavar="LOG.csv", help="issue/callback log (chakra_timeline_visualizer input)")
    p.add_argument("--network", metavar="NET.yml", help="ASTRA-sim analytical network YAML (with --workload)")
    p.add_argument("--system", metavar="SYS.json", help="ASTRA-sim system JSON (with --workload)")
    p.add_argument("--comm-group", metavar="FILE", help="ASTRA-sim communicator-group JSON (with --workload)")
    p.add_argument("--mode", choices=MODES, default=DEFAULT_MODE,
                   help=f"the network model (with --workload): {modes_help()}")
    p.add_argument("--placement", metavar="P", help="several jobs (with --workload): packed (default), interleaved, "
                   "spread, random:SEED or FILE.json, as chakra simulate's")
    p.add_argument("--start-ns", metavar="T0,T1,...", help="several jobs: each job's start (ns; default all 0)")
    p.add_argument("--npu-frequency", type=float, metavar="MHZ", help="NPU clock in MHz (with --log)")
    p.add_argument("--max-flows", type=int, default=DEFAULT_MAX_FLOWS, metavar="N",
                   help=f"draw at most N dependency arrows across tracks (default {DEFAULT_MAX_FLOWS})")
    p.add_argument("-o", "--output", required=True, metavar="OUT.json", help="where to write the timeline")
    p.set_defaults(run=cmd_timeline)
    return p


def _jobs_timeline(args) -> int:
    """Several jobs placed together on one network: one process per job (sim/colocation.py)."""
    from chakra_core.sim.colocation import colocate
    from chakra_core.sim.config import load_network, load_system
    from chakra_core.sim.files import read_placed
    from chakra_core.sim.placement import start_offsets

    network, system = load_network(args.network), load_system(args.system)
    placed = read_placed(args.workload, args.placement or "packed", start_offsets(args.start_ns, len(args.workload)),
                         network, system, timeline=True)
    outcome = colocate(placed, network, system, mode=args.mode, record_timeline=True)
    doc = timeline_from_jobs(outcome.together, placed)
    write_timeline(doc, args.output)
    other = doc["otherData"]
    print(f"{other['events']} events, {other['jobs']} jobs, {other['threads']} tracks -> {args.output}")
    return 0


def cmd_timeline(args) -> int:
    status = 0
    if args.workload:
        if not args.network or not args.system:
            print("chakra timeline: --workload needs --network and --system", file=sys.stderr)
            return 2
        if len(args.workload) > 1 or args.placement is not None:
            return _jobs_timeline(args)
        args.workload = args.workload[0]
        from chakra_core.sim.engine import SimulationDeadlock
        from chakra_core.sim.files import simulate_files

        try:
            result, _ = simulate_files(args.workload, args.network, args.system, args.comm_group, mode=args.mode,
                                       record_timeline=True)
        except SimulationDeadlock as exc:
            print(f"chakra timeline: {exc} (writing the partial timeline)", file=sys.stderr)
            result, status = exc.partial, 1
        tables = read_ranks(args.workload, len(result.npus)) if args.max_flows > 0 else None
        doc = timeline_from_simulation(result, tables, args.max_flows)
    elif args.recorded:
        doc = recorded_timeline(args.recorded, max_flows=args.max_flows)
        if not doc["otherData"]["events"]:
            print(f"chakra timeline: {args.recorded}: no node has a recorded start time (a generated or synthetic "
                  "job?); nothing written", file=sys.stderr)
            return 2
    elif args.trace:
        doc = timeline_from_traces(args.trace, args.max_flows)
    else:
        if args.npu_frequency is None:
            print("chakra timeline: --log needs --npu-frequency MHZ", file=sys.stderr)
            return 2
        doc = timeline_from_log(args.log, args.npu_frequency)
    write_timeline(doc, args.output)
    other = doc["otherData"]
    print(f"{other['events']} events, {other['npus']} NPUs, {other['threads']} tracks, "
          f"{other['flows']} flows -> {args.output}")
    return status
