"""The learned synthesizer: a generative model fitted to a fleet's real traces that samples
new, obfuscated jobs for any NPU count (``chakra synthesize``).

- ``master``, ``profile``, ``supersequence``: what a job is reduced to before fitting (its
  lossless master trace and per-node profile; pipeline stages merged into one program);
- ``mixture``, ``model``: the fitted model (Gaussian mixtures, a Markov token chain) and its
  file; ``fit``: fitting it;
- ``program``, ``sample``: new jobs for any N (one SPMD program, then each rank's table);
  ``fidelity``: how faithful they are; ``synthesize``: the command's driver.

Writing graphs is the generator's (chakra_core.generate); choosing representative jobs is
analysis (chakra_core.analysis.select).
"""
