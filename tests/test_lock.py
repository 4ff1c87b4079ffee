"""The environment is the locked one: every package of requirements.lock is installed at its pin.

scripts/setup.sh installs the lock; an environment that drifted (a package upgraded by hand, an
install that resolved on its own) fails here, naming each package, instead of failing later in
ways like Prefect's scheduler under SQLAlchemy 2.1.
"""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

from packaging.utils import canonicalize_name
from packaging.version import Version

LOCK = Path(__file__).resolve().parents[1] / "requirements.lock"
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==(\S+)")


def _pins() -> dict[str, str]:
    return {canonicalize_name(m[1]): m[2] for line in LOCK.read_text().splitlines() if (m := PIN.match(line))}


def _installed(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def test_lock_pins_the_constraints_that_matter():
    pins = _pins()
    assert Version(pins["sqlalchemy"]).release[:2] == (2, 0)  # 2.1 breaks prefect 3.8.8's scheduler
    assert pins["torch"] == "2.13.0+cpu"
    assert pins["prefect"] == "3.8.8" and pins["ray"] == "2.60.0"
    assert not [name for name in pins if name.startswith(("nvidia-", "cuda-")) or name == "triton"]


def test_installed_versions_match_the_lock():
    drift = {name: (want, _installed(name)) for name, want in _pins().items()
             if _installed(name) is None or Version(_installed(name)) != Version(want)}
    assert not drift, "not the locked versions (run scripts/setup.sh): " + ", ".join(
        f"{name} {have} (lock: {want})" for name, (want, have) in sorted(drift.items()))
