"""How a job's files are named on disk (format/job.py writes and reads them; the registry of
sources, convert/sources.py, takes Chakra ETs by these names): standard library only, so that
naming a file costs no import."""

from __future__ import annotations

import re

COMM_GROUPS_SUFFIX = ".comm_groups.json"
RANK_FILE = re.compile(r"^(?P<prefix>.+)\.(?P<rank>\d+)\.et(?P<gz>\.gz)?$")


def split_rank_url(url: str) -> tuple[str, int] | None:
    """``.../job.3.et[.gz]`` -> (``.../job``, 3); None for a name outside the layout."""
    match = RANK_FILE.match(url)
    return (match["prefix"], int(match["rank"])) if match else None
