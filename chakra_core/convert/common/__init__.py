"""What the sources share: streamed JSON (jsonstream), single-file sources' options, result and
reading (source_file)."""
