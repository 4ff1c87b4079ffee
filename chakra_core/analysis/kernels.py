"""Device work by family: which kind of work a kernel, copy or communication is, by its name.

FAMILIES is the one table of rules, in order, first match wins (case-insensitive regular
expressions searched anywhere in the name). The order matters where names share words:
cuDNN's fused attention kernels are named `..._sdpa_..._flash_...` and contain gemm tiles,
convolution kernels are implicit GEMMs, the optimizer's multi-tensor kernels are templates over
elementwise functors, so each of those comes before the family its name would otherwise fall
into. A name no rule matches is `other`. Both NCCL kernel name forms (`ncclKernel_*`, older,
and `ncclDevKernel_*`, current) are communication; communication nodes of a trace are
communication whatever their name (device_work.py).

XLA ops converted from a JAX profile carry their HLO category in their name (`fusion.3
xla:gemm`, convert/jax/emit.py): a fusion or custom call around a convolution or a dot is
convolution or gemm, other fusions `fusion`, copies `copy`, collectives communication. Those
rules come first, so an instruction named after its fused ops (`copy_subtract_fusion`) is
taken by its category, not by its name.
"""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa

COMMUNICATION = "communication"
OTHER = "other"

FAMILIES: tuple[tuple[str, str], ...] = (
    ("convolution", r" xla:convolution$"),
    ("gemm", r" xla:gemm$"),
    ("fusion", r" xla:fusion$"),
    ("copy", r" xla:copy$"),
    (COMMUNICATION, r" xla:collective$"),
    (COMMUNICATION, r"nccl(dev)?kernel|^nccl|rccl|c10d::|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all"),
    ("memcpy_htod", r"memcpy htod|memcpy.*host.*->.*device"),
    ("memcpy_dtoh", r"memcpy dtoh|memcpy.*device.*->.*(host|pinned|pageable)"),
    ("memcpy_dtod", r"memcpy (dtod|ptop)|memcpy.*device.*->.*device"),
    ("memset", r"^memset"),
    ("optimizer", r"multi_tensor_apply|fused_?adam|adamw?_|lamb_|sgd_|_foreach_"),
    ("attention", r"flash|fmha|sdpa|attention|attn|dot_do_o|convert_dq"),
    ("convolution", r"conv(?!ert)|wgrad|dgrad|fprop|winograd|implicit_?gemm|im2col"),
    ("gemm", r"gemm|gemv|nvjet|cutlass|cublas|xmma|matmul|splitkreduce|bmm"),
    ("normalisation", r"layer_?norm|batch_?norm|group_?norm|rms_?norm|instance_?norm|gammabeta|welford"),
    ("triton", r"^triton"),
    ("reduction", r"reduce|reduction|softmax|cross_?entropy|nll_?loss|argmax|argmin|topk|scan|cub::"),
    ("elementwise", r"elementwise|vectorized|unrolled|pointwise|fill|copy_kernel|catarraybatchedcopy|index|where|"
                    r"dropout|embedding|gather|scatter"),
)
FAMILY_NAMES: tuple[str, ...] = tuple(dict.fromkeys(name for name, _ in FAMILIES)) + (OTHER,)
_RULES = tuple((name, re.compile(pattern, re.IGNORECASE)) for name, pattern in FAMILIES)


def family(name: str) -> str:
    return next((fam for fam, rule in _RULES if rule.search(name)), OTHER)


def families(names: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """The family of every name (as numpy strings; a null name's is the empty name's), each
    distinct name classified once: names plain or dictionary-encoded (format/nodenames.py)."""
    if isinstance(names, pa.ChunkedArray):
        names = names.combine_chunks()
    encoded = names if pa.types.is_dictionary(names.type) else names.cast(pa.string()).dictionary_encode()
    distinct = encoded.dictionary.to_pylist()
    table = np.array([family(n or "") for n in distinct] + [family("")], dtype=object)
    return table[encoded.indices.fill_null(len(distinct)).to_numpy(zero_copy_only=False)]
