"""ASTRA-sim 1.0 text workloads to Chakra: the grammar (grammar) and the training loop (workload)."""
