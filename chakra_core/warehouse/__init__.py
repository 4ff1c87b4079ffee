"""The warehouse: the fleet's tables in Apache Iceberg, one package for their files, commits and reads.

- catalog.py: where each warehouse's Iceberg catalog is (an SQL catalog; an SQLite file beside a
  local warehouse by default) and its tables, created or evolved from their declarations;
- parts.py: a table's data files as workers write them (`tables/<t>/data/date=<d>/<name>.parquet`);
- commit.py: a night's files compacted, then published with one atomic commit per table that
  replaces the day's partition;
- snapshots.py: what a reader sees: a table's data files in the current snapshot or in one
  `as_of` a time or a night's run id, a day of a table, the history window;
- query.py: DuckDB views over those files (`chakra query`, the report pages, `chakra diff`);
- migrate.py: a warehouse of one Parquet file per table and day, converted into this form.
"""
