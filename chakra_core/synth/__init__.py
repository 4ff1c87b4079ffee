"""Synthetic Chakra ETs: building per-NPU graphs, generating whole training jobs, learning from real ones.

Modules:

- ``builder``: the node-table and graph API (``NODE_COLUMNS``, ``node_table``, ``RankGraph``,
  ``JobBuilder``, ``write_job``) that everything here writes ETs with;
- ``workloads``: canned jobs (``mlp``, ``dlrm``, ``transformer``) for any NPU count, sized
  from model dimensions and a parallelism description (``generate``, ``WORKLOADS``);
- ``master``, ``profile``, ``supersequence``, ``mixture``, ``model``, ``sample``,
  ``fidelity``, ``synthesize``: learning a generative model from real traces (their master
  trace and profile), sampling new jobs from it and judging how faithful they are
  (``chakra synthesize``);
- ``select`` (with ``fleet`` and ``reference``): choosing representative jobs of a fleet.

Each module's docstring has the details.
"""
