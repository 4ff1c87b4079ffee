#!/usr/bin/env bash
# Idempotent set-up on a fresh machine: a .venv at the repository root with exactly the versions
# of requirements.lock (the core dependencies and those of every extra: viz, synth, fleet, s3,
# torch and dev; its header says how to regenerate it), then the project (and its C codec)
# installed editable without dependencies, so the extras declared in pyproject.toml never
# resolve anything here. Re-runs are quick: the install is redone only when the lock, the packaging files
# or the C source change.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null 2>&1 || PYTHON=python3
"$PYTHON" - <<'PY' || { echo "setup: Python 3.11 is required (set PYTHON=/path/to/python3.11)" >&2; exit 1; }
import sys
sys.exit(0 if sys.version_info[:2] == (3, 11) else 1)
PY

if [ ! -x .venv/bin/python ]; then
    echo "setup: creating .venv" >&2
    "$PYTHON" -m venv .venv
fi

stamp=.venv/.chakra-install-stamp
want=$(cat requirements.lock pyproject.toml setup.py chakra_core/_native/*.c chakra_core/_native/*.h | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ] || [ ! -x .venv/bin/chakra ]; then
    echo "setup: installing requirements.lock and the project into .venv (first run takes a few minutes)" >&2
    .venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip 2> >(grep -v "^WARNING: Location" >&2)
    .venv/bin/python -m pip install --quiet --disable-pip-version-check -r requirements.lock 2> >(grep -v "^WARNING: Location" >&2)
    # The lock has every dependency (setuptools for the C build included): no resolving here.
    # PYTHONWARNINGS: no setuptools warning box about editable installs on every fresh set-up
    PYTHONWARNINGS=ignore .venv/bin/python -m pip install --quiet --disable-pip-version-check --no-build-isolation \
        --no-deps -e . 2> >(grep -v "^WARNING: Location" >&2)
    echo "$want" > "$stamp"
fi

# System packages some features need, installed from the system's packages where this user
# may: system_package COMMAND PACKAGE WHAT-LACKS-WITHOUT-IT
system_package() {
    command -v "$1" >/dev/null 2>&1 && return 0
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "setup: installing $2 (apt-get install $2)" >&2
        apt-get install -y -qq "$2" >/dev/null 2>&1 || (apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq "$2" >/dev/null 2>&1) \
            || echo "setup: could not install $2; $3" >&2
    else
        echo "setup: $1 is missing; $3 (install $2)" >&2
    fi
}
# Graphviz's `dot` renders `chakra visualize` images (png/svg/pdf); dot and graphml output do without it.
system_package dot graphviz "chakra visualize writes only .dot and .graphml"
# Chromium renders the daily report page headless in its test (tests/test_report.py).
system_package chromium chromium "the report page's rendering test cannot run"
