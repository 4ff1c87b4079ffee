"""Fitting the generative model of training jobs (model.py, its file format) to job profiles.

Hierarchy (each generator is fitted per cluster; "| N" = sampled conditionally on log2 of
the target NPU count, see mixture.py):

1. clusters: k-means over FEATURE_NAMES (share of operations per kind, of groups, scale,
   operator-class mix); k the largest whose silhouette is within SILHOUETTE_TOLERANCE of the
   best. A cluster is drawn in its share of the training jobs at N (interpolated between the
   NPU counts seen);
2. per job: operations per rank and compute time per rank, one mixture over (log2 N, log2
   operations, log2(1 + µs)) | N, so the two keep their correlation;
3. per operation: a token (kind, group label, size component, overlap, uneven split, run,
   previous) from a first-order Markov chain counted per (cluster, NPU count) over each
   job's program (its ranks' sequences merged, supersequence.py). The run (operations of the
   same kind and label right before) and the previous kind and label are context that lets
   a first-order chain keep run lengths and tell apart places where the same operation
   recurs; the overlap carries the dependency structure (DDP's count-down of outstanding
   all-reduces). An unseen N mixes the chains of the counts that bracket it;
4. per token: its message size from the mixture of its kind over (log2 N, log2 bytes) (the
   token's component, | N), snapped to a recurring exact size at a seen N; the compute gap
   before it from the component it emits, of a mixture over (log2 N, log2(1 + µs),
   log2(1 + nodes)) fitted per NPU count and moved along the cluster's trend | N; all gaps
   then scaled to the job's compute time;
5. groups: a label's ranks per group (block, strided) or a point-to-point label's block
   (the consecutive ranks its messages stay within) from mixtures | N; peer offsets and
   wrapping are kept;
6. the rest: uneven all_to_all ratios to the mean (quantiles), rank timing (per-stretch
   log-normal factors per NPU count, _gap_noise; else per-rank factors), the CPU share of
   compute time, operator-class counts, broadcast replay durations | N, and per NPU count
   the real jobs' summary for the fidelity report.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from chakra_core.errors import ChakraError
from chakra_core.synth.fidelity import JobMeasure, summarize
from chakra_core.synth.master import KIND_NAMES, KINDS, RECV_KIND, SEND_KIND
from chakra_core.synth.mixture import Mixture, fit_mixture
from chakra_core.synth.model import (
    BROADCAST,
    END,
    FORMAT,
    LABEL_SLOTS,
    OVERLAP_CAP,
    RUN_CAP,
    VERSION,
    WIDTHS,
    Chain,
    Cluster,
    Label,
    ReferenceSummary,
    SynthModel,
    segments,
)
from chakra_core.synth.profile import NEVER, OP_CLASS_NAMES, JobProfile
from chakra_core.synth.supersequence import merge

GAP_COMPONENTS = 16  # gaps recur at many exact sizes (per layer and stage): more room than other mixtures
MAX_CLUSTERS = 12
ATOM_SHARE = 0.005  # a size is "recurring" when it is at least this share of its kind's messages at one NPU count
MAX_ATOMS = 256
SPLIT_QUANTILES = 65
SILHOUETTE_TOLERANCE = 0.02  # k: the largest whose silhouette is this close to the best (finer near-ties)
FEATURE_NAMES = ([f"share_{KIND_NAMES[k]}" for k in KINDS]
                 + ["share_world_group", "share_sub_group", "share_point_to_point",
                    "log10_median_bytes_third", "log10_compute_us_per_op_third", "cpu_share", "log2_operations_third"]
                 + [f"compute_time_share_{c}" for c in OP_CLASS_NAMES])


def job_features(profile: JobProfile) -> np.ndarray:
    """The clustering features of one job (FEATURE_NAMES)."""
    kinds = np.concatenate([r.kind for r in profile.ranks])
    labels = np.concatenate([r.label for r in profile.ranks])
    sizes = np.concatenate([r.size for r in profile.ranks])
    total = max(len(kinds), 1)
    share = [float((kinds == k).sum()) / total for k in KINDS]
    label_kind = np.array([lab.kind for lab in profile.labels] or ["world"])[labels] if len(labels) else np.zeros(0)
    groups = [float((label_kind == "world").sum()) / total,
              float(np.isin(label_kind, ("block", "strided")).sum()) / total,
              float((label_kind == "p2p").sum()) / total]
    compute = np.mean([r.compute_us for r in profile.ranks])
    ops = max(np.mean([len(r.kind) for r in profile.ranks]), 1.0)
    cpu = sum(r.cpu_us for r in profile.ranks) / max(sum(r.compute_us for r in profile.ranks), 1e-9)
    class_us = np.sum([r.class_us for r in profile.ranks], axis=0)
    return np.array(share + groups + [math.log10(1 + float(np.median(sizes))) / 3 if len(sizes) else 0.0,
                                      math.log10(1 + compute / ops) / 3, min(cpu, 1.0), math.log2(ops) / 3]
                    + (class_us / class_us.sum() if class_us.sum() else class_us).tolist())


def choose_clusters(features: np.ndarray, seed: int = 0) -> np.ndarray:
    """Cluster labels (0..k-1, numbered by first job): k-means; k is the largest whose
    silhouette score is within SILHOUETTE_TOLERANCE of the best, because a near-tie is better
    resolved finer (each cluster's generators then describe one kind of job)."""
    from sklearn.cluster import KMeans  # here, not at the top: 1 s of import for every process that loads models
    from sklearn.metrics import silhouette_score

    n = len(features)
    distinct = len(np.unique(features.round(9), axis=0))
    candidates = []
    for k in range(2, min(MAX_CLUSTERS, distinct - 1) + 1):
        labels = KMeans(n_clusters=k, n_init=10, random_state=seed).fit_predict(features)
        candidates.append((silhouette_score(features, labels), k, labels))
    best = np.zeros(n, np.int64)
    if candidates:
        top = max(score for score, _, _ in candidates)
        best = max((c for c in candidates if c[0] >= top - SILHOUETTE_TOLERANCE), key=lambda c: c[1])[2]
    # renumber by first appearance, so cluster ids do not depend on k-means' internal order
    order = {c: i for i, c in enumerate(dict.fromkeys(best.tolist()))}
    return np.array([order[c] for c in best.tolist()], np.int64)


def _token_keys(columns: Sequence, widths: Sequence[int] = WIDTHS) -> np.ndarray:
    """One int64 key per token from its small-integer fields (each shifted to >= 0)."""
    key = np.zeros(len(columns[0]), np.int64)
    for values, width in zip(columns, widths):
        key = key * width + np.asarray(values, np.int64)
    return key


def _blocking(overlaps: np.ndarray) -> np.ndarray:
    """Per position, the overlap of ranks that run it together (ranks x positions): an
    operation blocks the program only where it blocks every rank (the others run on), so the
    largest, NEVER above every count."""
    later = np.where(overlaps == NEVER, OVERLAP_CAP + 1, overlaps).max(axis=0)
    return np.where(later > OVERLAP_CAP, NEVER, later)


def _program(rank_rows: Sequence[np.ndarray]) -> np.ndarray:
    """One job's program (rows of token fields and gap component) from its ranks' rows.

    Ranks whose operations agree on what ranks must agree on (kind, label, size component,
    uneven) are combined position by position; groups that differ (pipeline stages) are
    merged into a common supersequence (supersequence.py)."""
    agreeing: dict[bytes, list[np.ndarray]] = {}
    for rows in rank_rows:
        key = _token_keys([rows[:, 0] + 1, rows[:, 1], rows[:, 2], rows[:, 5]], WIDTHS[:3] + WIDTHS[4:5])
        agreeing.setdefault(key.tobytes(), []).append(rows)
    seqs = []
    for group in agreeing.values():
        rows = group[0].copy()
        rows[:, 3] = _blocking(np.array([r[:, 3] for r in group]))
        seqs.append(rows)
    if len(seqs) == 1:
        return seqs[0]
    members, _ = merge([_token_keys([s[:, 0] + 1, s[:, 1], s[:, 2], s[:, 5]], WIDTHS[:3] + WIDTHS[4:5]) for s in seqs])
    program = np.array([seqs[m[0][0]][m[0][1]] for m in members], np.int64).reshape(-1, 6)
    for position, m in enumerate(members):
        program[position, 3] = _blocking(np.array([[seqs[s][i][3]] for s, i in m]))[0]
    return program


def _runs(kind: np.ndarray, label: np.ndarray) -> np.ndarray:
    """Per position, how many directly preceding positions have the same kind and label
    (capped at RUN_CAP): in the token, it lets a first-order chain keep the run lengths of
    training (four micro-batches' sends in a row, not a geometric number)."""
    same = np.r_[False, (kind[1:] == kind[:-1]) & (label[1:] == label[:-1])]
    starts = np.flatnonzero(~same)
    run = np.arange(len(kind)) - np.repeat(starts, np.diff(np.r_[starts, len(kind)]))
    return np.minimum(run, RUN_CAP)


def _previous(kind: np.ndarray, label: np.ndarray) -> np.ndarray:
    """Per position, the kind and label of the operation before the current run (0: none): a
    second-order context that tells apart two places of a program where the same operation
    starts a run (a pipeline stage's first backward send after its forward receives, and the
    one after the gradient reduce-scatters)."""
    key = (kind + 1) * LABEL_SLOTS + label
    same = np.r_[False, (kind[1:] == kind[:-1]) & (label[1:] == label[:-1])]
    starts = np.flatnonzero(~same)
    before = np.r_[0, key[starts[1:] - 1]] if len(starts) else np.zeros(0, np.int64)
    return np.repeat(before, np.diff(np.r_[starts, len(kind)]))


def _token_fields(key: int) -> tuple[int, ...]:
    out = []
    for width in reversed(WIDTHS):
        key, value = divmod(key, width)
        out.append(value)
    kind, label, size, overlap, uneven, run, previous = reversed(out)
    return kind - 1, label, size, overlap - 1, uneven, run, previous


def _fit_cluster(profiles: Sequence[JobProfile], measures: Sequence[JobMeasure], centroid: np.ndarray,
                 seed: int) -> Cluster:
    names, labels = _fit_labels(profiles, seed)
    ops = _flat_operations(profiles, names)
    sizes, atoms, size_comp = _fit_sizes(ops, seed)
    gap_mixtures, gap_comp = _fit_gaps(ops, seed)
    programs, tokens, chains = _fit_programs(profiles, ops, size_comp, gap_mixtures, gap_comp)
    job_rows = np.array([(math.log2(p.npus), math.log2(max(len(prog), 1)),
                          math.log2(1 + np.mean([r.compute_us for r in p.ranks])))
                         for p, (_, prog, _) in zip(profiles, programs)])
    ratios = np.concatenate([p.split_ratios for p in profiles])
    broadcast_rows = [(math.log2(p.npus), math.log2(1 + us)) for p in profiles for r in p.ranks
                      for us in r.broadcast_us.tolist()]
    compute_total = sum(r.compute_us for p in profiles for r in p.ranks)
    by_npus: dict[int, list[JobMeasure]] = {}
    for p, m in zip(profiles, measures):
        by_npus.setdefault(p.npus, []).append(m)
    class_counts = np.sum([r.class_counts for p in profiles for r in p.ranks], axis=0)
    return Cluster(
        jobs_by_npus=sorted((n, len(ms)) for n, ms in by_npus.items()), centroid=centroid.tolist(),
        job=fit_mixture(job_rows, seed), labels=labels, tokens=tokens, chains=chains, sizes=sizes, atoms=atoms,
        split_ratios=np.quantile(ratios, np.linspace(0, 1, SPLIT_QUANTILES)).tolist() if len(ratios) else [],
        cpu_share=min(1.0, sum(r.cpu_us for p in profiles for r in p.ranks) / compute_total) if compute_total else 0.0,
        rank_spread=_rank_spread(profiles),
        gap_noise=_gap_noise(profiles),
        op_classes={OP_CLASS_NAMES[i]: int(c) for i, c in enumerate(class_counts) if c},
        broadcast=fit_mixture(np.array(broadcast_rows), seed) if broadcast_rows else None,
        reference=_reference_summaries(by_npus))


def _fit_labels(profiles: Sequence[JobProfile], seed: int) -> tuple[dict[str, int], list[Label]]:
    """Cluster-wide labels by name, in order of first use, with a mixture for their sizes."""
    names: dict[str, int] = {}
    label_rows: dict[str, list[tuple[float, float]]] = {}  # (log2 N, log2 members or block) per job
    label_info: dict[str, tuple[str, int, bool]] = {}
    for p in profiles:
        for lab in p.labels:
            names.setdefault(lab.name, len(names))
            if lab.kind != "world":
                size = lab.block if lab.kind == "p2p" else lab.members
                label_rows.setdefault(lab.name, []).append((math.log2(p.npus), math.log2(size)))
            kind, offset, wrap = label_info.get(lab.name, (lab.kind, lab.offset, False))
            label_info[lab.name] = (kind, offset, wrap or lab.wrap)
    labels = []
    for name in names:
        kind, offset, wrap = label_info[name]
        size = fit_mixture(np.array(label_rows[name]), seed) if name in label_rows else None
        labels.append(Label(name=name, kind=kind, members=size if kind != "p2p" else None,
                            block=size if kind == "p2p" else None, offset=offset, half=name == "p2p:half",
                            wrap=wrap))
    return names, labels


@dataclass
class _Operations:
    """Every operation and gap of every rank of a cluster, as flat columns."""

    n: np.ndarray
    kind: np.ndarray
    size: np.ndarray
    label: np.ndarray
    uneven: np.ndarray
    overlap: np.ndarray
    gap_n: np.ndarray
    gap_us: np.ndarray
    gap_count: np.ndarray
    lengths: np.ndarray  # operations per rank sequence


def _flat_operations(profiles: Sequence[JobProfile], names: dict[str, int]) -> _Operations:
    columns: dict[str, list[np.ndarray]] = {k: [] for k in ("n", "kind", "size", "label", "uneven", "overlap",
                                                          "gap_n", "gap_us", "gap_count")}
    lengths = []
    for p in profiles:
        to_cluster = np.array([names[lab.name] for lab in p.labels] or [0], np.int64)
        for r in p.ranks:
            columns["n"].append(np.full(len(r.kind), p.npus))
            columns["kind"].append(r.kind)
            columns["size"].append(r.size)
            columns["label"].append(to_cluster[r.label] if len(r.label) else r.label)
            columns["uneven"].append(r.uneven)
            columns["overlap"].append(np.where(r.overlap > OVERLAP_CAP, NEVER, r.overlap))
            columns["gap_n"].append(np.full(len(r.gap_us), p.npus))
            columns["gap_us"].append(r.gap_us)
            columns["gap_count"].append(r.gap_count)
            lengths.append(len(r.kind))
    flat = {k: np.concatenate(v) for k, v in columns.items()}
    flat["uneven"] = flat["uneven"].astype(np.int64)
    return _Operations(**flat, lengths=np.array(lengths, np.int64))


def _fit_sizes(ops: _Operations, seed: int) -> tuple[dict[str, Mixture], dict[str, list], np.ndarray]:
    """A size mixture per collective kind, its recurring exact sizes, and each operation's component."""
    log_n = np.log2(ops.n)
    sizes, atoms = {}, {}
    size_comp = np.zeros(len(ops.kind), np.int64)
    for k in np.unique(ops.kind).tolist():
        at = np.flatnonzero(ops.kind == k)
        rows = np.column_stack([log_n[at], np.log2(1.0 + ops.size[at])])
        mixture = fit_mixture(rows, seed)
        sizes[KIND_NAMES[k]] = mixture
        size_comp[at] = mixture.predict(rows)
        recurring = []
        for npus in np.unique(ops.n[at]).tolist():
            values, counts = np.unique(ops.size[at][ops.n[at] == npus], return_counts=True)
            keep = counts >= ATOM_SHARE * counts.sum()
            recurring += [(int(npus), int(v)) for v in values[keep]]
        atoms[KIND_NAMES[k]] = recurring[:MAX_ATOMS]
    return sizes, atoms, size_comp


def _fit_gaps(ops: _Operations, seed: int) -> tuple[dict[int, Mixture], np.ndarray]:
    """One gap mixture per NPU count (a count's jobs repeat a few exact gaps, which one mixture
    over every count blurs together), sharing the cluster's trend across counts."""
    gap_rows = np.column_stack([np.log2(ops.gap_n), np.log2(1.0 + ops.gap_us), np.log2(1.0 + ops.gap_count)])
    spread = gap_rows[:, 0] - gap_rows[:, 0].mean()
    gap_trend = (spread @ (gap_rows[:, 1:] - gap_rows[:, 1:].mean(axis=0)) / (spread @ spread)
                 if spread @ spread > 0 else np.zeros(2))
    gap_mixtures: dict[int, Mixture] = {}
    gap_comp = np.zeros(len(gap_rows), np.int64)
    for npus in np.unique(ops.gap_n).tolist():
        at = np.flatnonzero(ops.gap_n == npus)
        gap_mixtures[npus] = fit_mixture(gap_rows[at], seed, GAP_COMPONENTS, trend=gap_trend)
        gap_comp[at] = gap_mixtures[npus].predict(gap_rows[at])
    return gap_mixtures, gap_comp


def _fit_programs(profiles: Sequence[JobProfile], ops: _Operations, size_comp: np.ndarray,
                  gap_mixtures: dict[int, Mixture], gap_comp: np.ndarray) -> tuple[list, list, list[Chain]]:
    """Tokens (an operation's fields plus the component of the gap before it; END carries the
    last gap), one program per job (its distinct rank sequences merged: supersequence.py) and a
    token chain per NPU count."""
    op_starts = np.concatenate([[0], np.cumsum(ops.lengths)])
    gap_starts = op_starts + np.arange(len(ops.lengths) + 1)  # each sequence has one gap more than operations
    is_end_gap = np.zeros(len(gap_comp), bool)
    is_end_gap[gap_starts[1:] - 1] = True
    fields = np.column_stack([ops.kind, ops.label, size_comp, ops.overlap, gap_comp[~is_end_gap], ops.uneven])
    end_gaps = gap_comp[is_end_gap]
    programs, first_rank = [], 0
    for p in profiles:
        rank_rows = [fields[op_starts[k]:op_starts[k + 1]] for k in range(first_rank, first_rank + len(p.ranks))]
        programs.append((p.npus, _program(rank_rows), int(end_gaps[first_rank])))
        first_rank += len(p.ranks)
    # the chain runs over tokens without their gaps (fewer states, so it keeps to the programs'
    # structure); the gap component is emitted by the token
    keyed = [np.concatenate([_token_keys([prog[:, 0] + 1, prog[:, 1], prog[:, 2], prog[:, 3] + 1, prog[:, 5],
                                          _runs(prog[:, 0], prog[:, 1]), _previous(prog[:, 0], prog[:, 1])]),
                             _token_keys([[END + 1], [0], [0], [0], [0], [0], [0]])]) for _, prog, _ in programs]
    gaps_of = [np.append(prog[:, 4], end) for _, prog, end in programs]
    unique_keys, token_of = np.unique(np.concatenate(keyed), return_inverse=True)
    tokens = [_token_fields(int(k)) for k in unique_keys.tolist()]
    by_program = np.split(token_of, np.cumsum([len(k) for k in keyed])[:-1])
    program_npus = np.array([n for n, _, _ in programs])
    chains = [_chain(npus, [t for t, n in zip(by_program, program_npus) if n == npus],
                     [g for g, n in zip(gaps_of, program_npus) if n == npus], len(tokens), gap_mixtures[npus])
              for npus in np.unique(program_npus).tolist()]
    return programs, tokens, chains


def _chain(npus: int, mine: list[np.ndarray], gaps: list[np.ndarray], token_count: int, gap_mixture: Mixture) -> Chain:
    """The token chain of one NPU count's programs: first tokens, transitions and emitted gaps, counted."""
    first, first_counts = np.unique([t[0] for t in mine], return_counts=True)
    pair, pair_counts = np.unique(np.concatenate([t[:-1] * token_count + t[1:] for t in mine]), return_counts=True)
    width = gap_mixture.components
    emit, emit_counts = np.unique(np.concatenate([t * width + g for t, g in zip(mine, gaps)]), return_counts=True)
    return Chain(npus=npus, start=list(zip(first.tolist(), first_counts.tolist())),
                 transitions=[(int(a), int(b), int(c)) for a, b, c in
                              zip(pair // token_count, pair % token_count, pair_counts)],
                 gaps=[(int(t), int(g), int(c)) for t, g, c in zip(emit // width, emit % width, emit_counts)],
                 gap_mixture=gap_mixture)


def _rank_spread(profiles: Sequence[JobProfile]) -> float:
    spreads = []
    for p in profiles:
        compute = np.array([r.compute_us for r in p.ranks])
        if compute.min() > 0:
            spreads.append(float(np.var(np.log(compute / compute.mean()))))
    return math.sqrt(float(np.mean(spreads))) if spreads else 0.0


def _reference_summaries(by_npus: dict[int, list[JobMeasure]]) -> list[ReferenceSummary]:
    reference = []
    for npus, ms in sorted(by_npus.items()):
        ref = summarize(npus, ms)
        reference.append(ReferenceSummary(
            npus=npus, jobs=ref.jobs, kind_counts={KIND_NAMES[k]: c for k, c in ref.kind_counts.items()},
            sizes={KIND_NAMES[k]: list(zip(v.tolist(), c.tolist())) for k, (v, c) in ref.sizes.items()},
            finish_ns=ref.finish_ns, exposed_ns=ref.exposed_ns))
    return reference


def expected_max(sigma: float, n: int) -> float:
    """E[max of n independent log-normal factors of mean 1 and log-sigma sigma]."""
    z = np.linspace(-9, 9, 4001)
    density = np.exp(-z * z / 2) / math.sqrt(2 * math.pi)
    below = 0.5 * (1 + np.vectorize(math.erf)(z / math.sqrt(2)))
    return float(np.trapezoid(n * density * below ** (n - 1) * np.exp(sigma * z - sigma * sigma / 2), z))


def _stretch_times(p: JobProfile) -> np.ndarray | None:
    """A job's compute per rank and stretch (ranks x stretches) between its synchronisations,
    or None where its ranks cannot be aligned by them.

    A synchronisation is a collective every rank blocks on (overlap 0 on all of them; not a
    send, receive or broadcast, see `segments`). Ranks that run the same operations are
    aligned position by position; ranks whose sequences differ (the lower rank of a pair
    sends first) are aligned by their collectives when these agree in
    number, kind and group label on every rank (the i-th one is then the same call), and
    only where they hold at least one synchronisation to align by."""
    first = p.ranks[0]
    if len(p.ranks) < 2:
        return None
    if all(len(r.kind) == len(first.kind) and (r.kind == first.kind).all() and (r.label == first.label).all()
           for r in p.ranks):
        overlap = np.where((np.array([r.overlap for r in p.ranks]) == 0).all(axis=0), 0, 1)
        seg = segments(first.kind, overlap)
        return np.array([np.bincount(seg, weights=r.gap_us) for r in p.ranks])
    collective = [np.flatnonzero(~np.isin(r.kind, (SEND_KIND, RECV_KIND, BROADCAST))) for r in p.ranks]
    c0 = collective[0]
    if any(len(c) != len(c0) or (r.kind[c] != first.kind[c0]).any() or (r.label[c] != first.label[c0]).any()
           for r, c in zip(p.ranks, collective)):
        return None
    sync = (np.array([r.overlap[c] for r, c in zip(p.ranks, collective)]) == 0).all(axis=0)
    if not sync.any():
        return None
    times = []
    for r, c in zip(p.ranks, collective):
        overlap = np.ones(len(r.kind), np.int64)
        overlap[c[sync]] = 0
        times.append(np.bincount(segments(r.kind, overlap), weights=r.gap_us, minlength=int(sync.sum()) + 1))
    return np.array(times)


def _gap_noise(profiles: Sequence[JobProfile]) -> list[tuple[int, float]]:
    """Per NPU count: the spread of a rank's compute between two synchronisations (the sigma
    of a log-normal factor of mean 1, drawn per rank and stretch), fitted so that the slowest
    rank's lag matches the jobs': the expected maximum over the ranks equals the observed
    sum over stretches of the slowest rank's time divided by the sum of the mean times (a
    rank-by-stretch view that reproduces the simulated time of the real gloo runs within a
    few percent). A synchronisation is a collective every rank blocks on (overlap 0 on all
    of them); between two, work may sit in different gaps on different ranks without
    delaying anyone. Jobs whose ranks can be aligned by their synchronisations only
    (_stretch_times); per count, because contention grows with the ranks sharing a machine."""
    slowest: dict[int, float] = {}
    mean: dict[int, float] = {}
    for p in profiles:
        times = _stretch_times(p)
        if times is None:
            continue
        slowest[p.npus] = slowest.get(p.npus, 0.0) + float(times.max(axis=0).sum())
        mean[p.npus] = mean.get(p.npus, 0.0) + float(times.mean(axis=0).sum())
    out = []
    for npus in sorted(slowest):
        if mean[npus] <= 0:
            continue
        ratio = slowest[npus] / mean[npus]
        low, high = 0.0, 3.0
        for _ in range(40):  # bisection: expected_max grows with sigma
            mid = (low + high) / 2
            low, high = (mid, high) if expected_max(mid, npus) < ratio else (low, mid)
        out.append((npus, (low + high) / 2))
    return out


def fit_model(profiles: Sequence[JobProfile], measures: Sequence[JobMeasure], seed: int = 0,
              node_names: bool = True, progress: Callable[[int, int], None] | None = None
              ) -> tuple[SynthModel, np.ndarray]:
    """The model of these jobs (profiles with their measures) and each job's cluster.

    node_names=False leaves synthetic node names empty (see sample.py's vocabulary check)."""
    if not profiles:
        raise ChakraError("no usable training jobs: nothing to fit")
    features = np.array([job_features(p) for p in profiles])
    clusters = choose_clusters(features, seed) if len(profiles) > 2 else np.zeros(len(profiles), np.int64)
    fitted = []
    k = int(clusters.max()) + 1
    for c in range(k):
        members = np.flatnonzero(clusters == c)
        fitted.append(_fit_cluster([profiles[i] for i in members], [measures[i] for i in members],
                                   features[members].mean(axis=0), seed))
        if progress:
            progress(c + 1, k)
    model = SynthModel(format=FORMAT, version=VERSION, seed=seed, feature_names=FEATURE_NAMES,
                       training_jobs=len(profiles), training_npus=sorted({p.npus for p in profiles}),
                       node_names=node_names, clusters=fitted)
    return model, clusters
