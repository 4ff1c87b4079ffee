"""How a job's files are named on disk (format/job.py writes and reads them; the registry of
sources, convert/sources.py, takes Chakra ETs by these names), and how the JSON traces Chakra
ETs are converted from are told by their first bytes (the registry's detectors; the reader's
advice on a file that is not an ET): standard library only, so that naming a file costs no import."""

from __future__ import annotations

import re

COMM_GROUPS_SUFFIX = ".comm_groups.json"
RANK_FILE = re.compile(r"^(?P<prefix>.+)\.(?P<rank>[0-9]+)\.et(?P<gz>\.gz)?\Z")  # ASCII digits to the very end


def split_rank_url(url: str) -> tuple[str, int] | None:
    """``.../job.3.et[.gz]`` -> (``.../job``, 3); None for a name outside the layout."""
    match = RANK_FILE.match(url)
    return (match["prefix"], int(match["rank"])) if match else None


# A Chrome trace written by the PyTorch profiler (Kineto): its own top-level members, and no ET `nodes`.
KINETO_HEAD = re.compile(rb'^\s*\{.*?"(?:traceEvents|schemaVersion|deviceProperties|distributedInfo)"\s*:', re.DOTALL)
ET_NODES = re.compile(rb'"nodes"\s*:\s*\[')


def is_kineto_head(head: bytes) -> bool:
    return KINETO_HEAD.match(head) is not None and ET_NODES.search(head) is None


def is_pytorch_et_head(head: bytes) -> bool:
    return re.match(rb'^\s*\{\s*"schema"\s*:', head) is not None or ET_NODES.search(head) is not None
