"""The generative model of training jobs as a file: the pydantic classes of what it holds
(SynthModel: its clusters, each with its token chains, labels and mixtures), the token encoding
that fitting and sampling share (WIDTHS, END, OVERLAP_CAP, RUN_CAP; `segments`), saving and
loading. fit.py fits the model to job profiles (its docstring describes every generator);
sample.py draws jobs from it.

The model file is JSON (`save_model` / `load_model`), validated on load with pydantic: see
SynthModel and docs/synthesis.md ('The model file') for every key. It holds numbers and this package's own words
only (kind, label, feature and operator-class names); never a name or string of a training trace.
"""

from __future__ import annotations

import json
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from chakra_core.errors import ChakraError
from chakra_core.inputs import open_input
from chakra_core.outputs import open_output
from chakra_core.synth.fidelity import Reference
from chakra_core.synth.master import KIND_NAMES, RECV_KIND, SEND_KIND
from chakra_core.synth.mixture import Mixture
from chakra_core.synth.profile import NEVER, OP_CLASS_NAMES

FORMAT = "chakra-synth-model"
VERSION = 1
END = -1  # the token kind that ends a rank's sequence (its gap is the compute after the last operation)
OVERLAP_CAP = 64  # overlaps beyond this are kept as NEVER (the dependent compute is that far away)
RUN_CAP = 31  # a token's run: how many operations of its kind and label directly precede it (capped)
KIND_BY_NAME = {name: k for k, name in KIND_NAMES.items()}
BROADCAST = KIND_BY_NAME["broadcast"]
LABEL_SLOTS = 1 << 10
WIDTHS = (16, LABEL_SLOTS, 1 << 6, 1 << 7, 2, RUN_CAP + 1, 16 * LABEL_SLOTS)  # token field ranges (shifted to >= 0)


class ModelFileError(ChakraError):
    """A model file that cannot be used (the message names the file and what is wrong)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Label(_Strict):
    """A group class: `world`, `block<i>`, `strided<i>` (members | N from `members`) or a
    point-to-point peer `p2p:<offset>` / `p2p:half` (wrapping around the ends or not)."""

    name: str
    kind: Literal["world", "block", "strided", "p2p"]
    members: Mixture | None = None  # block, strided: (log2 N, log2 ranks per group)
    block: Mixture | None = None  # p2p: (log2 N, log2 consecutive ranks the messages stay within)
    offset: int = 0
    half: bool = False
    wrap: bool = False


class Chain(_Strict):
    """Token counts of the training jobs at one NPU count: first tokens, transitions, and the
    component of `gap_mixture` seen before each token (END: after the last operation)."""

    npus: int = Field(ge=1)
    start: list[tuple[int, int]]  # (token, count)
    transitions: list[tuple[int, int, int]]  # (from token, to token, count)
    gaps: list[tuple[int, int, int]]  # (token, gap component, count)
    # the compute gaps at this count, (log2 N, log2(1 + µs), log2(1 + nodes)); its trend is the
    # cluster's, fitted over every count, which carries a gap to another count
    gap_mixture: Mixture


class ReferenceSummary(_Strict):
    """The real jobs of one NPU count in this cluster, for the fidelity report."""

    npus: int = Field(ge=1)
    jobs: int = Field(ge=1)
    kind_counts: dict[str, int]
    sizes: dict[str, list[tuple[int, int]]]  # kind -> (size, messages)
    finish_ns: list[int]
    exposed_ns: list[int]

    def to_reference(self) -> Reference:
        sizes = {KIND_BY_NAME[k]: (np.array([s for s, _ in v], np.int64), np.array([c for _, c in v], np.int64))
                 for k, v in self.sizes.items()}
        return Reference(self.npus, self.jobs, {KIND_BY_NAME[k]: c for k, c in self.kind_counts.items()}, sizes,
                         list(self.finish_ns), list(self.exposed_ns))


class Cluster(_Strict):
    jobs_by_npus: list[tuple[int, int]]  # (NPU count, training jobs)
    centroid: list[float]
    job: Mixture  # (log2 N, log2 program length, log2(1 + compute µs per rank))
    labels: list[Label]
    # kind, label, size component, overlap, uneven, run, previous (kind + 1) * LABEL_SLOTS + label (0: none)
    tokens: list[tuple[int, int, int, int, int, int, int]]
    chains: list[Chain] = Field(min_length=1)
    sizes: dict[str, Mixture]  # kind name -> (log2 N, log2(1 + bytes))
    atoms: dict[str, list[tuple[int, int]]]  # kind name -> recurring (NPU count, bytes)
    split_ratios: list[float]
    cpu_share: float = Field(ge=0, le=1)
    rank_spread: float = Field(ge=0)  # sigma of log(rank compute / job mean)
    # (NPU count, sigma of a rank's log compute time between synchronisations; see fit._gap_noise)
    gap_noise: list[tuple[int, float]]
    op_classes: dict[str, int]
    broadcast: Mixture | None = None  # (log2 N, log2(1 + µs))
    reference: list[ReferenceSummary]

    @model_validator(mode="after")
    def _consistent(self) -> Cluster:
        for i, (kind, label, size, overlap, uneven, run, previous) in enumerate(self.tokens):
            where = f"token {i}"
            if kind != END:
                if kind not in KIND_NAMES:
                    raise ValueError(f"{where}: kind {kind} is not an operation kind")
                mixture = self.sizes.get(KIND_NAMES[kind])
                if mixture is None or not 0 <= size < mixture.components:
                    raise ValueError(f"{where}: size component {size} of {KIND_NAMES[kind]} does not exist")
                if not 0 <= label < len(self.labels):
                    raise ValueError(f"{where}: label {label} does not exist")
                if not NEVER <= overlap <= OVERLAP_CAP:
                    raise ValueError(f"{where}: overlap {overlap} outside {NEVER}..{OVERLAP_CAP}")
            if uneven not in (0, 1):
                raise ValueError(f"{where}: uneven must be 0 or 1")
            if not 0 <= run <= RUN_CAP:
                raise ValueError(f"{where}: run {run} outside 0..{RUN_CAP}")
            if not 0 <= previous < WIDTHS[-1]:
                raise ValueError(f"{where}: previous {previous} outside 0..{WIDTHS[-1] - 1}")
        n = len(self.tokens)
        for chain in self.chains:
            if any(not 0 <= t < n for t, _ in chain.start) or any(
                    not (0 <= a < n and 0 <= b < n) for a, b, _ in chain.transitions):
                raise ValueError(f"chain for {chain.npus} NPUs names a token that does not exist")
            if not chain.start:
                raise ValueError(f"chain for {chain.npus} NPUs has no start tokens")
            if any(not 0 <= t < n or not 0 <= g < chain.gap_mixture.components for t, g, _ in chain.gaps):
                raise ValueError(f"chain for {chain.npus} NPUs: a gap names a token or component that does not exist")
        for name in list(self.sizes) + list(self.atoms):
            if name not in KIND_BY_NAME:
                raise ValueError(f"{name!r} is not an operation kind")
        for label in self.labels:
            if label.kind in ("block", "strided") and label.members is None:
                raise ValueError(f"label {label.name}: a {label.kind} label needs its members mixture")
            if label.kind == "p2p" and (label.block is None or label.offset == 0):
                raise ValueError(f"label {label.name}: a p2p label needs a non-zero offset and its block mixture")
        if any(name not in OP_CLASS_NAMES for name in self.op_classes):
            raise ValueError(f"op_classes keys must be among {', '.join(OP_CLASS_NAMES)}")
        return self


class SynthModel(_Strict):
    format: Literal["chakra-synth-model"]
    version: Literal[1]
    seed: int
    feature_names: list[str]
    training_jobs: int = Field(ge=1)
    training_npus: list[int]
    node_names: bool  # compute / operation names from this module's vocabulary (False: names left empty)
    clusters: list[Cluster] = Field(min_length=1)

    def references(self) -> dict[tuple[int, int], Reference]:
        return {(c, r.npus): r.to_reference() for c, cluster in enumerate(self.clusters) for r in cluster.reference}


# ------------------------------------------------------------------ saving and loading


def save_model(model: SynthModel, url: str) -> None:
    """The model as JSON, one number per line (so that no run of numbers can spell a training
    trace's shape string such as "[[18, 3]]"); floats are written exactly, so a loaded model
    samples the same jobs."""
    with open_output(url, "w", gzipped=False) as f:
        f.write(json.dumps(model.model_dump(mode="json"), indent=0))


def load_model(url: str) -> SynthModel:
    try:
        with open_input(url) as f:
            text = f.read().decode("utf-8")
    except FileNotFoundError:
        raise ModelFileError(f"{url}: no such model file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ModelFileError(f"{url}: cannot read the model file: {exc}") from None
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ModelFileError(f"{url}: not a synthesizer model (not JSON: {exc})") from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        found = document.get("format") if isinstance(document, dict) else type(document).__name__
        raise ModelFileError(f"{url}: not a synthesizer model (format {found!r}, expected {FORMAT!r})")
    if document.get("version") != VERSION:
        raise ModelFileError(f"{url}: model file version {document.get('version')!r} is not supported (this "
                             f"version of chakra reads version {VERSION}; refit the model)")
    try:
        return SynthModel.model_validate(document)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top level)"
        raise ModelFileError(f"{url}: invalid model at {where}: {first['msg']} "
                             f"({exc.error_count()} problem(s) in all)") from None


# ------------------------------------------------------------------ shared by fitting and sampling


def segments(kind: np.ndarray, overlap: np.ndarray) -> np.ndarray:
    """Segment of each gap (len(kind) + 1 of them): a new segment starts after every blocking
    collective (overlap 0), where the ranks wait for each other before computing on; not
    after a broadcast, which the simulator (as ASTRA-sim) replays by its duration, unmatched."""
    blocking = (overlap == 0) & ~np.isin(kind, (SEND_KIND, RECV_KIND, BROADCAST))
    return np.concatenate([[0], np.cumsum(blocking)])
