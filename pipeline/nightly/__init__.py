"""The nightly day: a day's drop listed, its jobs converted and summarised on Ray, simulated,
compared with their history, represented and synthesised (docs/architecture.md)."""
