"""What the two single-file converters (FlexFlow graphs, ASTRA-sim text workloads) share:
their options, their result and how their file is read (convert.sources picks one of them)."""

from __future__ import annotations

from dataclasses import dataclass

from chakra_core import limits
from chakra_core.errors import ChakraError, SourceFormatError
from chakra_core.format.job import Job
from chakra_core.inputs import read_bounded


MAX_PASSES = 1_000_000  # training passes of a text workload: each repeats every layer's nodes


class SourceOptionError(ChakraError):
    """An option of a single-file conversion out of range (one line naming it)."""


@dataclass(frozen=True)
class SourceOptions:
    """What the single-file formats need beyond the file: see docs/other-sources.md."""

    npus: int | None = None                 # text: NPUs to run the workload on
    passes: int = 1                         # text: training passes
    npu_frequency_mhz: float | None = None  # text: cycles -> microseconds (None: cycles kept, as the reference)
    first_dim_npus: int | None = None       # text: NPUs of the first network dimension (hybrid policies)
    time_unit: str = "ms"                   # flexflow: the unit of the graph's run times

    def __post_init__(self):
        """Each number in range (job.json gives them too): 0 NPUs in a dimension divided by zero."""
        for name, low, high in (("npus", 1, limits.value("npus")), ("first_dim_npus", 1, limits.value("npus")),
                                ("passes", 1, MAX_PASSES), ("npu_frequency_mhz", 1e-3, 1e7)):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not low <= value <= high):
                raise SourceOptionError(f"{name} {value!r}: expected a number from {low:,} to {high:,}")


@dataclass
class Converted:
    """A converted single-file source: the job, what the report says of its source, and
    sends that meet no receive (there should be none)."""

    job: Job
    source: dict
    mismatches: list[str]


def read_source(url: str) -> str:
    """The whole file as text (UTF-8), refused beyond the source_bytes limit."""
    try:
        data = read_bounded(url, "source_bytes", "a source file")
    except FileNotFoundError:
        raise SourceFormatError(url, "no such file") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SourceFormatError(url, f"not UTF-8 text (byte {exc.start})", line=data.count(b"\n", 0, exc.start) + 1) \
            from None
