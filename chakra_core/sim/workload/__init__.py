"""The workload layer: each NPU's dependency graph (feeder), its decoded nodes (nodes), the
hardware slots and the issue loop (issue); communication nodes go down to the system layer."""
