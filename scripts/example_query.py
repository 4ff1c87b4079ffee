"""Print one DuckDB query over the warehouse tables (the last step of ./run.sh).

    .venv/bin/python scripts/example_query.py [WAREHOUSE_DIR]
"""

from __future__ import annotations

import sys
from pathlib import Path

import duckdb

QUERY = """
SELECT s.topology, s.npus, count(*) AS jobs,
       round(avg(s.max_exposed_comm_ns) / 1e6, 3) AS avg_exposed_comm_ms,
       round(avg(s.finish_ns) / 1e6, 3) AS avg_finish_ms
FROM read_parquet('{wh}/tables/sim_results/*/*.parquet', hive_partitioning = true) AS s
WHERE s.status = 'ok'
GROUP BY s.topology, s.npus
ORDER BY s.npus, s.topology
"""


def main() -> None:
    warehouse = Path(sys.argv[1] if len(sys.argv) > 1 else "out/warehouse")
    sql = QUERY.format(wh=warehouse.as_posix())
    print("DuckDB: exposed communication by topology and NPU count" + sql)
    print(duckdb.sql(sql))


if __name__ == "__main__":
    main()
