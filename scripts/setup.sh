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
    .venv/bin/python -m pip install --quiet --disable-pip-version-check --no-build-isolation --no-deps -e . 2> >(grep -v "^WARNING: Location" >&2)
    echo "$want" > "$stamp"
fi

# Graphviz's `dot` renders `chakra visualize` images (png/svg/pdf); dot and graphml output do
# without it. Installed from the system's packages where this user may.
if ! command -v dot >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "setup: installing Graphviz (apt-get install graphviz)" >&2
        apt-get install -y -qq graphviz >/dev/null 2>&1 || (apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq graphviz >/dev/null 2>&1) \
            || echo "setup: could not install Graphviz; chakra visualize writes only .dot and .graphml" >&2
    else
        echo "setup: Graphviz's dot is missing; chakra visualize writes only .dot and .graphml (install graphviz)" >&2
    fi
fi
