"""A job on a real torch.distributed runtime: replay (timed) and calibrate (the network model
fitted to measured communication)."""

from __future__ import annotations

import argparse

from chakra_core.cli.common import EXIT_OK, factor, milliseconds, npu_count, positive_int, positive_number, print_json
from chakra_core.terminal import console, plain_table

COMMANDS = {
    "replay": "replay a job on a real torch.distributed runtime and time it",
    "calibrate": "fit the network model to measured communication; write ASTRA-sim configs",
}


def cmd_replay(args) -> int:
    from chakra_core.replay.launch import replay_job
    from chakra_core.format.job import read_comm_groups

    groups = read_comm_groups(args.comm_group) if args.comm_group else None
    result = replay_job(args.workload, groups, iterations=args.iterations, warmup=args.warmup, backend=args.backend,
                        compute=args.compute, timeout_s=args.timeout, compute_scale=args.compute_scale)
    if args.json:
        print_json(result)
        return EXIT_OK
    by_kind: dict[tuple, list[int]] = {}
    for node in result["nodes"]:
        by_kind.setdefault((node["rank"], node["kind"]), []).append(node["median_ns"])
    table = plain_table("rank", "communication", "nodes", "time per iteration (ms)")
    for (rank, kind), times in sorted(by_kind.items()):
        table.add_row(str(rank), kind, str(len(times)), f"{sum(times) / 1e6:,.3f}")
    out = console()
    out.print(table)
    iterations = ", ".join(f"{ns / 1e6:,.3f}" for ns in result["iterations_ns"])
    recorded = result["recorded_ns"]
    compared = "" if not recorded else (f"; the trace recorded {recorded / 1e6:,.3f} ms "
                                        f"({result['median_ns'] / recorded - 1:+.1%})")
    out.print(f"{result['ranks']} ranks, iterations (ms): {iterations}; median {result['median_ns'] / 1e6:,.3f} ms"
              + compared)
    return EXIT_OK


def cmd_calibrate(args) -> int:
    from chakra_core.format.job import Job
    from chakra_core.replay.calibrate import fit_per_kind, measure, samples_from_jobs, write_calibration

    jobs = [(prefix, Job.read(prefix, comm_groups=args.comm_group)) for prefix in args.workloads]
    samples = samples_from_jobs([job for _, job in jobs])
    if args.measure:
        samples += measure(args.npus, kinds=tuple(args.kinds.split(",")))
    result = _fit_network(samples, jobs)
    result["per_kind"] = fit_per_kind(samples)
    _fit_time(args, jobs, result)
    paths = write_calibration(args.out, args.npus, result)
    if args.json:
        print_json({**result, **paths})
        return EXIT_OK
    _print_calibration(args, result, paths)
    return EXIT_OK


def _fit_network(samples: list[tuple], jobs: list) -> dict:
    """The fitted ring; with no collectives to fit but GPU jobs whose host model is to be fitted
    (one-GPU jobs), ASTRA-sim's reference ring, said as such."""
    from chakra_core.replay.calibrate import CalibrationError, fit
    from chakra_core.replay.hostfit import host_model_jobs
    from chakra_core.sim import reference

    try:
        return fit(samples)
    except CalibrationError:
        if not host_model_jobs(jobs):
            raise
        return {"latency_ns": reference.LATENCY_NS, "bandwidth_gbps": reference.BANDWIDTH_GBPS, "samples": [],
                "median_abs_error": None, "network": "reference (no collectives to fit)"}


def _fit_time(args, jobs: list, result: dict) -> None:
    """The host-overhead model for GPU jobs with unprofiled steps; else, as before, the compute
    scale of the first job (CPU runs, where all compute is host time)."""
    from chakra_core.replay.calibrate import calibrated_system, compute_scale, unprofiled_steps_of
    from chakra_core.replay.hostfit import device_timing_of, fit_host_overhead, host_model_jobs, probe_of
    from chakra_core.replay.profcost import probe_terms, read_probe
    from chakra_core.sim.reference import reference_network

    timed = host_model_jobs(jobs)
    if timed and args.measured_ms is None:
        prefixes = [prefix for prefix, _ in timed]
        timing = device_timing_of(prefixes)
        result["device_timing"] = timing.model_dump() if timing else None
        probe = probe_terms(read_probe(args.probe)) if args.probe else probe_of(prefixes)
        system = calibrated_system(device_timing=result["device_timing"])
        result["host_overhead"] = fit_host_overhead(
            timed, lambda npus: reference_network(npus, result["bandwidth_gbps"], result["latency_ns"]), system, probe)
    elif args.measured_ms is not None:
        if not args.workloads:
            raise ValueError("--measured-ms needs a job (PREFIX) whose traces it measured")
        result["compute_scale"] = compute_scale(args.workloads[0], args.measured_ms * 1e6)
    elif args.workloads and unprofiled_steps_of(args.workloads[0]):
        result["compute_scale"] = compute_scale(args.workloads[0])


def _print_calibration(args, result: dict, paths: dict) -> None:
    if result["samples"]:
        print(f"fitted on {len(result['samples'])} measurement(s): latency {result['latency_ns']:,.0f} ns, "
              f"bandwidth {result['bandwidth_gbps']:,.3f} GB/s (1 GB = 2^30 B); median error "
              f"{result['median_abs_error']:.1%}")
    else:
        print(f"no collectives to fit: the network is a ring of {result['bandwidth_gbps']:g} GB/s links with "
              f"{result['latency_ns']:g} ns latency (ASTRA-sim's example)")
    for kind, alone in result["per_kind"].items():
        print(f"  {kind} alone: latency {alone['latency_ns']:,.0f} ns, bandwidth {alone['bandwidth_gbps']:,.3f} GB/s, "
              f"median error {alone['median_abs_error']:.1%}")
    if "host_overhead" in result:
        model = result["host_overhead"]
        if model["probe"]:
            print(f"host time without the profiler: {model['op_ns'] / 1e3:,.2f} us per operator + "
                  f"{model['launch_ns'] / 1e3:,.2f} us per launch call + {model['scale']:.3f} x the recorded time beyond "
                  f"{model['recorded_op_ns'] / 1e3:,.2f} us + {model['recorded_input_ns'] / 1e3:,.2f} us per input + "
                  f"{model['recorded_launch_ns'] / 1e3:,.2f} us per launch + "
                  f"{model['recorded_child_ns'] / 1e3:,.2f} us per operator inside (the probe's; fitted on "
                  f"{len(model['jobs'])} job(s), median error {model['median_abs_error']:.1%}):")
        else:
            print(f"host time without the profiler: {model['scale']:.3f} x recorded + {model['launch_ns'] / 1e3:,.2f} us "
                  f"per launch (fitted on {len(model['jobs'])} job(s), median error {model['median_abs_error']:.1%}):")
        for row in model["jobs"]:
            print(f"  {row['prefix']}: measured {row['measured_ns'] / 1e6:,.3f} ms, simulated "
                  f"{row['simulated_ns'] / 1e6:,.3f} ms ({row['relative_error']:+.1%}); as recorded "
                  f"{row['as_recorded_ns'] / 1e6:,.3f} ms")
            if row["steps_note"]:
                print(f"    {row['steps_note']}")
    if result.get("device_timing"):
        timing = result["device_timing"]
        print(f"device timing measured in the traces: kernels start {timing['launch_latency_ns'] / 1e3:,.2f} us after "
              f"their launch, {timing['kernel_gap_ns'] / 1e3:,.2f} us after the kernel before them")
    if "compute_scale" in result:
        print(f"compute ran {result['compute_scale']:.3f}x its recorded time: simulate and replay with "
              f"--compute-scale {result['compute_scale']:.3f}")
    print(f"wrote {paths['network']}, {paths['system']} (for {args.npus} NPUs) and {paths['calibration']}")


def _kinds(text: str) -> str:
    from chakra_core.replay.calibrate import FITTED

    unknown = [kind for kind in text.split(",") if kind not in FITTED]
    if unknown:
        raise argparse.ArgumentTypeError(f"{', '.join(unknown)}: expected some of {', '.join(FITTED)}")
    return text


def add_parsers(sub) -> None:
    p = sub.add_parser("replay", help=COMMANDS["replay"],
                       description="Run one process per rank (torch.distributed: gloo on CPUs, nccl on GPUs), each "
                       "walking its <PREFIX>.<rank>.et in dependency order: every collective and send/recv with its "
                       "recorded size and process group, compute nodes for their recorded duration (sleep or spin; "
                       "none: skipped, to time communication alone). Prints the iteration times (the slowest rank's), "
                       "their median against the time the trace itself recorded, and communication time per kind "
                       "and rank; --json gives every communication node. Needs the torch extra.")
    p.add_argument("workload", metavar="PREFIX", help="files PREFIX.0.et, PREFIX.1.et, ...")
    p.add_argument("--comm-group", metavar="FILE",
                   help="ASTRA-sim communicator-group JSON (default: PREFIX.comm_groups.json where it exists)")
    p.add_argument("--iterations", type=positive_int, default=3, metavar="N", help="timed iterations (default 3)")
    p.add_argument("--warmup", type=int, default=1, metavar="W", help="untimed iterations first (default 1)")
    p.add_argument("--backend", choices=["gloo", "nccl"], default="gloo", help="torch.distributed backend")
    p.add_argument("--compute", choices=["sleep", "spin", "none"], default="sleep",
                   help="how compute nodes take their recorded time (default sleep)")
    p.add_argument("--compute-scale", type=factor, default=1.0, metavar="X",
                   help="multiply every compute duration by X (the profiler's cost: chakra calibrate --measured-ms)")
    p.add_argument("--timeout", type=positive_number, default=60.0, metavar="S",
                   help="seconds a rank may wait for its peers before the replay fails (default 60)")
    p.add_argument("--json", action="store_true", help="one JSON document with every communication node")
    p.set_defaults(run=cmd_replay)

    p = sub.add_parser("calibrate", help=COMMANDS["calibrate"],
                       description="Fit latency and bandwidth of a ring network to measured collectives: the linked "
                       "durations in the given jobs' traces (PREFIX.<rank>.et) and, with --measure, a sweep of "
                       "all-reduce from 1 KiB to 64 MiB run here on torch.distributed (gloo). Writes "
                       "DIR/network.yml and DIR/system.json for N NPUs, which chakra simulate takes as they are, and "
                       "DIR/calibration.json with the fit and every sample's residual.")
    p.add_argument("workloads", nargs="*", metavar="PREFIX", help="jobs whose traces carry measured durations")
    p.add_argument("--npus", type=npu_count, required=True, metavar="N", help="NPUs of the network to write")
    p.add_argument("-o", "--out", required=True, metavar="DIR", help="output folder")
    p.add_argument("--comm-group", metavar="FILE", help="communicator groups (default PREFIX.comm_groups.json)")
    p.add_argument("--measure", action="store_true", help="also measure a collective sweep on N gloo ranks here")
    p.add_argument("--kinds", default="all_reduce", metavar="K[,K...]", type=_kinds,
                   help="collectives the sweep measures: all_reduce, all_gather, all_to_all (default all_reduce;"
                   " calibration.json and the output give each one's own fit beside the joint one)")
    p.add_argument("--measured-ms", type=milliseconds, metavar="MS",
                   help="the first job's recorded steps measured with the profiler off: gives the compute scale "
                   "(default: the unprofiled steps its conversion found beside the traces, where there are)")
    p.add_argument("--probe", metavar="FILE",
                   help="profiler_cost.json of the machine the jobs were recorded on (tools/profcost.py); default: "
                        "the one the jobs' conversion reports carry, if any")
    p.add_argument("--json", action="store_true", help="print the fit as JSON")
    p.set_defaults(run=cmd_calibrate)
