"""The registry of trace sources: one record per format that `chakra convert`, the nightly's
drop walker and ingestion (pipeline/nightly/ingest.py) and its conversion (pipeline/nightly/jobs.py) all read.

A record says the source's one name (`chakra convert --from NAME`), the files it takes and how
their names give ranks (its trace files, then the side files it reads beside them), how its
content is told from the first bytes of a file, the options it takes, and the function that
converts it (named by module and attribute, imported only when used). Every converter writes
what chakra_core/convert/conventions.py describes, through common/result.py.

Adding a source is one folder under chakra_core/convert/ with its converter and one `Source`
in SOURCES (tests/test_sources.py runs the conventions' checks on each).
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass, fields

from chakra_core import limits
from chakra_core.errors import ChakraError, ChakraFormatError
from chakra_core.format.names import COMM_GROUPS_SUFFIX, is_kineto_head, split_rank_url
from chakra_core.format.names import RANK_FILE as CHAKRA_RANK_FILE

HEAD_BYTES = 4096
_DOT = re.compile(rb"^(?:\xef\xbb\xbf)?\s*(?:strict\s+)?digraph\b", re.IGNORECASE)
# a policy word alone on line 1 (DLRM adds a number, HYBRID_TRANSFORMER key: value pairs), the layer count on line 2
_TEXT = re.compile(rb"^(?:\xef\xbb\xbf)?[ \t]*[A-Z][A-Z_]*(?:[ \t][^\r\n]*)?\r?\n[ \t]*\d+[ \t]*(?:\r?\n|$)")

# Rank numbers in names are ASCII digits to the very end (\Z: `$` would match before a final
# newline, `\d` would take rank١). PyTorch's own naming beyond its rank files (pytorch/discover.py): a single trace's rank in its
# name (`resnet.rank3.et.json`, `trace.3.json`), names meant as a job's file, tools/collect.py's
# companions of the traces, and a lone trace's Kineto file `<base>.kineto.json[.gz]`.
PYTORCH_RANK_IN_NAME = re.compile(r"(?:rank|\.)([0-9]+)\.(?:et\.)?json(?:\.gz)?\Z")
PYTORCH_MEANT_AS_JOB_FILE = re.compile(r"\.(et|kineto|timing)\.json(\.gz)?$")
PYTORCH_RECORDED_WITH_THE_JOB = re.compile(r"^(job\.json|rank\d+\.program\.json)$")
PYTORCH_TRACE_BASE = re.compile(r"^(.*)\.et\.json(\.gz)?$")
PYTORCH_KINETO_BESIDE = (".kineto.json", ".kineto.json.gz")
PYTORCH_PROFILER_COST = "profiler_cost.json"  # tools/profcost.py's probe of the recording machine, into the report
# A JAX run folder (convert/jax/run.py): the profiler's files below `[DIR/]plugins/profile/<run>/`
# (the XPlane, the host's trace JSON, the Perfetto one), the compiled HLO text (the dump's hlo/*.txt,
# a module's own *.hlo.txt) and the unprofiled step times, by their path inside the folder.
JAX_PROFILE = re.compile(r"^(?:[^/]+/)?plugins/profile/(?P<run>[^/]+)/(?P<file>[^/]+\.xplane\.pb|"
                         r"[^/]+\.trace\.json(?:\.gz)?|perfetto_trace\.json(?:\.gz)?)$")
JAX_HLO = re.compile(r"^(?:hlo/[^/]+\.txt|[^/]+\.hlo\.txt)$")
JAX_TIMING = re.compile(r"^timing\.json$")
JOB_DESCRIPTION = "job.json"  # a drop's job folder: what the job is, and a single-file source's options


@dataclass(frozen=True)
class SourceOptions:
    """What a source needs beyond its files (OPTIONS: each one's flag; docs/other-sources.md)."""

    npus: int | None = None                 # text: NPUs to run the workload on
    passes: int = 1                         # text: training passes
    npu_frequency_mhz: float | None = None  # text: cycles -> microseconds (None: cycles kept, as the reference)
    first_dim_npus: int | None = None       # text: NPUs of the first network dimension (hybrid policies)
    time_unit: str = "ms"                   # flexflow: the unit of the graph's run times

    def __post_init__(self):
        """first_dim_npus a whole number in range (job.json gives it too): 0 NPUs in a dimension
        divided by zero. The other numbers are checked on conversion, naming the file."""
        value, high = self.first_dim_npus, limits.value("npus")
        if value is not None and (type(value) is not int or not 1 <= value <= high):
            raise SourceOptionError(f"first_dim_npus (--first-dim-npus) {value!r}: expected a whole number from 1 to"
                                    f" {high:,}")


class SourceOptionError(ChakraError):
    """Options that do not fit the input's format (e.g. --npus for a FlexFlow graph)."""


@dataclass(frozen=True)
class FileRule:
    """How the files of one kind are named: `pattern` matches the base name (group 1 the rank,
    where names carry one); `shown` is how messages name them."""

    kind: str  # the ingest_log's kind; a trace kind is also the traces table's source_format
    pattern: re.Pattern
    shown: str
    by_content: bool = False  # the name alone is not enough: the source's `detect` must claim the file too
    job_name: Callable[[str], str] | None = None  # files of one job share this part of their names
    nested: bool = False  # the pattern matches the path inside the job folder (a run folder's files lie below it)

    def rank(self, name: str) -> int | None:
        """The rank the name carries: group `rank` (or `rank_<any>`, where names take several
        forms) when the pattern names one, else its first group; None when there is none."""
        match = self.pattern.match(name)
        if not match or not self.pattern.groups:
            return None
        named = [k for k in self.pattern.groupindex if k == "rank" or k.startswith("rank_")]
        if self.pattern.groupindex and not named:  # named groups, none of them a rank (a run folder's files)
            return None
        found = next((match.group(k) for k in named if match.group(k) is not None), None) if named else match.group(1)
        return None if found is None else int(found)


@dataclass(frozen=True)
class SideRule(FileRule):
    """A file read beside a source's traces: `belongs` tells which trace it goes with (the same
    rank or the same job name); the three messages are why it is set aside when it fits none."""

    belongs: str = "rank"  # "rank", "job_name" or "job" (any trace of the job: a run folder's files)
    claims: str = ""  # "the Kineto trace of rank": two files claiming one rank are an error
    beside_other: str = ""  # {name}, {format}: beside traces of a source that has no use for it
    orphan: str = ""  # {name}, {rank}, {job_name}, {trace}: no trace of its rank or name here


@dataclass(frozen=True)
class Option:
    """An option of a source: its SourceOptions field, its CLI flag and how argparse reads it."""

    name: str
    flag: str
    type: type
    help: str
    metavar: str | None = None
    choices: tuple[str, ...] | None = None
    required: str | None = None  # what it gives, when the source cannot go without it


@dataclass(frozen=True)
class Source:
    name: str  # `chakra convert --from NAME`
    title: str  # what a job of it is called in messages ("PyTorch traces")
    one_file: str  # one of its trace files ("a PyTorch trace")
    trace: FileRule  # its trace files
    converter: str  # "module:function": (src, out_dir, prefix, options, progress, accounted) -> JobResult
    sides: tuple[str, ...] = ()  # SIDE_FILES kinds it reads beside its traces
    options: tuple[str, ...] = ()  # OPTIONS it takes
    single_file: bool = False  # one file describes the whole job (else a folder of rank files)
    detect: Callable[[bytes], bool] | None = None  # claims a file by its first HEAD_BYTES
    options_group: str = ""  # the CLI's heading for its options
    counter: str | None = None  # single-file sources, "module:function": (src, options) -> the NPUs it converts to
    folder: str | None = None  # "module:function": (src) -> whether a folder is a run of this source, by its layout
    ranks_apart: bool = False  # its ranks are read and analysed apart, a Ray task each for a big job (pipeline's bigjobs)

    def devices(self, src: str, options: SourceOptions) -> int:
        """The NPUs a single-file source converts to (its file read and checked: a sweep's --convert)."""
        return _entry(self.counter)(src, options)

    def convert(self, src: str, out_dir: str, prefix: str, options: SourceOptions = SourceOptions(),
                progress: Callable[[str, int, int], None] | None = None, accounted: frozenset[str] = frozenset()):
        """src converted into out_dir (see the module docstring); returns a common.result.JobResult."""
        check_options(self, options)
        return _entry(self.converter)(src, out_dir, prefix, options, progress, accounted)


def _entry(name: str) -> Callable:
    """The function "module:function" names, imported now (a source's code loads only when it is used)."""
    module, function = name.split(":")
    return getattr(importlib.import_module(module), function)


OPTIONS = {o.name: o for o in (
    Option("npus", "--npus", int, "NPUs to run the workload on (required)", "N", required="the NPUs to run it on"),
    Option("passes", "--passes", int, "training passes (default 1)", "P"),
    Option("npu_frequency_mhz", "--npu-frequency", float, "turn compute cycles into microseconds at this clock "
           "(default: cycles kept as microseconds, as the reference converter)", "MHZ"),
    Option("first_dim_npus", "--first-dim-npus", int, "NPUs of the first network dimension, which hybrid policies "
           "split on (default: the divisor of N nearest its square root; HYBRID_TRANSFORMER takes its "
           "model_parallel_NPU_group)", "D"),
    Option("time_unit", "--time-unit", str, "the unit of the graph's run times (default ms, FlexFlow's simulator)",
           choices=("ms", "s", "us")),
)}
assert set(OPTIONS) == {f.name for f in fields(SourceOptions)}  # one flag per option

SIDE_FILES = {s.kind: s for s in (
    SideRule("kineto", re.compile(r"^rank([0-9]+)\.kineto\.json(\.gz)?\Z"), "rank<R>.kineto.json[.gz]",
             claims="the Kineto trace of rank", beside_other="{name}: a Kineto trace beside {format}, which has no "
             "use for it", orphan="{name}: a Kineto trace of rank {rank}, which has no {trace}"),
    SideRule("timing", re.compile(r"^rank([0-9]+)\.timing\.json\Z"), "rank<R>.timing.json",  # TraceRecorder timed_steps
             claims="the unprofiled step times of rank",
             beside_other="{name}: unprofiled step times beside no PyTorch trace, which alone they describe",
             orphan="{name}: unprofiled step times of rank {rank}, which has no {trace}"),
    SideRule("hlo_text", JAX_HLO, "hlo/*.txt or <name>.hlo.txt", nested=True, belongs="job",
             beside_other="{name}: JAX run files beside {format}, which has no use for them"),
    SideRule("jax_timing", JAX_TIMING, "timing.json", belongs="job",
             beside_other="{name}: JAX run files beside {format}, which has no use for them"),
    SideRule("comm_groups", re.compile(rf"^.+{re.escape(COMM_GROUPS_SUFFIX)}$"), f"<name>{COMM_GROUPS_SUFFIX}",
             job_name=lambda name: name[:-len(COMM_GROUPS_SUFFIX)], belongs="job_name",
             beside_other="{name}: communicator groups beside {format}, whose conversion makes the job's process "
             "groups itself",
             orphan="{name}: communicator groups of job {job_name!r}, but the Chakra ETs here are {trace_job}.<R>.et"),
)}

# In this order a job's format is decided and an unknown file is told what is expected.
SOURCES = (
    Source("pytorch", "PyTorch traces", "a PyTorch trace",
           FileRule("pytorch_et", re.compile(r"^rank([0-9]+)\.et\.json(\.gz)?\Z"), "rank<R>.et.json[.gz]"),
           "chakra_core.convert.pytorch.job:convert_pytorch", sides=("kineto", "timing"), ranks_apart=True),
    Source("chakra", "Chakra ETs", "a Chakra ET",
           FileRule("chakra_et", CHAKRA_RANK_FILE, "<name>.<R>.et",
                    job_name=lambda name: split_rank_url(name)[0]),
           "chakra_core.convert.chakra.copy:copy_chakra", sides=("comm_groups",)),
    Source("flexflow", "a FlexFlow task graph", "a FlexFlow task graph",
           FileRule("flexflow", re.compile(r"^.+\.(?:graph|dot)$"), "a FlexFlow <name>.graph or .dot"),
           "chakra_core.convert.flexflow.graph:convert_flexflow", options=("time_unit",), single_file=True,
           detect=lambda head: _DOT.match(head) is not None, options_group="FlexFlow task graphs",
           counter="chakra_core.convert.flexflow.graph:devices"),
    Source("text", "an ASTRA-sim text workload", "an ASTRA-sim text workload",
           FileRule("text_workload", re.compile(r"^.+\.txt$"), "an ASTRA-sim text workload <name>.txt",
                    by_content=True),
           "chakra_core.convert.text.workload:convert_text",
           options=("npus", "passes", "npu_frequency_mhz", "first_dim_npus"), single_file=True,
           detect=lambda head: _TEXT.match(head) is not None, options_group="ASTRA-sim 1.0 text workloads",
           counter="chakra_core.convert.text.workload:devices"),
    # a job of Kineto traces alone (beside another source's traces they are its side files: job_source)
    Source("kineto", "Kineto traces", "a Kineto trace",
           FileRule("kineto", re.compile(r"^(?:rank(?P<rank>[0-9]+)\.kineto\.json|.*?worker(?P<rank_worker>[0-9]+)[^/]*?"
                                         r"\.pt\.trace\.json|.+\.pt\.trace\.json)(?:\.gz)?\Z"),
                    "rank<R>.kineto.json[.gz] or <name>.pt.trace.json[.gz]"),
           "chakra_core.convert.kineto.job:convert_kineto", sides=("timing",),
           detect=is_kineto_head),
    Source("jax", "a JAX profile", "a JAX run",
           FileRule("jax_profile", JAX_PROFILE, "a JAX run's plugins/profile/<run>/<host>.xplane.pb or .trace.json.gz",
                    nested=True),
           "chakra_core.convert.jax.run:convert_jax", sides=("hlo_text", "jax_timing"),
           folder="chakra_core.convert.jax.layout:is_jax_run"),
)
DEFAULT = "pytorch"  # what an input no source claims by content is taken for (JSON, bundles, folders)
# Everything below reads SOURCES when called, so that the registry is this one tuple.


def names() -> list[str]:
    return [s.name for s in SOURCES]


def source(name: str) -> Source:
    found = next((s for s in SOURCES if s.name == name), None)
    if found is None:
        raise SourceOptionError(f"unknown source format {name!r}; expected one of {', '.join(names())}")
    return found


def of_trace_kind(kind: str) -> Source | None:
    """The source whose trace files are of this kind."""
    return next((s for s in SOURCES if s.trace.kind == kind), None)


def job_source(kinds: set[str]) -> Source | None:
    """The source of a job holding files of these kinds: the first in SOURCES whose traces are
    there, except that a trace kind other sources read beside theirs (Kineto traces) decides
    only when no other source's traces are there."""
    present = [s for s in SOURCES if s.trace.kind in kinds]
    return next((s for s in present if s.trace.kind not in SIDE_FILES), present[0] if present else None)


def file_rules() -> list[FileRule]:
    """Every kind of file a source takes: each source's traces, then its side files."""
    return [rule for s in SOURCES for rule in (s.trace, *(SIDE_FILES[k] for k in s.sides))]


def file_rule(kind: str, name: str) -> FileRule:
    """The rule of that kind that takes the name (a kind may be a side file of one source and
    the trace of another, named more ways)."""
    rules = [rule for rule in file_rules() if rule.kind == kind]
    return next((rule for rule in rules if rule.pattern.match(name)), rules[0])


def head_of(src: str) -> bytes:
    """The first HEAD_BYTES of a file, gunzipped; a gzip stream damaged within them is one line."""
    import gzip

    from chakra_core.inputs import open_input

    try:
        with open_input(src) as f:
            return f.read(HEAD_BYTES)
    except (EOFError, gzip.BadGzipFile) as exc:  # cut short, or corrupt (inputs.BoundedGzipFile)
        raise ChakraFormatError(src, f"cannot read: {exc}") from None


def detect_format(src: str) -> str:
    """The name of the source a file's first bytes claim; a folder's, by the trace files in it;
    else the default (PyTorch: JSON traces, bundles)."""
    import fsspec

    fs, path = fsspec.core.url_to_fs(src)
    if fs.isdir(path):
        run = next((s for s in SOURCES if s.folder is not None and _entry(s.folder)(src)), None)
        if run is not None:
            return run.name
        listed = {entry.rstrip("/").rsplit("/", 1)[-1] for entry in fs.ls(path, detail=False)}
        found = job_source({s.trace.kind for s in SOURCES if not s.single_file
                            and any(s.trace.pattern.match(n) for n in listed)})
        return found.name if found else DEFAULT
    if not fs.isfile(path):
        return DEFAULT
    head = head_of(src)
    return next((s.name for s in SOURCES if s.detect is not None and s.detect(head)), DEFAULT)


def kind_of(name: str, head: Callable[[], bytes] = bytes) -> str | None:
    """The kind of file a name says, a base name or a path inside the job folder (a kind told by
    content when `head()` is claimed too); None when no source takes such a file."""
    for rule in file_rules():
        if ("/" not in name or rule.nested) and rule.pattern.match(name):
            if not rule.by_content or of_trace_kind(rule.kind).detect(head()):
                return rule.kind
    return None


def expected_files() -> str:
    """The files sources take, one name per kind, as a list for a message."""
    shown = {}
    for rule in file_rules():
        shown.setdefault(rule.kind, rule.shown)
    return ", ".join(shown.values())


def check_options(src: Source, options: SourceOptions) -> None:
    """Refuses options given for another format than the input's, and a required one missing."""
    given = [name for name in OPTIONS if getattr(options, name) != getattr(SourceOptions(), name)]
    stray = [OPTIONS[name].flag for name in given if name not in src.options]
    if stray:
        verb = "do" if len(stray) > 1 else "does"
        raise SourceOptionError(f"{' and '.join(stray)} {verb} not apply to a {src.name} input")
    for name in src.options:
        option = OPTIONS[name]
        if option.required and getattr(options, name) is None:
            raise SourceOptionError(f"{src.one_file} needs {option.flag} {option.metavar} ({option.required})")


def convert_source(src: str, out_dir: str, prefix: str, fmt: str | None = None,
                   options: SourceOptions = SourceOptions(),
                   progress: Callable[[str, int, int], None] | None = None, accounted: frozenset[str] = frozenset()):
    """Convert `src` (format detected unless given) into out_dir; returns a common.result.JobResult.
    accounted: base names of files in src the caller has dealt with, which the conversion leaves alone."""
    return source(fmt or detect_format(src)).convert(src, out_dir, prefix, options, progress, accounted)
