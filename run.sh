#!/usr/bin/env bash
# The main job: set up; put a day's drop (recorded PyTorch jobs, generated jobs, a few corrupt
# files) into the local object-store folder out/object-store/drops/<day>/; run the nightly
# flow on it (local Ray, Prefect's ephemeral API, the default sweep) into out/warehouse/;
# end with its summary, the table paths, and one DuckDB query over the tables.
set -euo pipefail
cd "$(dirname "$0")"
scripts/setup.sh
day=$(date -u -d yesterday +%F 2>/dev/null || date -u -v-1d +%F)
source_url="file://$PWD/out/object-store/drops"
warehouse_url="file://$PWD/out/warehouse"
.venv/bin/python datasets/make_drop.py --root "$source_url" --date "$day"
.venv/bin/python -m flows.nightly --date "$day" --source "$source_url" --warehouse "$warehouse_url"
.venv/bin/python scripts/example_query.py out/warehouse
