"""The test-case generator: build per-NPU graphs and whole jobs from a description
(``builder``: ``RankGraph``, ``JobBuilder``, ``node_table``) and canned training jobs for any
NPU count (``workloads``: ``chakra generate``)."""
