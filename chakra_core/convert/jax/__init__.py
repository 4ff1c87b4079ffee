"""JAX/XLA runs to Chakra: the profiler's XPlane or Chrome-trace output plus the compiled HLO
text (docs/jax.md). `run.convert_jax_run` is the entry point, `run.is_jax_run` the detector."""
