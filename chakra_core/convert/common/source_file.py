"""What sources share about their input: the options of the single-file converters (FlexFlow
graphs, ASTRA-sim text workloads), their result and how their file is read, and the error of an
input that does not describe a job (convert/sources.py picks the converter)."""

from __future__ import annotations

from dataclasses import dataclass

from chakra_core.convert.sources import SourceOptions  # noqa: F401  (the single-file converters take it from here)
from chakra_core.errors import ChakraError, SourceFormatError
from chakra_core.format.job import Job
from chakra_core.inputs import read_bounded


class JobInputError(ChakraError):
    """An input that does not describe a job this converter can read."""


@dataclass
class Converted:
    """A converted single-file source: the job, what the report says of its source, and
    sends that meet no receive (there should be none)."""

    job: Job
    source: dict
    mismatches: list[str]

    def write(self, out_dir: str, prefix: str):
        """Written as every source's job is (common.result.write_converted); returns its JobResult."""
        from chakra_core.convert.common.result import write_converted

        return write_converted(self.job, out_dir, prefix, self.source, self.mismatches)


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
