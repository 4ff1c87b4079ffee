"""What every command group shares: exit statuses, JSON on stdout, per-file error handling.

Imports only the standard library and chakra_core's light modules: each command imports what
it uses inside its function, so that `chakra --help` and the light commands start fast.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections.abc import Callable

from chakra_core import limits
from chakra_core.errors import ChakraError
from chakra_core.terminal import Progress

EXIT_OK, EXIT_FINDINGS, EXIT_BAD_INPUT = 0, 1, 2
MEMORY_SIZE = re.compile(r"^([0-9]+(?:\.[0-9]+)?)\s*([KMGT])(i?)B$", re.IGNORECASE)
FACTOR_RANGE = (1e-6, 1e6)  # a scale or speed beyond makes times of hundreds of digits, or none at all


def factor(text: str) -> float:
    """An option that scales a time (--compute-scale, --comm-scale, an NPU's speed): a finite
    number within FACTOR_RANGE; inf, nan, 0 and negatives are refused by argparse in one line."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not FACTOR_RANGE[0] <= value <= FACTOR_RANGE[1]:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a number from {FACTOR_RANGE[0]:g} to "
                                         f"{FACTOR_RANGE[1]:g}")
    return value


def positive_int(text: str) -> int:
    """A count that must be at least 1 (NPUs, jobs, iterations), below 2**31."""
    try:
        value = int(text) if text.strip().isascii() else 0  # int() reads other scripts' digits too
    except ValueError:  # not a number, or thousands of digits
        value = 0
    if not 0 < value < 2**31:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number from 1 to {2**31 - 1:,}")
    return value


def npu_count(text: str) -> int:
    """NPUs of a network to write or simulate: a whole number from 1 to the `npus` limit."""
    value = positive_int(text)
    most = limits.value("npus")
    if value > most:
        raise argparse.ArgumentTypeError(f"{text!r}: more NPUs than the limit of {most:,} "
                                         f"({limits.LIMITS['npus'].env} raises it)")
    return value


def milliseconds(text: str) -> float:
    """A measured time in ms: above 0, at most a day."""
    value = positive_number(text)
    if value > 86_400_000:
        raise argparse.ArgumentTypeError(f"{text!r}: expected milliseconds from above 0 to 86,400,000 (a day)")
    return value


def positive_number(text: str) -> float:
    """A finite number above 0 (a clock in MHz, a timeout in seconds, a time in ms)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"{text!r}: expected a finite number above 0")
    return value


def memory_bytes(text: str) -> float:
    """The bytes of a memory size written as DuckDB reads it (`512MB`, `2GB`, `1.5GiB`); 0 if it is not one."""
    match = MEMORY_SIZE.match(text.strip())
    if not match:
        return 0.0
    return float(match[1]) * (1024 if match[3] else 1000) ** ("KMGT".index(match[2].upper()) + 1)


def memory_size(text: str) -> str:
    """A memory size as DuckDB reads it (`512MB`, `2GB`, `1.5GiB`), from 64 MB to 1 TiB."""
    value = memory_bytes(text)
    if not 64e6 <= value <= 2**40:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a size such as 512MB or 4GB, from 64MB to 1TiB")
    return text.strip()


def seconds(text: str) -> float:
    """A time limit in seconds: above 0, at most a day."""
    value = positive_number(text)
    if value > 86400:
        raise argparse.ArgumentTypeError(f"{text!r}: expected seconds from above 0 to 86,400 (a day)")
    return value


def listed(names: list, most: int = 12) -> str:
    """Names for a one-line message: all of them, or the last `most` of a longer list with how many there are."""
    shown = [str(n) for n in names]
    if len(shown) <= most:
        return ", ".join(shown)
    return f"..., {', '.join(shown[-most:])} ({len(shown)} in all)"


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


