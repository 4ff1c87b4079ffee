"""Prefect flows orchestrating the pipeline: nightly (a whole day) and sweep (ad hoc what-ifs)."""
