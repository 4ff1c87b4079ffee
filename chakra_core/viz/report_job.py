"""A job's page of the daily report (reports/date=<d>/job=<id>.html) and its Perfetto timelines
beside it (job=<id>.timeline.json.gz simulated on the reference system, job=<id>.recorded.json.gz
as recorded, linked with the day before's): where each rank's step goes, the job seen three ways
(recorded, predicted without the profiler, simulated on the reference system) and why they can
disagree on what bounds it, the critical path across its ranks and its stragglers, its top
kernels, its history, and `chakra diff` (jobdiff.py) of the job on the day before and on the day."""

from __future__ import annotations

import fsspec

from chakra_core.analysis import job_day
from chakra_core.analysis.daily import HISTORY_WINDOW_DAYS, Day
from chakra_core.errors import ChakraError
from chakra_core.viz import report_plots
from chakra_core.viz.pages import ms, pct, recorded_timeline_of, render, timeline_of

MAX_TIMELINE_NODES = 50_000  # trace nodes over all ranks; larger jobs get no timeline (a note says so)
TOP_KERNELS = 15
KERNEL_CHANGES_SHOWN = 20
TRENDS = {"step_ns": "recorded step", "predicted_step_ns": "predicted step",  # metric -> its line's label
          "sim_finish_ns": "simulated finish"}
# why the prediction can lift a bound the recording shows
_WHY_PREDICTED_DIFFERS = {
    "host": ": without the profiler's cost on the host, the profiler, not the job, held the host",
    "communication": ": the prediction runs the communication on the reference network (a Ring of the job's NPUs) "
                     "instead of as recorded (e.g. gloo on the host), and takes the profiler's cost out of host time",
}
_SIM_BOUND = {"sim_compute_ns": "device", "sim_host_ns": "host", "sim_exposed_comm_ns": "communication",
              "sim_idle_ns": "idle"}


def views(device: dict | None, figures: dict[str, float]) -> list[dict]:
    """The job's time as recorded, as predicted and as simulated on the reference system."""
    out = []
    if device:
        out.append({"name": "recorded step", "term": "recorded", "time": device["step_ns"], "busy": device["busy_share"],
                    "bound": device["bound"], "covers": "one step as profiled, seen from the device"})
        if device.get("predicted_step_ns") is not None:
            out.append({"name": "predicted step", "term": "predicted", "time": device["predicted_step_ns"],
                        "busy": device["predicted_busy_share"], "bound": device["predicted_bound"],
                        "covers": f"the same step without the profiler's cost on the host ({device['predicted_by']})"})
    if "sim_finish_ns" in figures:
        out.append({"name": "simulated trace", "term": "reference system", "time": figures["sim_finish_ns"],
                    "busy": None, "bound": simulated_bound(figures),
                    "covers": "the whole trace on the reference system, host operators at their recorded times; "
                              "the parts of its slowest NPU"})
    return out


def simulated_bound(figures: dict[str, float]) -> str | None:
    parts = {bound: figures.get(metric, 0.0) for metric, bound in _SIM_BOUND.items()}
    return max(parts, key=parts.get) if any(parts.values()) else None


def bound_notes(device: dict | None, figures: dict[str, float]) -> list[str]:
    """Why the views disagree on what bounds the job, where they do."""
    notes = []
    if device and device.get("predicted_bound") and device["bound"] != device["predicted_bound"]:
        why = _WHY_PREDICTED_DIFFERS.get(device["bound"], "")
        notes.append(f"As recorded the step is {device['bound']}-bound (the device busy {pct(device['busy_share'])} "
                     f"of it); the predicted step is {device['predicted_bound']}-bound (busy "
                     f"{pct(device['predicted_busy_share'])}) and takes {ms(device['predicted_step_ns'])} instead of "
                     f"{ms(device['step_ns'])}{why} (chakra stats prints both rows).")
    sim = simulated_bound(figures)
    said = device.get("predicted_bound") or device["bound"] if device else None
    if device and sim and sim != said:
        host = figures.get("sim_host_ns", 0.0) / figures["sim_finish_ns"] if figures.get("sim_finish_ns") else 0.0
        notes.append(f"The simulation on the reference system puts {pct(host)} of its {ms(figures['sim_finish_ns'])} "
                     f"on the host ({sim}-bound), unlike the {said}-bound step: it replays every host operator at "
                     "its recorded time, the profiler's cost included, and over the whole trace (the time before, "
                     "between and after the steps too), where the device view looks inside the steps. Read the "
                     "predicted step for the job without the profiler, the simulation for the trace as recorded "
                     "(and for what another network would change).")
    return notes


def trend_series(rows: list[dict]) -> dict[str, list[tuple[str, float]]]:
    series: dict[str, list[tuple[str, float]]] = {m: [] for m in TRENDS}
    for r in rows:
        if r["metric"] in series:
            series[r["metric"]].append((str(r["date"]), r["value"]))
    return {m: points for m, points in series.items() if points}


def converted_prefix(info: dict) -> tuple[str | None, str]:
    """(the prefix of the job's converted rank files, or None; why a report draws no timeline of it)."""
    from chakra_core.format.job import split_rank_url

    if info["nodes"] > MAX_TIMELINE_NODES:
        return None, (f"the job has {info['nodes']:,} trace nodes, more than the {MAX_TIMELINE_NODES:,} a report's "
                      "pages read (`chakra timeline --recorded` or `--workload` and `chakra stragglers` draw it)")
    found = split_rank_url(info["path"] or "")
    if found is None:
        return None, "the traces table names no converted rank file of this job"
    return found[0], ""


def _traces(info: dict, what: str):
    """(the job's converted traces, "") or (None, a note saying why `what` has none)."""
    from chakra_core.format.job import Job

    prefix, why = converted_prefix(info)
    if prefix is None:
        return None, f"No {what}: {why}."
    try:
        return Job.read(prefix, info["ranks"]), ""
    except (ChakraError, OSError, ValueError) as exc:  # (a path of the warehouse's holding a NUL: ValueError)
        return None, f"No {what}: {' '.join(str(exc).split())}"

def critical_path(info: dict) -> tuple[str | None, str]:
    """(the plot of the job's critical path across its ranks in its last recorded step, or None;
    a note when there is none): `chakra stragglers`' engine over the converted traces."""
    from chakra_core.analysis.stragglers import job_report

    if info["ranks"] < 2:
        return None, "One rank: no path across ranks."
    traces, note = _traces(info, "critical path")
    if traces is None:
        return None, note
    segments = job_report(traces.tables)["critical_path"]["segments"]
    if not segments:
        return None, "No critical path: the traces hold no timed steps."
    return report_plots.critical_path(segments, info["ranks"]), ""


def timeline(day: Day, job: str, info: dict, out_dir: str) -> tuple[str | None, str]:
    """(the timeline's file name beside the page, or None; a note when there is none): the job's
    converted traces simulated on the reference system."""
    from chakra_core.analysis.predicted import predict
    from chakra_core.sim.reference import reference_system
    from chakra_core.viz.timeline import timeline_from_simulation, write_timeline

    traces, note = _traces(info, "timeline")
    if traces is None:
        return None, note
    try:
        result = predict(traces, reference_system())
    except (ChakraError, OSError, ValueError, ArithmeticError) as exc:  # a job the model cannot run (times past
        return None, f"No timeline: {' '.join(str(exc).split())}"          # int64 overflow): a note, not a failed night
    name = timeline_of(job)
    write_timeline(timeline_from_simulation(result, traces.tables), f"{out_dir.rstrip('/')}/{name}")
    return name, ""


def recorded_timeline(job: str, info: dict, out_dir: str) -> tuple[str | None, str]:
    """(the recorded timeline's file name beside the page, or None; a note when there is none):
    every rank's converted trace at its recorded times, as `chakra timeline --recorded` writes it."""
    from chakra_core.viz import timeline as perfetto

    prefix, why = converted_prefix(info)
    if prefix is None:
        return None, f"No recorded timeline: {why}."
    try:
        doc = perfetto.recorded_timeline(prefix, info["ranks"])
    except (ChakraError, OSError, ValueError) as exc:
        return None, f"No recorded timeline: {' '.join(str(exc).split())}"
    if not doc["otherData"]["events"]:
        return None, "No recorded timeline: the job's traces hold no start times (a generated or synthetic job)."
    name = recorded_timeline_of(job)
    perfetto.write_timeline(doc, f"{out_dir.rstrip('/')}/{name}")
    return name, ""


def recorded_before(job: str, previous: dict | None, out_dir: str) -> str | None:
    """The link to the job's recorded timeline beside its page of the day before, where that is."""
    if previous is None:
        return None
    beside = f"{previous['folder']}/{recorded_timeline_of(job)}"  # in the reports root, out_dir's parent
    root = out_dir.rstrip("/").rpartition("/")[0] or "."  # no "..": an object store takes it literally
    fs, path = fsspec.core.url_to_fs(f"{root}/{beside}")
    return f"../{beside}" if fs.exists(path) else None


def job_page(day: Day, job: str, model: dict, history_rows: list[dict], out_dir: str) -> str:
    """The job page's HTML. `model`: what the day page knows of the job (info, device, systems,
    not_simulated, rejected, flagged, previous)."""
    verdicts, families = job_day.device_rows(day, job)
    entries = job_day.breakdown(verdicts, families)
    today = job_day.by_day(history_rows).get(day.date, ("", {}))
    diff = job_day.against_day_before(day, job, history_rows)
    kernels = job_day.kernels(day, job)
    compared = diff.kernels if diff else []
    series = trend_series(history_rows)
    name, note = timeline(day, job, model["info"], out_dir)
    recorded, recorded_note = recorded_timeline(job, model["info"], out_dir)
    path_plot, path_note = critical_path(model["info"])
    figures = today[1]
    simulated = job_day.simulated_parts(figures)
    sim_plot = (report_plots.step_bars([{"label": "slowest NPU", "parts": simulated}], "ms, the whole trace")
                if simulated and not entries else None)
    compared_days = job_day.before_after(history_rows, day.date) if model["flagged"] else []
    change_plot = (report_plots.step_bars(compared_days, "ms per step" if entries else "ms, the whole trace")
                   if compared_days and all(d["parts"] for d in compared_days) else None)
    return render(
        "job.html.j2", job=job, day=day.date, fingerprint=today[0], **model,
        breakdown=entries, breakdown_plot=report_plots.step_bars(entries) if entries else None,
        ranks_left_out=len({v["rank"] for v in verdicts}) > len({e["rank"] for e in entries}), sim_plot=sim_plot,
        change_plot=change_plot, compared_days=[d["label"] for d in compared_days],
        sim_finish=figures.get("sim_finish_ns"),
        views=views(model["device"], figures), bound_notes=bound_notes(model["device"], figures),
        kernels=kernels[:TOP_KERNELS], kernels_more=max(len(kernels) - TOP_KERNELS, 0),
        trend_plot=report_plots.trends(series, TRENDS) if series else None,
        history_days=len({str(r["date"]) for r in history_rows}), window=HISTORY_WINDOW_DAYS,
        diff=diff, kernel_changes=[k for k in compared if k["status"] != "same"][:KERNEL_CHANGES_SHOWN],
        kernel_counts={s: sum(k["status"] == s for k in compared) for s in ("added", "vanished", "changed", "same")},
        timeline=name, timeline_note=note, recorded=recorded, recorded_note=recorded_note,
        recorded_before=recorded_before(job, model["previous"], out_dir) if recorded else None,
        stragglers=job_day.stragglers(day, job), path_plot=path_plot, path_note=path_note)
