"""Kineto (PyTorch profiler) traces alone, without an execution trace: a host trace rebuilt from
the profiler's CPU events (host), then converted as PyTorch traces are (job)."""
