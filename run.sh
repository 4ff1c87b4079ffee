#!/usr/bin/env bash
# The main job: set up; put two consecutive days' drops (recorded PyTorch jobs, generated jobs, a
# FlexFlow graph and an ASTRA-sim text workload, a few corrupt files; the second day carries
# tools/drift.py's injected regression) into the local object-store folder
# out/object-store/drops/<day>/; run the nightly flow on both (local Ray, Prefect's ephemeral API,
# the default sweep) into out/warehouse/; the second night flags what changed. It ends with one
# DuckDB query over the tables (chakra query), sweep plots in out/plots/, a simulated timeline in
# out/timelines/ and, last, where the report pages are.
set -euo pipefail
cd "$(dirname "$0")"
scripts/setup.sh
read -r previous day < <(.venv/bin/python -m tools.drift --demo-days)
source_url="file://$PWD/out/object-store/drops"
warehouse_url="file://$PWD/out/warehouse"
for d in "$previous" "$day"; do
    .venv/bin/python -m tools.make_drop --root "$source_url" --date "$d" --other-formats
done
.venv/bin/python -m flows.nightly --date "$previous" --date "$day" --source "$source_url" \
    --warehouse "$warehouse_url" | tee out/nightly.log | grep --line-buffered -v '^report'  # each night as it ends
echo "DuckDB over the tables (chakra query): exposed communication by topology and NPU count"
.venv/bin/chakra query --warehouse "$warehouse_url" "
    SELECT topology, npus, count(*) AS jobs, round(avg(max_exposed_comm_ns) / 1e6, 3) AS avg_exposed_comm_ms,
           round(avg(finish_ns) / 1e6, 3) AS avg_finish_ms
    FROM sim_results WHERE status = 'ok' AND date = '$day' GROUP BY ALL ORDER BY npus, topology"

# pictures: sweep plots from the tables, and one job's simulated timeline (open in ui.perfetto.dev)
tables="out/warehouse/tables"
mkdir -p out/plots out/timelines
.venv/bin/chakra plot runtime-vs-npus "$tables/sim_results" -o out/plots/runtime_vs_npus.png
.venv/bin/chakra plot compute-vs-exposed "$tables/sim_results" -o out/plots/compute_vs_exposed.png
.venv/bin/chakra plot message-sizes "$tables/collectives" -o out/plots/message_sizes.png
.venv/bin/chakra plot rank-imbalance "$tables/collectives" -o out/plots/rank_imbalance.png
job=gen-dp-000-n8
.venv/bin/chakra timeline --workload "out/warehouse/traces/date=$day/job=$job/$job" \
    --network pipeline/sweeps/Ring_8npus.yml --system pipeline/sweeps/ring_system.json -o "out/timelines/$job.json"
echo "plots: out/plots/*.png; timeline: out/timelines/$job.json (ui.perfetto.dev)"
echo "flagged changes on $day: chakra query --warehouse out/warehouse \"SELECT * FROM regressions WHERE date = '$day'\""
grep '^report' out/nightly.log  # each day's page, then the index of days: last, where a newcomer looks
