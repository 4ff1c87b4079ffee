"""Ad hoc sweeps: jobs from anywhere simulated on grids of systems, in batches on Ray
(docs/sweeps.md, docs/architecture.md)."""
