"""Runs every fuzz target under a memory cap and a CPU-time cap; exit 0 when all hold.

    .venv/bin/python tests/fuzz/run.py            # CHAKRA_FUZZ_EXAMPLES cases per target (default 40)
    CHAKRA_FUZZ_EXAMPLES=5000 .venv/bin/python tests/fuzz/run.py
"""

from __future__ import annotations

import resource
import sys
import time
import traceback
from pathlib import Path

MEMORY_CAP = 2 << 30      # bytes of data segment: a target that needs more has lost its bounds
CPU_SECONDS = 600


def main() -> int:
    resource.setrlimit(resource.RLIMIT_DATA, (MEMORY_CAP, MEMORY_CAP))
    resource.setrlimit(resource.RLIMIT_CPU, (CPU_SECONDS, CPU_SECONDS))
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import targets

    failed = 0
    for target in targets.TARGETS:
        started = time.monotonic()
        try:
            target()
        except Exception:  # noqa: BLE001 - any escape is the finding
            failed += 1
            print(f"FAILED {target.__name__}:\n{traceback.format_exc()}")
        else:
            print(f"ok {target.__name__}: {targets.EXAMPLES} cases in {time.monotonic() - started:.1f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
