"""The repository stands on its own: nothing in code, tests, docs or scripts reads or cites a
file outside the checkout (a user's clone has nothing beside it)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SKIP_DIRS = {".git", ".venv", "out", "build", "__pycache__", ".pytest_cache", ".hypothesis"}
TEXT_SUFFIXES = {".py", ".md", ".sh", ".yaml", ".yml", ".toml", ".json", ".txt", ".c", ".h", ".proto", ".cfg", ""}

# The patterns are assembled from pieces, so that this file, scanned like every other,
# names no forbidden reference itself.
SIBLING = "shared"  # the reference folder beside the checkout
OUTSIDE = re.compile("|".join([
    r"\.\./" + SIBLING,                        # the sibling reference folder
    r"parents?\[\d\]\s*/\s*\"" + SIBLING,     # a path built from the checkout's parent
    r"REPO\.parent\s*/",                      # anything beside the checkout
    r"(?<![\w./])/(?:(?:work|root|Users|mnt)/|home/(?!ray/))",   # this machine's paths (Ray's image has home/ray/)
    r"[A-Z_]+_" + "FACTS" + r"\.md", r"\b" + "DESIGN" + r"\.md", r"facts (?:sheet|section)",
]))


def _text_files():
    for path in REPO.rglob("*"):
        rel = path.relative_to(REPO)
        if any(part in SKIP_DIRS or part.endswith(".egg-info") for part in rel.parts) or not path.is_file():
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
    for bad in ["WORKDIR " + "/".join(["", "home", "alice", "p"]), "see " + "/".join(["..", SIBLING, "data"]),
                "Path(__file__).parents[2] / " + f'"{SIBLING}"', '"' + "/".join(["", "work", SIBLING, "x.et"]) + '"',
                "ASTRA_SIM_MODEL_" + "FACTS.md", "the facts " + "sheet says"]:
        assert OUTSIDE.search(bad), bad
    for good in ["/tmp/x", "datasets/pytorch-et", "shared_buffer", "file:///dev/null", "s3://" + "/".join(["work", "x"]), "WORKDIR /home/ray/chakra-fleet"]:
        assert not OUTSIDE.search(good), good
