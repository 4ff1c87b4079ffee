"""Scripts that make the repository's data, run from the repository root: ``python -m
tools.make_drop`` (a day's drop for the nightly flow) and ``python -m tools.collect``
(recording PyTorch runs into datasets/pytorch-gloo; ``programlog``: what a recorded run issued).
datasets/ holds data only."""
