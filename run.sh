#!/usr/bin/env bash
# The main job (until the nightly flow exists): set up; convert every recorded PyTorch run in
# datasets/pytorch-gloo/ to one Chakra ET per rank under out/converted/<run>/; then decode,
# validate and summarise every trace shipped in datasets/, the converted ones (and the shared
# reference traces when ../shared is beside the checkout) into Parquet tables under out/survey/.
set -euo pipefail
cd "$(dirname "$0")"
scripts/setup.sh
for run in datasets/pytorch-gloo/*/; do
    name=$(basename "$run")
    mkdir -p out/converted
    .venv/bin/chakra convert "$run" -o "out/converted/$name" --prefix "$name" > "out/converted/$name.log" 2>&1 \
        || { cat "out/converted/$name.log" >&2; exit 1; }
    echo "converted $run -> out/converted/$name/$name.<rank>.et" >&2
done
roots=(datasets out/converted)
[ -d ../shared/data/astra-sim-microbenchmarks ] && roots+=(../shared/data/astra-sim-microbenchmarks)
exec .venv/bin/chakra survey "${roots[@]}" --out out/survey
