"""The test-case generator: build per-NPU graphs and whole jobs from a description
(``builder``: ``RankGraph``, ``JobBuilder``, ``node_table``), canned training jobs for any
NPU count sized from model dimensions (``workloads``: ``chakra generate``) and the five job
families of the nightly drop (``families``: ``tools/make_drop.py``)."""
