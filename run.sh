#!/usr/bin/env bash
# The main job (until the nightly flow exists): set up, then decode, validate and summarise
# every trace shipped in datasets/ (and the shared reference traces when ../shared is
# beside the checkout) into Parquet tables under out/survey/.
set -euo pipefail
cd "$(dirname "$0")"
scripts/setup.sh
roots=(datasets)
[ -d ../shared/data/astra-sim-microbenchmarks ] && roots+=(../shared/data/astra-sim-microbenchmarks)
exec .venv/bin/chakra survey "${roots[@]}" --out out/survey
