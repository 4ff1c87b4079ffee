"""JAX/XLA runs to Chakra: the profiler's XPlane or Chrome-trace output plus the compiled HLO
text (docs/jax.md). `run.convert_jax` is the registry's entry point (`run.convert_jax_run` the conversion), `layout.is_jax_run` its folder detector."""
