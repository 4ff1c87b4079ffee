"""Traces on a real runtime: replay a job on torch.distributed (``launch`` drives one process
per rank, each running ``worker``) and fit the analytical model to measured time
(``calibrate``). See docs/replay.md."""
