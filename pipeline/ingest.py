"""List a day's drop: jobs, their files, what kind each file is, and its content hash."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field

from pipeline.layout import day_url, filesystem

PYTORCH_ET = re.compile(r"^rank(\d+)\.et\.json(\.gz)?$")
KINETO = re.compile(r"^rank(\d+)\.kineto\.json(\.gz)?$")
CHAKRA_ET = re.compile(r"^(.+)\.(\d+)\.et(\.gz)?$")
HASH_CHUNK = 4 << 20


@dataclass
class InputFile:
    url: str
    name: str  # path relative to the day folder, e.g. "job7/rank0.et.json.gz"
    bytes: int
    kind: str  # pytorch_et, kineto, chakra_et, job_json, unknown


@dataclass
class JobInput:
    job_id: str
    url: str
    files: list[InputFile] = field(default_factory=list)

    @property
    def trace_format(self) -> str:
        kinds = {f.kind for f in self.files}
        if "pytorch_et" in kinds:
            return "pytorch_et"
        return "chakra_et" if "chakra_et" in kinds else "none"


def kind_of(name: str) -> str:
    if PYTORCH_ET.match(name):
        return "pytorch_et"
    if KINETO.match(name):
        return "kineto"
    if CHAKRA_ET.match(name):
        return "chakra_et"
    return "job_json" if name == "job.json" else "unknown"


def list_day(source: str, date: str) -> tuple[list[JobInput], list[InputFile]]:
    """The day's job folders, and files lying outside any job folder."""
    day = day_url(source, date)
    fs, root = filesystem(day)
    if not fs.exists(root):
        raise FileNotFoundError(f"{day}: no drop for {date}")
    jobs, loose = [], []
    for entry in sorted(fs.ls(root, detail=True), key=lambda e: e["name"]):
        name = entry["name"].rstrip("/").rsplit("/", 1)[-1]
        if entry["type"] == "directory":
            job = JobInput(name, fs.unstrip_protocol(entry["name"]))
            for path, info in sorted(fs.find(entry["name"], detail=True).items()):
                relative = path[len(entry["name"].rstrip("/")) + 1:]
                job.files.append(InputFile(fs.unstrip_protocol(path), f"{name}/{relative}", int(info.get("size") or 0),
                                           kind_of(relative) if "/" not in relative else "unknown"))
            jobs.append(job)
        else:
            loose.append(InputFile(fs.unstrip_protocol(entry["name"]), name, int(entry.get("size") or 0), "unknown"))
    return jobs, loose


def sha256(url: str) -> str:
    fs, path = filesystem(url)
    digest = hashlib.sha256()
    with fs.open(path, "rb") as f:
        for chunk in iter(lambda: f.read(HASH_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()
