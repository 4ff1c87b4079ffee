"""What the two single-file converters (FlexFlow graphs, ASTRA-sim text workloads) share:
their options, their result and how their file is read (convert.sources picks one of them)."""

from __future__ import annotations

from dataclasses import dataclass

from chakra_core import limits
from chakra_core.errors import ChakraError, SourceFormatError
from chakra_core.format.job import Job
from chakra_core.inputs import read_bounded


class SourceOptionError(ChakraError):
    """Options that do not fit the input, or out of range (one line naming them)."""


@dataclass(frozen=True)
class SourceOptions:
    """What the single-file formats need beyond the file: see docs/other-sources.md."""

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
