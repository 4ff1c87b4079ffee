"""The ASTRA-sim 1.0 text workload: its grammar, read into layers (docs/other-sources.md).

Line 1 is the parallelism policy (HYBRID_DLRM adds the last bottom layer, HYBRID_TRANSFORMER
``model_parallel_NPU_group: N``, HYBRID_TRANSFORMER_FWD_IN_BCKWD also its checkpoints); line 2
the layer count; then one line per layer: name, a reserved field, and for the forward pass, the
input gradient and the weight gradient each a compute time in cycles, a collective (or NONE)
and its size in bytes; last the update time.
HYBRID_CUSTOMIZED adds each layer's own policy. Tokens are separated by any whitespace
(the published files mix tabs, spaces and CRLF line ends).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from chakra_core.errors import SourceFormatError

# The text's collective names -> Chakra's CollectiveCommType names; NONE is no collective.
COMM_TYPES = {"ALLREDUCE": "ALL_REDUCE", "ALLGATHER": "ALL_GATHER", "REDUCESCATTER": "REDUCE_SCATTER",
              "ALLTOALL": "ALL_TO_ALL", "NONE": None}
# The policies ASTRA-sim 1.0 runs and this converter builds; a HYBRID_CUSTOMIZED layer names one of LAYER_POLICIES.
POLICIES = ("MICRO", "DATA", "MODEL", "HYBRID_DATA_MODEL", "HYBRID_MODEL_DATA", "HYBRID_DLRM", "HYBRID_DLRM_ENHANCED",
            "HYBRID_TRANSFORMER", "HYBRID_TRANSFORMER_FWD_IN_BCKWD", "HYBRID_CUSTOMIZED", "DISTRIBUTED_INFERENCE")
LAYER_POLICIES = tuple(p for p in POLICIES if p != "HYBRID_CUSTOMIZED")
LAYER_FIELDS = 12
MAX_INT = (1 << 63) - 1
MODEL_GROUP_KEY = "model_parallel_NPU_group:"
INTEGER = re.compile(r"-?[0-9]{1,19}")


@dataclass(frozen=True)
class Phase:
    """One of a layer's three steps: compute cycles, then a collective (None: NONE) of `size` bytes."""

    cycles: int
    comm: str | None
    size: int


@dataclass(frozen=True)
class Layer:
    name: str
    fwd: Phase
    ig: Phase
    wg: Phase
    update: int
    policy: str | None = None  # HYBRID_CUSTOMIZED: the layer's own policy


@dataclass(frozen=True)
class Workload:
    path: str
    policy: str
    layers: tuple[Layer, ...]
    last_bottom_layer: int | None = None  # HYBRID_DLRM
    model_group: int | None = None        # HYBRID_TRANSFORMER: model_parallel_NPU_group (None: not given)
    checkpoints: frozenset[int] = frozenset()  # HYBRID_TRANSFORMER_FWD_IN_BCKWD: layers whose activations are kept
    initiates: frozenset[int] = frozenset()    # ... and layers whose backward first recomputes from the checkpoint


def parse_workload(path: str, text: str) -> Workload:
    """The workload in `text` (read from `path`); a SourceFormatError names the line on any fault."""
    lines = text.splitlines()
    if not lines or not lines[0].split():
        raise SourceFormatError(path, "empty: expected the parallelism policy on line 1", line=1)
    policy, extra = _policy_line(path, lines[0].split())
    count_tokens = lines[1].split() if len(lines) > 1 else []
    if len(count_tokens) != 1:
        raise SourceFormatError(path, "expected the number of layers alone on line 2", line=2)
    count = _integer(path, 2, count_tokens[0], "the number of layers", low=1)
    layers = []
    for number, line in enumerate(lines[2:], start=3):
        tokens = line.split()
        if not tokens:
            continue
        if len(layers) == count:
            raise SourceFormatError(path, f"a layer beyond the {count} that line 2 declares", line=number)
        layers.append(_layer(path, number, tokens, policy == "HYBRID_CUSTOMIZED"))
    if len(layers) < count:
        raise SourceFormatError(path, f"line 2 declares {count} layers, the file has {len(layers)}",
                                line=len(lines) + 1)
    workload = Workload(path, policy, tuple(layers), **extra)
    if workload.last_bottom_layer is not None and workload.last_bottom_layer > count - 2:
        raise SourceFormatError(path, f"last bottom layer {workload.last_bottom_layer} leaves no top layer among "
                                f"the {count} layers (it must be 0..{count - 2})", line=1)
    beyond = sorted(i for i in workload.checkpoints | workload.initiates if i >= count)
    if beyond:
        raise SourceFormatError(path, f"checkpoint layer {beyond[0]} is beyond the {count} layers", line=1)
    return workload


def _policy_line(path: str, tokens: list[str]) -> tuple[str, dict]:
    policy, rest = tokens[0], tokens[1:]
    if policy not in POLICIES:
        raise SourceFormatError(path, f"unknown parallelism policy {policy!r}; this converter reads "
                                f"{', '.join(POLICIES)}", line=1)
    if policy.startswith("HYBRID_DLRM"):
        if len(rest) != 1:
            raise SourceFormatError(path, f"{policy} needs the last bottom layer after it on line 1", line=1)
        return policy, {"last_bottom_layer": _integer(path, 1, rest[0], "the last bottom layer", low=0)}
    if policy.startswith("HYBRID_TRANSFORMER"):
        return policy, _transformer_header(path, policy, rest)
    if rest:
        raise SourceFormatError(path, f"unexpected {rest[0]!r} after {policy} on line 1", line=1)
    return policy, {}


def _transformer_header(path: str, policy: str, rest: list[str]) -> dict:
    """`model_parallel_NPU_group: N` (may be left out: the converter's split applies), and for
    HYBRID_TRANSFORMER_FWD_IN_BCKWD `checkpoints: K l1 .. lK checkpoint_initiates: K l1 .. lK`."""
    header = {}
    if rest[:1] == [MODEL_GROUP_KEY]:
        if len(rest) < 2:
            raise SourceFormatError(path, f"'{MODEL_GROUP_KEY}' without a number on line 1", line=1)
        header["model_group"] = _integer(path, 1, rest[1], MODEL_GROUP_KEY[:-1], low=1)
        rest = rest[2:]
    if policy == "HYBRID_TRANSFORMER_FWD_IN_BCKWD":
        for key, field in (("checkpoints:", "checkpoints"), ("checkpoint_initiates:", "initiates")):
            if not rest or rest[0] != key or len(rest) < 2:
                raise SourceFormatError(path, f"{policy} needs '{key} K' and K layer numbers on line 1", line=1)
            count = _integer(path, 1, rest[1], key[:-1])
            if len(rest) < 2 + count:
                raise SourceFormatError(path, f"'{key} {count}' is followed by fewer than {count} layers", line=1)
            header[field] = frozenset(_integer(path, 1, t, f"a {key[:-1]} layer") for t in rest[2:2 + count])
            rest = rest[2 + count:]
    if rest:
        raise SourceFormatError(path, f"unexpected {rest[0]!r} on line 1", line=1)
    return header


def _layer(path: str, number: int, tokens: list[str], customized: bool) -> Layer:
    want = LAYER_FIELDS + customized
    if len(tokens) != want:
        raise SourceFormatError(path, f"a layer has {want} fields (name, reserved, 3 x compute/collective/size, "
                                f"update{', policy' if customized else ''}), this line {len(tokens)}", line=number)
    policy = tokens[12] if customized else None
    if customized and policy not in LAYER_POLICIES:
        raise SourceFormatError(path, f"unknown layer policy {policy!r}; expected one of {', '.join(LAYER_POLICIES)}",
                                line=number)
    _integer(path, number, tokens[1], "the reserved field", low=-MAX_INT)
    phases = [_phase(path, number, tokens[i:i + 3], what) for i, what in ((2, "forward"), (5, "input gradient"),
                                                                          (8, "weight gradient"))]
    return Layer(tokens[0], *phases, _integer(path, number, tokens[11], "the update time"), policy)


def _phase(path: str, number: int, tokens: list[str], what: str) -> Phase:
    cycles = _integer(path, number, tokens[0], f"the {what} compute time")
    if tokens[1] not in COMM_TYPES:
        raise SourceFormatError(path, f"{what} collective {tokens[1]!r} is not one of {', '.join(COMM_TYPES)}",
                                line=number)
    return Phase(cycles, COMM_TYPES[tokens[1]], _integer(path, number, tokens[2], f"the {what} collective size"))


def _integer(path: str, number: int, token: str, what: str, low: int = 0) -> int:
    if not INTEGER.fullmatch(token):
        raise SourceFormatError(path, f"{what} {token!r} is not an integer", line=number)
    value = int(token)
    if not low <= value <= MAX_INT:
        raise SourceFormatError(path, f"{what} {value} is outside {low}..{MAX_INT}", line=number)
    return value
