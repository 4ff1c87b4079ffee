"""Where the test data lives: every file a test reads is inside the repository (datasets/)."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATASETS = REPO / "datasets"
MICROBENCHMARKS = DATASETS / "astra-sim-microbenchmarks"   # <collective>/<N>npus_1MB/<collective>.<rank>.et
REFERENCE = DATASETS / "astra-sim-reference"               # results.csv: ASTRA-sim's finish times
REFERENCE_CONFIGS = REFERENCE / "configs"                  # network YAMLs and system JSONs
PYTORCH_ET = DATASETS / "pytorch-et"                       # PyTorch execution traces from other tools
GLOO = DATASETS / "pytorch-gloo"                           # the project's own recorded gloo runs
GPU_H200 = DATASETS / "gpu-h200"                           # the project's H200 runs (docs/gpu.md)
KINETO_NCCL = DATASETS / "kineto-nccl"                     # Kineto traces alone of 2023 NCCL jobs (HTA)
JAX_CPU = DATASETS / "jax-cpu"                             # JAX runs on 4 host devices (docs/jax.md)
JAX_CPU_HELDOUT = DATASETS / "jax-cpu-heldout"             # JAX runs recorded here with tools/record_jax.py
JAX_GPU = DATASETS / "jax-gpu-h200"                        # a JAX run on one H200 (docs/jax.md)
