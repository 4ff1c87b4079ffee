"""Traces to Chakra ETs: the registry of trace sources (sources), the conventions every converted
trace keeps (conventions), and one folder per source: pytorch/ (execution traces with Kineto),
flexflow/ (task graphs), text/ (ASTRA-sim 1.0 text workloads); common/ holds what sources share."""
