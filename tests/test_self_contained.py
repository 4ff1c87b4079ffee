"""The repository stands on its own: nothing in code, tests, docs or scripts reads or cites a
file outside the checkout (a user's clone has nothing beside it)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SKIP_DIRS = {".git", ".venv", "out", "build", "__pycache__", ".pytest_cache", ".hypothesis"}
TEXT_SUFFIXES = {".py", ".md", ".sh", ".yaml", ".yml", ".toml", ".json", ".txt", ".c", ".h", ".proto", ".cfg", ""}

OUTSIDE = re.compile("|".join([
    r"\.\./" + "shared",                       # the sibling reference folder
    r"parents?\[\d\]\s*/\s*\"" + "shared",    # Path(...).parents[2] / "shared"
    r"REPO\.parent\s*/",                      # anything beside the checkout
    r"(?<![\w./])/(?:(?:work|root|Users|mnt)/|home/(?!ray/))",   # this machine's paths (/home/ray: Ray's image)
    r"[A-Z_]+_" + "FACTS" + r"\.md", r"\b" + "DESIGN" + r"\.md", r"facts (?:sheet|section)",
]))


def _text_files():
    for path in REPO.rglob("*"):
        rel = path.relative_to(REPO)
        if any(part in SKIP_DIRS or part.endswith(".egg-info") for part in rel.parts) or not path.is_file():
            continue
        if path == Path(__file__).resolve():  # its patterns name what they look for
            continue
        if path.suffix in TEXT_SUFFIXES and path.stat().st_size < 2_000_000:
            yield rel, path


def test_no_reference_outside_the_checkout():
    found = []
    for rel, path in _text_files():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if OUTSIDE.search(line):
                found.append(f"{rel}:{number}: {line.strip()[:120]}")
    assert not found, "references outside the repository:\n" + "\n".join(found)


def test_the_scan_sees_what_it_must_refuse():
    for bad in ["WORKDIR /home/alice/p", "see ../" + "shared/data", 'Path(__file__).parents[2] / "' + "shared" + '"',
                '"/' + 'work/shared/x.et"', "ASTRA_SIM_MODEL_" + "FACTS.md", "the facts " + "sheet says"]:
        assert OUTSIDE.search(bad), bad
    for good in ["/tmp/x", "datasets/pytorch-et", "shared_buffer", "file:///dev/null", "s3://work/x", "WORKDIR /home/ray/chakra-fleet"]:
        assert not OUTSIDE.search(good), good
