"""A toy trace source (tests/test_sources.py): this module and one `Source` entry are all a new
format needs to be converted by `chakra convert` and by the nightly flow.

A toy workload is text: `TOY <npus>` on line 1, then `<name> <microseconds>` per line. Every
NPU computes the lines in order, then all-reduces 1 MiB."""

from __future__ import annotations

import re

from chakra_core.convert.common.source_file import Converted, read_source
from chakra_core.convert.sources import FileRule, Source
from chakra_core.errors import SourceFormatError
from chakra_core.generate.builder import JobBuilder


def convert_toy(src: str, out_dir: str, prefix: str, options, progress, accounted):
    lines = read_source(src).splitlines()
    header = lines[0].split()
    if len(header) != 2 or not header[1].isdigit() or not 0 < int(header[1]) <= 64:
        raise SourceFormatError(src, "line 1: expected TOY <npus>", line=1)
    builder = JobBuilder(int(header[1]))
    for rank in range(builder.npus):
        graph, last = builder.rank(rank), None
        for line in lines[1:]:
            name, micros = line.split()
            last = graph.compute(name, [last], duration_us=int(micros))
        graph.collective("allreduce", "ALL_REDUCE", 1 << 20, [last])
    source = {"format": "toy workload", "file": src, "time": "microseconds", "notes": []}
    return Converted(builder.job("toy"), source, []).write(out_dir, prefix)


SOURCE = Source("toy", "a toy workload", "a toy workload",
                FileRule("toy_workload", re.compile(r"^.+\.toy$"), "a toy <name>.toy"),
                "toy_source:convert_toy", single_file=True, detect=lambda head: head.startswith(b"TOY "))
