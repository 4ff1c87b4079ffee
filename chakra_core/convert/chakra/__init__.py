"""Chakra ETs as a source: a job already in Chakra's format, copied and checked (copy)."""
