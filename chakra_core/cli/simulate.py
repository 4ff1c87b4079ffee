"""`chakra simulate`: ASTRA-sim's analytical model on one ET per NPU."""

from __future__ import annotations

import argparse
import sys

from chakra_core.cli.common import FACTOR_RANGE, EXIT_FINDINGS, EXIT_OK, factor, positive_int, print_json
from chakra_core.errors import ChakraError
from chakra_core.terminal import Progress, console, plain_table

COMMANDS = {
    "simulate": "replay one ET per NPU on an ASTRA-sim network/system model",
}


def _npu_speeds(spec: list[str] | None, network_url: str) -> list[float] | None:
    """--npu-speed 3=0.5 --npu-speed 7=0.8 -> one factor per NPU (1.0 elsewhere)."""
    if not spec:
        return None
    from chakra_core.sim.config import load_network

    speeds = [1.0] * load_network(network_url).npus
    for item in spec:
        npu, _, speed = item.partition("=")
        try:
            speeds[int(npu)] = factor(speed)
        except (ValueError, IndexError, argparse.ArgumentTypeError):
            raise ValueError(f"--npu-speed {item!r}: expected NPU=FACTOR with NPU below {len(speeds)} and FACTOR "
                             f"from {FACTOR_RANGE[0]:g} to {FACTOR_RANGE[1]:g}") from None
    return speeds


def cmd_simulate(args) -> int:
    from chakra_core.cli.simulate_jobs import cmd_simulate_jobs
    from chakra_core.sim.engine import SimulationDeadlock
    from chakra_core.sim.files import simulate_files

    if len(args.workload) > 1 or args.placement is not None:
        args.placement = args.placement or "packed"
        return cmd_simulate_jobs(args)
    if args.start_ns is not None or args.timeline is not None:
        raise ChakraError("--start-ns and --timeline are for several jobs (give --placement for one)")
    args.workload = args.workload[0]
    try:
        with Progress(items=True) as progress:
            result, assumptions = simulate_files(args.workload, args.network, args.system, args.comm_group,
                                                 args.mode, args.traced_npus, args.scaling,
                                                 compute_scale=args.compute_scale, comm_scale=args.comm_scale,
                                                 npu_speed=_npu_speeds(args.npu_speed, args.network),
                                                 share=not args.no_share, progress=progress)
    except SimulationDeadlock as exc:
        if args.json:
            print_json({**exc.partial.to_dict(), "deadlock": {str(k): v for k, v in exc.report.items()}})
        print(f"chakra simulate: {exc}", file=sys.stderr)
        return EXIT_FINDINGS
    if result.finish_ns >= 2**63:  # what no table (int64 ns) can hold: sizes, scales and speeds out of range
        raise ChakraError(f"{args.workload}: the job would finish after {result.finish_ns:.3e} ns, beyond 2**63 ns "
                          "(292 years): check its sizes, the bandwidths and the scales")
    for line in assumptions:
        print(f"what-if: {line}", file=sys.stderr)
    for line in result.notes:
        print(f"note: {line}", file=sys.stderr)
    if args.json:
        print_json({**result.to_dict(), "what_if": assumptions})
        return EXIT_OK
    table = plain_table("NPU", "finish (ns)", "compute (ns)", "host (ns)", "exposed comm (ns)", "idle (ns)",
                        "communication (ns)")
    for npu in result.npus:
        comm = ", ".join(f"{op} {ns:,}" for op, ns in sorted(npu.comm_ns.items())) or "-"
        spent = npu.time_by_category  # adds up to the finish; memory time shows as its own line below
        table.add_row(str(npu.npu), f"{npu.finish_ns:,}", f"{spent['compute']:,}", f"{spent['host']:,}",
                      f"{spent['communication']:,}", f"{spent['idle']:,}", comm)
    out = console()
    out.print(table)
    memory = [n for n in result.npus if n.time_by_category["memory"]]
    if memory:
        out.print("memory (ns): " + ", ".join(f"NPU {n.npu} {n.time_by_category['memory']:,}" for n in memory))
    paths = [n for n in result.npus if n.critical_path is not None]
    if paths:
        out.print(_critical_path_table(paths))
    out.print(f"job finishes at {result.finish_ns:,} ns ({result.mode} network)")
    shared = result.sharing
    if "unshared" in shared:  # what a slow run cost: every NPU simulated instead of a few
        out.print(f"{shared['unshared']}: simulated all {shared['npus']:,} NPUs instead of "
                  f"{shared['shared_would_simulate']:,}")
    elif shared:
        out.print(f"shared simulation: {shared['simulated_npus']:,} of {shared['npus']:,} NPUs simulated "
                  f"(alike along dimension(s) {', '.join(map(str, shared['dimensions']))})")
        if "not_shared" in shared:
            left = shared["not_shared"]
            out.print(f"not shared along dimension(s) {', '.join(map(str, left['dimensions']))} ({left['why']}): "
                      f"{shared['simulated_npus']:,} NPUs simulated instead of {left['shared_would_simulate']:,}")
    return EXIT_OK


def _critical_path_table(npus: list):
    """What held each NPU's critical path (a job with host and device work: sim/criticalpath.py)."""
    from chakra_core.sim.criticalpath import CATEGORIES

    table = plain_table("NPU", *(f"critical path: {c} (ns)" for c in CATEGORIES))
    for npu in npus:
        table.add_row(str(npu.npu), *(f"{npu.critical_path[c]:,}" for c in CATEGORIES))
    return table


def add_parsers(sub) -> None:
    from chakra_core.sim.backends import DEFAULT_MODE, MODES, modes_help

    p = sub.add_parser("simulate", help=COMMANDS["simulate"],
                       description="Simulate <PREFIX>.<npu>.et for every NPU of the network (as ASTRA-sim does) "
                       "with ASTRA-sim's analytical model: network YAML (Ring, FullyConnected, Switch per "
                       "dimension) and system JSON (collective algorithms, chunking, queues, endpoint delay, "
                       "roofline). Prints per-NPU finish, compute and exposed communication times. Exit 1 "
                       "with a report of what each NPU waits for if the job can never finish. With several "
                       "--workload, places the jobs together on the network (--placement) and prints what "
                       "each loses to the others.")
    p.add_argument("--workload", required=True, action="append", metavar="PREFIX",
                   help="files PREFIX.0.et, PREFIX.1.et, ...; repeat it to place several jobs on the network "
                   "together (the same PREFIX twice: two copies of one job)")
    p.add_argument("--placement", metavar="P", help="several jobs: where their ranks go: packed (default), "
                   "interleaved, spread, random:SEED, or FILE.json {\"jobs\": [[npu, ...], ...]}; prints each "
                   "job's finish together and alone, its slowdown and whose traffic it waited behind")
    p.add_argument("--start-ns", metavar="T0,T1,...", help="several jobs: each job's start (ns; default all 0)")
    p.add_argument("--timeline", metavar="OUT.json", help="several jobs: a Perfetto timeline, one process per job")
    p.add_argument("--network", required=True, metavar="NET.yml", help="ASTRA-sim analytical network YAML")
    p.add_argument("--system", required=True, metavar="SYS.json", help="ASTRA-sim system JSON")
    p.add_argument("--comm-group", metavar="FILE", help="ASTRA-sim communicator-group JSON (default: PREFIX.comm_groups.json where it exists)")
    p.add_argument("--mode", choices=MODES, default=DEFAULT_MODE, help=f"the network model: {modes_help()}")
    p.add_argument("--traced-npus", type=positive_int, metavar="N",
                   help="what-if: the workload has files for N NPUs; run it on the network's NPU count "
                   "(assumptions are printed)")
    p.add_argument("--scaling", choices=["weak", "strong"], default="weak",
                   help="what-if: keep each NPU's compute (weak, default) or divide it by M/N (strong)")
    p.add_argument("--compute-scale", type=factor, default=1.0, metavar="X",
                   help="multiply every compute time by X (e.g. 0.5: compute twice as fast)")
    p.add_argument("--comm-scale", type=factor, default=1.0, metavar="X",
                   help="multiply every communication time by X (e.g. 0.5: network twice as fast)")
    p.add_argument("--npu-speed", action="append", metavar="NPU=FACTOR",
                   help="NPU's compute speed factor (0.5: a straggler at half speed); repeatable")
    p.add_argument("--no-share", action="store_true",
                   help="simulate every NPU, even those that run as others do (the same results, at the full "
                   "cost; docs/simulator.md, 'Shared simulation')")
    p.add_argument("--json", action="store_true", help="one JSON document; npus[i].finish_ns per NPU; sharing: "
                   "what a shared run simulated")
    p.set_defaults(run=cmd_simulate)
