"""What every command group shares: exit statuses, JSON on stdout, per-file error handling.

Imports only the standard library and chakra_core's light modules: each command imports what
it uses inside its function, so that `chakra --help` and the light commands start fast.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable

from chakra_core.errors import ChakraError
from chakra_core.terminal import Progress

EXIT_OK, EXIT_FINDINGS, EXIT_BAD_INPUT = 0, 1, 2


def print_json(document, **options) -> None:
    json.dump(document, sys.stdout, indent=1, **options)
    sys.stdout.write("\n")


def per_file(urls: list[str], command: str, label: str, work: Callable[[str], object]) -> tuple[list, int]:
    """[(url, work(url))] for the files that work, and how many did not: each of those is
    reported as one line on stderr and the others go on."""
    done_ok, failed = [], 0
    with Progress(items=True) as progress:
        for done, url in enumerate(urls):
            progress(label, done, len(urls))
            try:
                done_ok.append((url, work(url)))
            except ChakraError as exc:
                print(f"chakra {command}: {exc}", file=sys.stderr)
                failed += 1
    return done_ok, failed


def human_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)
