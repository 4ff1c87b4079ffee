"""Jobs made or chosen for a fleet: generate (a canned workload), synthesize (jobs learnt from a
fleet), select (representatives of a fleet)."""

from __future__ import annotations

import argparse
import json
import sys

from chakra_core.cli.common import EXIT_FINDINGS, EXIT_OK, positive_int, print_json
from chakra_core.errors import ChakraError
from chakra_core.terminal import Progress, console, for_a_person, human_bytes, plain_table

COMMANDS = {
    "generate": "generate a training job (mlp, dlrm, transformer) as one Chakra ET per NPU",
    "synthesize": "fit a generative model on a fleet and write synthetic, obfuscated jobs",
    "select": "choose representative jobs of a fleet, with weights and estimate errors",
}


def cmd_generate(args) -> int:
    from chakra_core.generate.workloads import generate

    # the workload options given (as strings; generate parses them and refuses another workload's)
    options = {key[4:]: value for key, value in vars(args).items() if key.startswith("opt_")}
    try:
        job = generate(args.workload, args.npus, **options)
    except ValueError as exc:  # the generator's refusal of an option's value, said as the command line spells it
        raise WorkloadOptionError(_as_flags(str(exc), args.workload)) from None
    name = args.name or args.workload
    files = job.write(args.out, name)
    summary = {"workload": args.workload, "name": name, **job.summary(), "files": files}
    if args.json:
        print_json(summary)
        return EXIT_OK
    nodes = summary["nodes_per_rank"]
    per_rank = f"{nodes['min']:,}" + (f"-{nodes['max']:,}" if nodes["max"] != nodes["min"] else "")
    print(f"{args.workload} on {job.npus} NPUs: {per_rank} nodes per rank ({nodes['total']:,} in all)")
    for kind, row in summary["communication"].items():
        print(f"  {kind:<15} {row['count']:>7,} nodes  {human_bytes(row['bytes']):>10} (all ranks)")
    groups = summary["comm_groups"]
    limit = 4 if for_a_person() else len(groups)  # a pipe or log gets every group and file
    shown = ", ".join(f"{g}: {members}" for g, members in list(groups.items())[:limit])
    print(f"  communicator groups: {len(groups)}" + (f" ({shown}{', ...' if len(groups) > limit else ''})"
                                                      if groups else " (all collectives over all NPUs)"))
    if len(files) > 1 and for_a_person():
        print(f"  wrote {len(files)} files: {files[0]} ... {files[-1]}")
    else:
        print(f"  wrote {len(files)} file(s):", *files, sep="\n    ")
    return EXIT_OK


class WorkloadOptionError(ChakraError):
    """An option the workload generator refuses."""


def _as_flags(message: str, workload: str) -> str:
    """The generator's message (`option hidden='4096,4096': expected ...`, `tp=3 does not divide ...`)
    with its options as flags (`--hidden '4096,4096'`), and where a list was given to a one-number
    option, which options take lists."""
    import re

    from chakra_core.generate.workloads import WORKLOADS

    text = re.sub(r"\b(?:option )?([a-z_]+)=", lambda m: f"--{m[1].replace('_', '-')} ", message)
    if "integer >= 1" in message and "," in message:
        lists = [f"--{name.replace('_', '-')}" for name, option in WORKLOADS[workload].options.items()
                 if option.kind is tuple]
        text += f", one number (lists such as 512,256 are for {' and '.join(lists)})" if lists else ", one number"
    return text if "its options" in text else f"{text}; chakra generate --help lists {workload}'s options"


def _add_generate_arguments(p: argparse.ArgumentParser) -> None:
    """WORKLOAD, the job's size and place, and every workload's options (help lists whose they are)."""
    from chakra_core.generate.workloads import WORKLOADS

    p.add_argument("workload", choices=list(WORKLOADS), metavar="WORKLOAD", help=", ".join(WORKLOADS))
    p.add_argument("--npus", type=positive_int, required=True, metavar="N", help="NPUs (ranks) of the job")
    p.add_argument("-o", "--out", required=True, metavar="DIR", help="output folder (any fsspec URL)")
    p.add_argument("--name", metavar="NAME", help="output names NAME.<rank>.et (default: the workload)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    by_option: dict[str, list] = {}
    for workload in WORKLOADS.values():
        for name, option in workload.options.items():
            by_option.setdefault(name, []).append((workload.name, option))
    group = p.add_argument_group("workload options (strings like 512,256 for lists)")
    for name, uses in by_option.items():
        texts = {option.help for _, option in uses}
        defaults = "; ".join(f"{w} {'derived' if o.default is None else _option_text(o.default)}" for w, o in uses)
        if len(texts) == 1:
            text = f"{texts.pop()} (default: {defaults})"
        else:
            text = "; ".join(f"{w}: {o.help}" for w, o in uses) + f" (default: {defaults})"
        group.add_argument(f"--{name.replace('_', '-')}", dest=f"opt_{name}", default=argparse.SUPPRESS,
                           metavar=name.split("_")[0].upper(), help=text.replace("%", "%%"))


def _option_text(value) -> str:
    return ",".join(map(str, value)) if isinstance(value, tuple) else f"{value:g}" if isinstance(value, float) \
        else str(value)


def cmd_synthesize(args) -> int:
    from chakra_core.synth.synthesize import synthesize

    with Progress(items=True) as progress:
        summary = synthesize(args.out, args.npus, args.jobs, train=args.train or (), model_in=args.model,
                             model_out=args.model_out, seed=args.seed, progress=progress)
    for skipped in summary["skipped"]:  # jobs the training could not use, each with its reason
        where = f" {skipped['job']}" if skipped["job"] else ""
        print(f"skipped{where}: {skipped['reason']}", file=sys.stderr)
    broken = [job for job in summary["jobs"] if job["problems"]]
    if args.json:
        print_json(summary)
    else:
        _print_synthesis(summary, args.npus)
    for job in broken:
        for problem in job["problems"]:
            print(f"{job['job']}: {problem}", file=sys.stderr)
    return EXIT_FINDINGS if broken else EXIT_OK


def _print_synthesis(summary: dict, npus: int) -> None:
    from chakra_core.synth.fidelity import TARGETS

    table = plain_table("job", "cluster", "NPUs", "nodes", "ops/rank", "simulated (ms)", "exposed comm (ms)")
    for job in summary["jobs"]:
        ms = (lambda ns: "-" if ns is None else f"{ns / 1e6:,.3f}")
        table.add_row(job["job"], str(job["cluster"]), str(job["npus"]), f"{job['nodes']:,}",
                      f"{job['operations_per_rank']:,}", ms(job["finish_ns"]), ms(job["exposed_comm_ns"]))
    out = console()
    out.print(table)
    checks = summary["checks"]
    if checks:
        ks, tv, it = checks["message_size_ks"], checks["composition_tv"], checks["iteration_time_relative_error"]
        fmt = (lambda v: "-" if v is None else f"{v:.3f}")
        out.print(f"fidelity against the real jobs of the same clusters at {npus} NPUs: message-size KS "
                  f"worst {fmt(ks['worst'])} (target {TARGETS['message_size_ks']:g}), composition TV "
                  f"{fmt(tv['value'])} (target {TARGETS['composition_tv']:g}), iteration time error worst "
                  f"{fmt(it['worst'])} (target {TARGETS['iteration_time_relative_error']:g})")
    else:
        out.print(f"fidelity: {summary['note']}")
    out.print(f"wrote {len(summary['jobs'])} job(s) under {summary['out_dir']}/, the report "
              f"{summary['fidelity']}" + (f" and the model {summary['model']}" if summary["model"] else ""))


def cmd_select(args) -> int:
    from chakra_core.analysis.fleet import find_jobs, load_job
    from chakra_core.analysis.select import (
        DEFAULT_MAX_ERROR,
        select_representatives,
        summarize_job,
    )

    jobs, skipped = find_jobs(args.dirs)
    summaries = []
    with Progress(items=True) as progress:
        for done, job in enumerate(jobs):
            progress("simulating jobs on the reference system", done, len(jobs))
            try:
                summaries.append(summarize_job(job.job_id, *load_job(job)))
            except ChakraError as exc:  # a job that cannot be read or simulated is reported, not chosen
                skipped.append(f"{job.folder}: {exc}")
    if not summaries:
        raise ChakraError("no job could be summarised: " + "; ".join(skipped or ["no jobs found"]))
    target = DEFAULT_MAX_ERROR if args.max_error is None else args.max_error
    selection = select_representatives(summaries, args.k, target)
    document = {**selection.to_dict(), "skipped": skipped}
    if args.output:
        from chakra_core.outputs import open_output

        with open_output(args.output, "w") as f:
            json.dump(document, f, indent=1)
    if args.json:
        print_json(document)
        return EXIT_OK
    _print_selection(selection, len(summaries))
    for line in selection.notes + [f"skipped: {s}" for s in skipped]:
        print(line, file=sys.stderr)
    return EXIT_OK


def _print_selection(selection, jobs: int) -> None:
    # bordered, unlike the other commands' tables: two titled tables, one after the other
    from rich.table import Table

    chosen = Table("cluster", "representative", "weight", "jobs nearest", "share of fleet time",
                   title=f"{selection.k} representative(s) of {jobs} job(s)")
    for c in selection.clusters:
        chosen.add_row(str(c["cluster"]), c["representative"], f"{c['weight']:.3f}", str(c["jobs"]),
                       f"{c['time_share']:.1%}")
    estimates = Table("metric", "key", "fleet", "estimate", "error",
                      title=f"what the subset estimates (largest group error {selection.error:.1%})")
    for row in selection.estimates:
        error = "-" if row["error"] is None else f"{row['error']:.1%}"
        estimates.add_row(row["group"], row["key"], f"{row['actual']:,.0f}", f"{row['estimate']:,.0f}", error)
    out = console()
    out.print(chosen)
    out.print(estimates)
    out.print("error per group: " + ", ".join(f"{g} {e:.1%}" for g, e in selection.errors.items()))


def add_parsers(sub) -> None:
    p = sub.add_parser("generate", help=COMMANDS["generate"],
                       description="Write DIR/NAME.<rank>.et for every NPU of a canned workload sized from model "
                       "dimensions and a parallelism description, plus DIR/NAME.comm_groups.json (ASTRA-sim "
                       "--comm-group-configuration) when it uses sub-groups; print ranks, nodes, collectives by "
                       "type and bytes, groups and files. mlp: --parallelism dp | mp | dp-mp (data-parallel groups "
                       "on inner, contiguous ranks, model-parallel on outer, strided ones; --mp sets the MP degree) | "
                       "mp-dp (the reverse). dlrm: embedding tables spread over the NPUs (all-to-all), "
                       "data-parallel MLPs. transformer: --tp tensor parallel (inner ranks) x --pp pipeline stages "
                       "(send/recv of micro-batches) x ZeRO-2 data parallel over the remaining npus/(tp*pp). "
                       "The global batch is fixed. Options of another workload are refused.")
    _add_generate_arguments(p)
    p.set_defaults(run=cmd_generate)

    p = sub.add_parser("synthesize", help=COMMANDS["synthesize"],
                       description="Fit the synthesizer on the training jobs (each DIR holds one job's "
                       "<name>.<rank>.et files, or subfolders that each hold one; unreadable, invalid or inconsistent "
                       "jobs are reported and skipped), or load a saved model, then sample K jobs of N NPUs (any N, "
                       "also one never seen in training) into OUT/<job>/<job>.<rank>.et (+ <job>.comm_groups.json). "
                       "Every job is validated and simulated on the reference system (a Ring of N NPUs, 50 GB/s, "
                       "500 ns); OUT/fidelity.json compares them with the real jobs of the same cluster and NPU "
                       "count (message-size KS, composition TV, iteration time). Exit 1 if a job fails its checks.")
    p.add_argument("--train", nargs="+", metavar="DIR", help="training job folder(s), or folders of job folders")
    p.add_argument("--npus", type=positive_int, required=True, metavar="N", help="NPUs of each synthetic job")
    p.add_argument("--jobs", type=positive_int, required=True, metavar="K", help="synthetic jobs to write")
    p.add_argument("-o", "--out", required=True, metavar="DIR", help="output folder (any fsspec URL)")
    p.add_argument("--seed", type=int, default=0, help="seed of fitting and sampling (default 0)")
    model = p.add_mutually_exclusive_group()
    model.add_argument("--model-out", metavar="FILE", help="where to save the fitted model (default OUT/model.json)")
    model.add_argument("--model", metavar="FILE", help="sample from this saved model instead of fitting (no --train)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(run=cmd_synthesize)

    p = sub.add_parser("select", help=COMMANDS["select"],
                       description="Choose representatives one at a time, each the job that most lowers the "
                       "largest error of the subset's weighted estimate of the fleet (jobs, simulated time on the "
                       "reference system, exposed communication, time per family, bytes per collective kind); "
                       "weights are calibrated by a linear program. Prints the representatives, their weights and, "
                       "per metric, the fleet's value, the estimate and the error. A DIR holds one job's "
                       "<name>.<rank>.et files, or subfolders that each hold one job.")
    p.add_argument("dirs", nargs="+", metavar="DIR", help="job folder(s), or folders of job folders")
    size = p.add_mutually_exclusive_group()
    size.add_argument("-k", type=positive_int, help="number of representatives (default: the fewest meeting --max-error)")
    size.add_argument("--max-error", type=float, metavar="E",
                      help="without -k: the largest group error allowed, as a fraction (default 0.05)")
    p.add_argument("-o", "--output", metavar="OUT.json", help="also write the selection as JSON here")
    p.add_argument("--json", action="store_true", help="print the selection as JSON")
    p.set_defaults(run=cmd_select)
