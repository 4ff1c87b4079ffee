"""PyTorch execution traces (+ Kineto traces beside them) to Chakra: reading (et, kineto), a rank's
analysis and emission (analysis, conversion), a whole job (discover, job) and recording (collect)."""
