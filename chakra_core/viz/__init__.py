"""Pictures of traces: graph rendering, timelines (Chrome trace / Perfetto JSON), plots."""
