"""Questions asked of traces, each answered as a table: per-trace statistics (``stats``),
file summaries (``info``), fleet surveys (``survey``), validation (``validate``), the
dependency-graph algorithms they share (``graph``), representative selection (``select``,
``fleet``) and SQL over the warehouse (``warehouse``)."""
