"""A day's jobs and their files (pipeline/drop.py walks the drop): what kind each file is, which
files a job cannot use, or why its rank traces do not make one job (docs/pipeline.md, rejects)."""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field

from chakra_core.convert.sources import SourceOptions, detect_format
from chakra_core.documents import ConfigError, read_document
from chakra_core.format.job import COMM_GROUPS_SUFFIX, split_rank_url

PYTORCH_ET = re.compile(r"^rank([0-9]+)\.et\.json(\.gz)?\Z")
KINETO = re.compile(r"^rank([0-9]+)\.kineto\.json(\.gz)?\Z")
TIMING = re.compile(r"^rank([0-9]+)\.timing\.json\Z")  # steps timed with the profiler off (TraceRecorder timed_steps)
RANK_NAME = {"pytorch_et": PYTORCH_ET, "kineto": KINETO, "timing": TIMING}  # chakra_et: <name>.<R>.et[.gz], format.job
# One file that describes a whole job, and the `chakra convert --from` format that reads it.
SINGLE_FILE = {"flexflow": "flexflow", "text_workload": "text"}
TRACE_KINDS = ("pytorch_et", *SINGLE_FILE, "chakra_et")  # in the order a job's format is decided
FORMAT_NAMES = {"pytorch_et": "PyTorch traces", "flexflow": "a FlexFlow task graph",
                "text_workload": "an ASTRA-sim text workload", "chakra_et": "Chakra ETs"}
ONE_FILE = {**FORMAT_NAMES, "pytorch_et": "a PyTorch trace", "chakra_et": "a Chakra ET"}
# job.json keys that a single-file job's conversion takes (chakra convert's options)
JOB_OPTIONS = {"npus": int, "passes": int, "npu_frequency_mhz": (int, float), "first_dim_npus": int,
               "time_unit": str}


@dataclass
class InputFile:
    url: str
    name: str  # path relative to the day folder, e.g. "job7/rank0.et.json.gz"
    bytes: int
    kind: str  # pytorch_et, kineto, timing, chakra_et, comm_groups, flexflow, text_workload, job_json, unknown
    problem: str | None = None  # why it must not be opened (a link, a FIFO, a control character in its name)

    @property
    def basename(self) -> str:
        return self.name.rsplit("/", 1)[-1]

    @property
    def rank(self) -> int:
        """The rank a trace or Kineto file claims by its name."""
        if self.kind == "chakra_et":
            return split_rank_url(self.basename)[1]
        return int(RANK_NAME[self.kind].match(self.basename).group(1))

    @property
    def job_name(self) -> str:
        """The <name> of a Chakra ET <name>.<R>.et or of its groups file <name>.comm_groups.json."""
        if self.kind == "comm_groups":
            return self.basename[:-len(COMM_GROUPS_SUFFIX)]
        return split_rank_url(self.basename)[0]


@dataclass
class JobInput:
    job_id: str
    url: str
    problem: str | None = None  # why none of its files is processed (its name; the same job twice)
    files: list[InputFile] = field(default_factory=list)

    @property
    def trace_format(self) -> str:
        kinds = {f.kind for f in self.files}
        return next((kind for kind in TRACE_KINDS if kind in kinds), "none")


def kind_of(name: str) -> str:
    if PYTORCH_ET.match(name):
        return "pytorch_et"
    if KINETO.match(name):
        return "kineto"
    if TIMING.match(name):
        return "timing"
    if split_rank_url(name):
        return "chakra_et"
    if name.endswith((".graph", ".dot")):
        return "flexflow"
    if name.endswith(COMM_GROUPS_SUFFIX) and len(name) > len(COMM_GROUPS_SUFFIX):
        return "comm_groups"
    return "job_json" if name == "job.json" else "unknown"


def unusable_files(job: JobInput) -> dict[str, str]:
    """Files the job has no use for, by name, and why: each is rejected alone, as the rest of the
    job can still be converted without it (logging it as processed would be a lie)."""
    host_ranks = {f.rank for f in job.files if f.kind == "pytorch_et"}
    reasons = {}
    for f in job.files:
        if f.problem is not None:
            reasons[f.name] = f.problem
        elif f.kind == "unknown":
            reasons[f.name] = (f"{f.name}: unknown file type (expected rank<R>.et.json[.gz], rank<R>.kineto.json[.gz],"
                               " rank<R>.timing.json, <name>.<R>.et, <name>.comm_groups.json, a FlexFlow <name>.graph"
                               " or .dot, an ASTRA-sim text workload <name>.txt, or job.json)")
        elif f.kind == "comm_groups" and job.trace_format != "chakra_et":
            reasons[f.name] = (f"{f.name}: communicator groups beside {FORMAT_NAMES.get(job.trace_format, 'no trace')},"
                               " whose conversion makes the job's process groups itself")
        elif f.kind == "comm_groups" and f.job_name != _chakra_name(job):
            reasons[f.name] = (f"{f.name}: communicator groups of job {f.job_name!r}, but the Chakra ETs here are"
                               f" {_chakra_name(job)}.<R>.et")
        elif f.kind == "kineto" and job.trace_format != "pytorch_et":
            reasons[f.name] = f"{f.name}: a Kineto trace beside {FORMAT_NAMES.get(job.trace_format, 'no trace')}, " \
                "which has no use for it"
        elif f.kind == "kineto" and job.trace_format == "pytorch_et" and f.rank not in host_ranks:
            reasons[f.name] = f"{f.name}: a Kineto trace of rank {f.rank}, which has no rank{f.rank}.et.json[.gz]"
        elif f.kind == "timing" and job.trace_format != "pytorch_et":
            reasons[f.name] = f"{f.name}: unprofiled step times beside no PyTorch trace, which alone they describe"
        elif f.kind == "timing" and f.rank not in host_ranks:
            reasons[f.name] = f"{f.name}: unprofiled step times of rank {f.rank}, which has no rank{f.rank}.et.json[.gz]"
    return reasons


def _chakra_name(job: JobInput) -> str | None:
    return next((f.job_name for f in sorted(job.files, key=lambda f: f.name) if f.kind == "chakra_et"), None)


def groups_file(job: JobInput) -> InputFile | None:
    """The communicator groups of a Chakra ET job: <name>.comm_groups.json of the ETs' name."""
    name = _chakra_name(job)
    return next((f for f in job.files if f.kind == "comm_groups" and f.job_name == name), None)


def job_problem(job: JobInput) -> tuple[InputFile | None, str] | None:
    """Why the job's rank traces do not make one job: the file to blame (None when no single file
    is) and a one-line reason; None when they do. Files a converter would silently pass over (a
    second file of a rank, a Chakra ET beside PyTorch traces) make the job ambiguous, so the
    whole job is rejected rather than guessed at."""
    odd = _meant_as_trace(job)
    if odd is not None:
        return odd
    if job.trace_format == "none":
        return None, f"{job.job_id}: the job folder holds no rank trace"
    traces = sorted((f for f in job.files if f.kind == job.trace_format), key=lambda f: f.name)
    foreign = sorted((f for f in job.files if f.kind in TRACE_KINDS and f.kind != job.trace_format),
                     key=lambda f: f.name)
    if foreign:
        return foreign[0], (f"{foreign[0].name}: {ONE_FILE[foreign[0].kind]} beside {FORMAT_NAMES[job.trace_format]}"
                            f" ({traces[0].name}); a job's ranks must be of one format")
    if job.trace_format in SINGLE_FILE:
        return None if len(traces) == 1 else (traces[1], f"{traces[0].name} and {traces[1].name} both describe the"
                                                         " job; a job folder holds one")
    kineto = sorted((f for f in job.files if f.kind == "kineto" and job.trace_format == "pytorch_et"),
                    key=lambda f: f.name)
    return _double_claim(traces) or _double_claim(kineto) or _names_differ(traces) or _ranks_missing(job, traces)


def _meant_as_trace(job: JobInput) -> tuple[InputFile, str] | None:
    """A file at the top of the job whose name is a trace's but for spaces, invisible or control
    characters, other scripts' digits or look-alike letters (`rank1.et.json `, `rank١.et.json`),
    or a rank trace that must not be opened (a link): a rank of the job that cannot be told for
    sure, so the job is rejected whole rather than converted without it."""
    for f in sorted(job.files, key=lambda f: f.name):
        raw = f.url.rsplit("/", 1)[-1]
        if f.kind in (*RANK_NAME, "chakra_et") or f.name.count("/") > 1:
            continue
        if kind_of(plain_name(raw)) in ("pytorch_et", "chakra_et"):  # a side file (Kineto, timing) is rejected alone
            why = f.problem or ("spaces, invisible or control characters, or other digits in its name")
            return f, (f"{f.name}: named like a rank file ({plain_name(raw)}) but not one ({why}); the job's ranks"
                       " cannot be told apart for sure: rename or remove it")
    return None


def plain_name(name: str) -> str:
    """name without spaces, control and format characters, its digits ASCII and its letters
    NFKC-folded: what a person reading it takes it to be."""
    kept = (str(unicodedata.decimal(c)) if c.isdecimal() else c for c in unicodedata.normalize("NFKC", name)
            if not c.isspace() and unicodedata.category(c) not in ("Cc", "Cf"))
    return "".join(kept)


def _double_claim(files: list[InputFile]) -> tuple[InputFile, str] | None:
    claimed: dict[int, InputFile] = {}
    for f in files:
        first = claimed.setdefault(f.rank, f)
        if first is not f:
            what = "the Kineto trace of rank" if f.kind == "kineto" else "rank"
            return f, f"{first.name} and {f.name} both claim {what} {f.rank}"
    return None


def _names_differ(traces: list[InputFile]) -> tuple[InputFile, str] | None:
    """Chakra ETs of one job are <name>.<R>.et with one name: two names are two jobs' files."""
    if traces[0].kind != "chakra_et":
        return None
    name = traces[0].job_name
    odd = next((f for f in traces if f.job_name != name), None)
    return None if odd is None else (odd, f"{odd.name}: its name differs from {traces[0].name}'s;"
                                          " a job's ranks must share one name (<name>.<R>.et)")


def _ranks_missing(job: JobInput, traces: list[InputFile]) -> tuple[None, str] | None:
    """Ranks are distinct here; counted, not enumerated, as a name may claim rank 999999999."""
    ranks = sorted(f.rank for f in traces)
    missing = ranks[-1] + 1 - len(ranks)
    if not missing:
        return None
    first = next(i for i, rank in enumerate(ranks) if rank != i)
    more = f" (and {missing - 1} more)" if missing > 1 else ""
    return None, f"{job.job_id}: no trace of rank {first}{more}; the job's ranks run up to {ranks[-1]}"


def source_file(job: JobInput) -> InputFile:
    """The one file of a FlexFlow or text-workload job (job_problem has checked there is one)."""
    return next(f for f in job.files if f.kind == job.trace_format)


def source_options(job: JobInput) -> SourceOptions:
    """chakra convert's options for a single-file job, from its job.json (JOB_OPTIONS; a text
    workload needs `npus`); an error names job.json and the key."""
    document = next((f for f in job.files if f.kind == "job_json"), None)
    path, data = read_document(document.url) if document else ("job.json", {})
    options = {}
    for key, kind in JOB_OPTIONS.items():
        if key in data:
            value = data[key]
            if isinstance(value, bool) or not isinstance(value, kind):
                raise ConfigError(path, key, f"expected {getattr(kind, '__name__', 'a number')}, got {value!r}")
            options[key] = value
    if job.trace_format == "flexflow":
        return SourceOptions(time_unit=options.get("time_unit", "ms"))
    if "npus" not in options:
        raise ConfigError(path, "npus", f"{source_file(job).name} is a text workload: job.json must give the NPUs"
                          " to run it on")
    return SourceOptions(**{k: v for k, v in options.items() if k != "time_unit"})


def kind_in_job(fs, path: str, relative: str) -> str:
    """A file's kind by its name; a .txt by its first line (an ASTRA-sim text workload or not)."""
    kind = kind_of(relative) if "/" not in relative else "unknown"
    if kind == "unknown" and relative.endswith(".txt") and detect_format(fs.unstrip_protocol(path)) == "text":
        return "text_workload"
    return kind
