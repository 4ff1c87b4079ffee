#!/usr/bin/env bash
# Set up, then run the whole test suite (pytest arguments pass through).
set -euo pipefail
cd "$(dirname "$0")"
scripts/setup.sh
exec .venv/bin/python -m pytest -q "$@"
