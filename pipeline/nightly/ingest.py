"""A day's jobs and their files (pipeline/nightly/drop.py walks the drop): what kind each file is, which
files a job cannot use, or why its rank traces do not make one job (docs/pipeline.md, rejects).
Every source, its files and their names come from the registry (chakra_core/convert/sources.py)."""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass, field

from chakra_core.convert import sources
from chakra_core.convert.common.source_file import SourceOptions
from chakra_core.documents import ConfigError, read_document


@dataclass
class InputFile:
    url: str
    name: str  # path relative to the day folder, e.g. "job7/rank0.et.json.gz"
    bytes: int
    kind: str  # a file kind of the registry (sources.file_rules()), job_json or unknown
    problem: str | None = None  # why it must not be opened (a link, a FIFO, a control character in its name)

    @property
    def basename(self) -> str:
        return self.name.rsplit("/", 1)[-1]

    @property
    def in_job(self) -> str:
        """Its path inside the job folder (what a nested file rule matches)."""
        return self.name.split("/", 1)[-1]

    @property
    def rule(self) -> sources.FileRule:
        return sources.file_rule(self.kind, self.in_job if "/" in self.in_job else self.basename)

    @property
    def rank(self) -> int | None:
        """The rank a file claims by its name (None where names carry none)."""
        return self.rule.rank(self.basename)

    @property
    def job(self) -> str:
        """The job folder a file lies in (a run folder's files belong to the whole job)."""
        return self.name.split("/", 1)[0]

    @property
    def job_name(self) -> str | None:
        """The part of its name a file shares with the job's other files (a Chakra ET's <name>)."""
        return self.rule.job_name(self.basename) if self.rule.job_name else None


@dataclass
class JobInput:
    job_id: str
    url: str
    problem: str | None = None  # why none of its files is processed (its name; the same job twice)
    files: list[InputFile] = field(default_factory=list)

    @property
    def trace_format(self) -> str:
        """The trace kind of the job's source (sources.job_source), or "none"."""
        return self.source.trace.kind if self.source else "none"

    @property
    def source(self) -> sources.Source | None:
        return sources.job_source({f.kind for f in self.files})


JOB_JSON, UNKNOWN = "job_json", "unknown"  # kinds of the drop's own: a job's description, a file of no source


def _format(job: JobInput) -> str:
    return job.source.title if job.source else "no trace"


def unusable_files(job: JobInput) -> dict[str, str]:
    """Files the job has no use for, by name, and why: each is rejected alone, as the rest of the
    job can still be converted without it (logging it as processed would be a lie)."""
    reasons = {}
    traces = [f for f in job.files if f.kind == job.trace_format]
    for f in job.files:
        side = sources.SIDE_FILES.get(f.kind)
        if f.problem is not None:
            reasons[f.name] = f.problem
        elif f.kind == UNKNOWN:
            reasons[f.name] = f"{f.name}: unknown file type (expected {sources.expected_files()}, or job.json)"
        elif side is None or f.kind == job.trace_format:  # not a side file, or a trace of the job's own source
            continue
        elif f.kind not in (job.source.sides if job.source else ()):
            reasons[f.name] = side.beside_other.format(name=f.name, format=_format(job))
        elif not any(getattr(f, side.belongs) == getattr(t, side.belongs) for t in traces):
            trace_job = _trace_name(traces)
            reasons[f.name] = side.orphan.format(name=f.name, rank=f.rank, job_name=f.job_name, trace_job=trace_job,
                                                 trace=job.source.trace.shown.replace("<R>", str(f.rank)))
    return reasons


def _trace_name(traces: list[InputFile]) -> str | None:
    """The job name the first of the job's traces (by name) gives, where names carry one."""
    return next((f.job_name for f in sorted(traces, key=lambda f: f.name)), None)


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
    foreign = sorted((f for f in job.files if sources.of_trace_kind(f.kind) and f.kind != job.trace_format
                      and f.kind not in sources.SIDE_FILES), key=lambda f: f.name)  # side files: unusable_files
    if foreign:
        return foreign[0], (f"{foreign[0].name}: {sources.of_trace_kind(foreign[0].kind).one_file} beside "
                            f"{_format(job)} ({traces[0].name}); a job's ranks must be of one format")
    if job.source.single_file:
        return None if len(traces) == 1 else (traces[1], f"{traces[0].name} and {traces[1].name} both describe the"
                                                         " job; a job folder holds one")
    claims = [sorted((f for f in job.files if f.kind == kind), key=lambda f: f.name) for kind in job.source.sides
              if sources.SIDE_FILES[kind].claims]
    return (_double_claim(traces) or next(filter(None, map(_double_claim, claims)), None) or _names_differ(traces)
            or _ranks_missing(job, traces))


def _meant_as_trace(job: JobInput) -> tuple[InputFile, str] | None:
    """A file at the top of the job whose name is a trace's but for spaces, invisible or control
    characters, other scripts' digits or look-alike letters (`rank1.et.json `, `rank١.et.json`),
    or a rank trace that must not be opened (a link): a rank of the job that cannot be told for
    sure, so the job is rejected whole rather than converted without it."""
    for f in sorted(job.files, key=lambda f: f.name):
        raw = f.url.rsplit("/", 1)[-1]
        if f.kind != UNKNOWN or f.name.count("/") > 1:
            continue
        meant = sources.of_trace_kind(sources.kind_of(plain_name(raw)) or "")
        side = meant is not None and meant.trace.kind in sources.SIDE_FILES and meant.trace.kind != job.trace_format
        if meant is not None and not side and meant.trace.rank(plain_name(raw)) is not None:  # a side file: alone
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
        if f.rank is None:  # a name without a rank (a profiler's <name>.pt.trace.json): its content says
            continue
        first = claimed.setdefault(f.rank, f)
        if first is not f:
            what = sources.SIDE_FILES[f.kind].claims if f.kind in sources.SIDE_FILES else "rank"
            return f, f"{first.name} and {f.name} both claim {what} {f.rank}"
    return None


def _names_differ(traces: list[InputFile]) -> tuple[InputFile, str] | None:
    """Traces whose names carry a job name (Chakra ETs: <name>.<R>.et) share one: two names are two jobs' files."""
    if traces[0].rule.job_name is None:
        return None
    name = traces[0].job_name
    odd = next((f for f in traces if f.job_name != name), None)
    return None if odd is None else (odd, f"{odd.name}: its name differs from {traces[0].name}'s;"
                                          f" a job's ranks must share one name ({traces[0].rule.shown})")


def _ranks_missing(job: JobInput, traces: list[InputFile]) -> tuple[None, str] | None:
    """Ranks are distinct here; counted, not enumerated, as a name may claim rank 999999999. Where
    some names carry no rank, the conversion tells the ranks from the files' content."""
    if any(f.rank is None for f in traces):
        return None
    ranks = sorted(f.rank for f in traces)
    missing = ranks[-1] + 1 - len(ranks)
    if not missing:
        return None
    first = next(i for i, rank in enumerate(ranks) if rank != i)
    more = f" (and {missing - 1} more)" if missing > 1 else ""
    return None, f"{job.job_id}: no trace of rank {first}{more}; the job's ranks run up to {ranks[-1]}"


def job_input(job: JobInput) -> str:
    """What the job's source converts: its one file (job_problem has checked there is one) or its folder."""
    return _first_trace(job).url if job.source.single_file else job.url


def _first_trace(job: JobInput) -> InputFile:
    return next(f for f in job.files if f.kind == job.trace_format)


def source_options(job: JobInput) -> SourceOptions:
    """chakra convert's options for the job's source, from its job.json (each of the source's
    options, typed as its flag is); a required one missing is an error naming job.json and the key."""
    document = next((f for f in job.files if f.kind == JOB_JSON), None)
    path, data = read_document(document.url) if document else (sources.JOB_DESCRIPTION, {})
    options = {}
    for key in job.source.options:
        option = sources.OPTIONS[key]
        if key in data:
            value = data[key]
            kind = (int, float) if option.type is float else option.type
            if isinstance(value, bool) or not isinstance(value, kind):
                raise ConfigError(path, key, f"expected {getattr(kind, '__name__', 'a number')}, got {value!r}")
            options[key] = value
        elif option.required:
            raise ConfigError(path, key, f"{_first_trace(job).name} is {job.source.one_file}: job.json "
                              f"must give {option.required}")
    return SourceOptions(**options)


def kind_in_job(fs, path: str, relative: str) -> str:
    """A file's kind by its name (and, for kinds told by content, its first bytes); a file in a
    folder inside the job has a kind only where a source's files lie in folders (a JAX run)."""
    if relative == sources.JOB_DESCRIPTION:
        return JOB_JSON
    return sources.kind_of(relative, lambda: sources.head_of(fs.unstrip_protocol(path))) or UNKNOWN
