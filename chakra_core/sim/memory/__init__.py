"""The memory layer: how long a load or store takes (local)."""
