"""Which converter reads an input, by its content: a FlexFlow task graph (graphviz), an
ASTRA-sim 1.0 text workload, or PyTorch traces (everything else: JSON, folders, bundles).

The two single-file sources are read whole (`source_file.read_source`), within the `source_bytes` limit.
`convert_source` runs the converter and writes the job through `convert.job`: NAME.<npu>.et,
NAME.comm_groups.json and NAME.report.json, as for PyTorch.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import fsspec

from chakra_core.convert.source_file import SourceOptionError, SourceOptions
from chakra_core.inputs import open_raw

FORMATS = ("pytorch", "flexflow", "text")
HEAD_BYTES = 4096
_DOT = re.compile(rb"^(?:\xef\xbb\xbf)?\s*(?:strict\s+)?digraph\b", re.IGNORECASE)
# a policy word alone on line 1 (DLRM adds a number, HYBRID_TRANSFORMER key: value pairs), the layer count on line 2
_TEXT = re.compile(rb"^(?:\xef\xbb\xbf)?[ \t]*[A-Z][A-Z_]*(?:[ \t][^\r\n]*)?\r?\n[ \t]*\d+[ \t]*(?:\r?\n|$)")


TEXT_OPTIONS = ("npus", "passes", "npu_frequency_mhz", "first_dim_npus")
OPTION_FLAGS = {"npus": "--npus", "passes": "--passes", "npu_frequency_mhz": "--npu-frequency",
                "first_dim_npus": "--first-dim-npus", "time_unit": "--time-unit"}


def detect_format(src: str) -> str:
    """'flexflow' or 'text' when the file's first bytes say so, else 'pytorch'."""
    fs, path = fsspec.core.url_to_fs(src)
    if not fs.isfile(path):
        return "pytorch"
    with open_raw(src) as f:
        head = f.read(HEAD_BYTES)
    if _DOT.match(head):
        return "flexflow"
    return "text" if _TEXT.match(head) else "pytorch"


def check_options(fmt: str, options: SourceOptions) -> None:
    """Refuses options given for another format than the input's."""
    given = [name for name in OPTION_FLAGS if getattr(options, name) != getattr(SourceOptions(), name)]
    own = TEXT_OPTIONS if fmt == "text" else ("time_unit",) if fmt == "flexflow" else ()
    stray = [OPTION_FLAGS[name] for name in given if name not in own]
    if stray:
        verb = "do" if len(stray) > 1 else "does"
        raise SourceOptionError(f"{' and '.join(stray)} {verb} not apply to a {fmt} input")
    if fmt == "text" and options.npus is None:
        raise SourceOptionError("an ASTRA-sim text workload needs --npus N (the NPUs to run it on)")


def convert_source(src: str, out_dir: str, prefix: str, fmt: str | None = None,
                   options: SourceOptions = SourceOptions(),
                   progress: Callable[[str, int, int], None] | None = None):
    """Convert `src` (format detected unless given) into out_dir; returns a convert.job.JobResult."""
    from chakra_core.convert.job import convert_job, write_converted

    fmt = fmt or detect_format(src)
    if fmt not in FORMATS:
        raise SourceOptionError(f"unknown source format {fmt!r}; expected one of {', '.join(FORMATS)}")
    check_options(fmt, options)
    if fmt == "pytorch":
        return convert_job(src, out_dir, prefix, progress=progress)
    if fmt == "flexflow":
        from chakra_core.convert.flexflow import convert_graph

        converted = convert_graph(src, options.time_unit)
    else:
        from chakra_core.convert.text import convert_workload

        converted = convert_workload(src, options)
    return write_converted(converted.job, out_dir, prefix, converted.source, converted.mismatches)
