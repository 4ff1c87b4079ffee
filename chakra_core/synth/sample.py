"""Sampling synthetic jobs from a fitted model, for any NPU count, and writing them.

A sampled job is SPMD: one program (program.py, where the cross-rank constraints it keeps are
listed) that every rank runs, with its groups and peers mapped to the rank. In each rank's
node table:

- each compute node depends on the previous one (one compute stream), each operation on
  the compute before it and (ctrl) on the previous operation (one communication stream, in
  program order), and the first compute after the `overlap`-th later operation on it (none
  when the overlap is NEVER).

Ranks get their timing factors (model.py, `gap_noise` / `rank_spread`). Tables are built
column-wise with numpy, one per distinct rank: ranks that come out identical share one table
and one encoded file.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from chakra_core.format.job import Job
from chakra_core.format.nodetypes import COLL, COMP, RECV, SEND
from chakra_core.generate.builder import WORLD, node_table
from chakra_core.synth.master import KIND_NAMES, KINDS, RECV_KIND, SEND_KIND
from chakra_core.synth.model import SynthModel, segments
from chakra_core.synth.profile import NEVER, OP_CLASS_NAMES
from chakra_core.synth.program import (
    Program,
    SamplingError,
    cluster_weights,
    count_weights,
    draw_program,
    peer_ranks,
    ranks_present,
)

ALL_TO_ALL = 6
# Node names: this module's vocabulary only. An operator class gets a word that
# chakra_core.analysis.stats.op_class maps back to it; operations their kind's name.
CLASS_WORDS = {"gemm": "gemm", "convolution": "conv", "attention": "attention", "normalization": "norm",
               "embedding": "embedding", "memory": "memcpy", "optimizer": "optimizer", "elementwise": "elementwise",
               "other": "compute"}
VOCABULARY = tuple(CLASS_WORDS.values()) + tuple(KIND_NAMES.values())


@dataclass
class SampledJob:
    cluster: int
    npus: int
    tables: list[pa.Table]  # index = rank; identical ranks share one table object
    comm_groups: dict[int, tuple[int, ...]]
    operations: int  # per rank, in the program
    nodes: int = 0  # over all ranks

    @property
    def distinct_tables(self) -> int:
        return len({id(t) for t in self.tables})


# ------------------------------------------------------------------ tables


def _rank_table(prog: Program, present: np.ndarray, pg: np.ndarray, peer: np.ndarray, sizes: np.ndarray,
                scale: np.ndarray | None, rank: int, names: bool) -> pa.Table:
    """One rank's node table from the program (see the module docstring for the dependencies)."""
    L = len(prog.kind)
    runs_gap = np.append(present, 1).astype(bool)  # the gap before an operation the rank lacks is not its own
    gap_count = prog.gap_count * runs_gap
    nodes = np.repeat(runs_gap, prog.gap_count)
    seg = np.empty(2 * L + 1, np.int64)
    seg[0::2] = gap_count
    seg[1::2] = present
    n = int(seg.sum())
    seg_start = np.cumsum(seg) - seg
    op_index = np.flatnonzero(present)
    op_node = seg_start[1::2][op_index]
    is_op = np.zeros(n, bool)
    is_op[op_node] = True
    comp = np.flatnonzero(~is_op)
    # data deps: the compute chain, each operation on the compute before it, joins
    before = np.searchsorted(comp, op_node) - 1
    first_in_gap = np.where(gap_count > 0, seg_start[0::2], n)
    first_from = np.minimum.accumulate(first_in_gap[::-1])[::-1]  # first compute node in gap g or later
    overlap = prog.overlap[op_index]
    joins = overlap != NEVER
    join_gap = op_index[joins] + overlap[joins] + 1
    inside = join_gap <= L
    target = first_from[join_gap[inside]]
    found = target < n
    child = np.concatenate([comp[1:], op_node[before >= 0], target[found]])
    parent = np.concatenate([comp[:-1], comp[before[before >= 0]], op_node[joins][inside][found]])
    key = np.unique(child.astype(np.int64) * n + parent)
    child, parent = key // n, key % n
    data_offsets = np.searchsorted(child, np.arange(n + 1)).astype(np.int32)
    ctrl_offsets = np.zeros(n + 1, np.int32)
    if len(op_node) > 1:
        has_ctrl = np.zeros(n, np.int32)
        has_ctrl[op_node[1:]] = 1
        ctrl_offsets[1:] = np.cumsum(has_ctrl)
    kind = prog.kind[op_index]
    coll = (kind != SEND_KIND) & (kind != RECV_KIND)
    node_type = np.full(n, COMP, np.int32)
    node_type[op_node] = np.where(coll, COLL, np.where(kind == SEND_KIND, SEND, RECV))
    duration = np.zeros(n, np.int64)
    duration[comp] = prog.node_us[nodes] if scale is None else np.round(prog.node_us[nodes] * scale[nodes])
    duration[op_node] = prog.op_us[op_index, rank]
    cpu = np.zeros(n, bool)
    cpu[comp] = prog.node_cpu[nodes]

    def at_ops(values: np.ndarray, where: np.ndarray) -> pa.Array:
        full = np.zeros(n, np.int64)
        full[op_node[where]] = values[where]
        mask = np.ones(n, bool)
        mask[op_node[where]] = False
        return pa.array(full, pa.int64(), mask=mask)

    p2p = ~coll
    own = np.full(len(op_index), rank, np.int64)
    src = np.where(kind == SEND_KIND, own, peer[op_index])
    dst = np.where(kind == SEND_KIND, peer[op_index], own)
    pg_codes = np.full(n, -1, np.int64)
    group_names = np.unique(np.where(coll, pg[op_index], 0))
    pg_codes[op_node] = np.searchsorted(group_names, np.where(coll, pg[op_index], 0))
    pg_name = pa.array([str(g) if g else WORLD for g in group_names.tolist()], pa.string()).take(
        pa.array(pg_codes, pa.int64(), mask=pg_codes < 0))
    if names:
        vocabulary = [CLASS_WORDS[c] for c in OP_CLASS_NAMES] + [KIND_NAMES[k] for k in KINDS]
        word = np.empty(n, np.int64)
        word[comp] = prog.node_class[nodes]
        word[op_node] = len(OP_CLASS_NAMES) + np.searchsorted(KINDS, kind)
        name = pa.array(vocabulary, pa.string()).take(pa.array(word))
    else:
        name = pa.array(np.full(n, ""), pa.string())
    return node_table({
        "name": name, "type": node_type,
        "ctrl_deps": pa.ListArray.from_arrays(pa.array(ctrl_offsets), pa.array(op_node[:-1].astype(np.uint64))),
        "data_deps": pa.ListArray.from_arrays(pa.array(data_offsets), pa.array(parent.astype(np.uint64))),
        "duration_micros": duration.astype(np.uint64), "is_cpu_op": cpu,
        "comm_type": at_ops(kind, coll), "comm_size": at_ops(sizes[op_index], np.ones(len(op_index), bool)),
        "comm_src": at_ops(src, p2p), "comm_dst": at_ops(dst, p2p), "comm_tag": at_ops(prog.tag[op_index], p2p),
        "pg_name": pg_name,
    })


def sample_job(model: SynthModel, npus: int, seed: int = 0, cluster: int | None = None, length: int | None = None
               ) -> SampledJob:
    """One synthetic job of `npus` NPUs (any count >= 2) from `cluster` (default: drawn by
    cluster_weights); `length` overrides the sampled operations per rank. Same arguments,
    same job."""
    if isinstance(npus, bool) or not isinstance(npus, (int, np.integer)) or npus < 2:
        raise SamplingError(f"npus={npus!r}: a synthetic job needs at least 2 NPUs")
    npus = int(npus)
    rng = np.random.default_rng([seed, npus, 0 if cluster is None else cluster + 1])
    if cluster is None:
        cluster = int(rng.choice(len(model.clusters), p=cluster_weights(model, npus)))
    if not 0 <= cluster < len(model.clusters):
        raise SamplingError(f"cluster {cluster}: the model has clusters 0..{len(model.clusters) - 1}")
    if length is not None and length < 1:
        raise SamplingError(f"length={length}: at least one operation per rank")
    spec = model.clusters[cluster]
    prog, groups, comm_groups = draw_program(model, cluster, npus, rng, length)
    is_p2p = (prog.kind == SEND_KIND) | (prog.kind == RECV_KIND)
    peers = peer_ranks(prog, npus)[0]
    present = ranks_present(prog, npus)
    sizes = np.repeat(prog.size[:, None], npus, axis=1)
    uneven = np.flatnonzero(prog.uneven & (prog.kind == ALL_TO_ALL))
    if len(uneven) and spec.split_ratios:
        quantiles = np.asarray(spec.split_ratios)
        ratios = np.interp(rng.random((len(uneven), npus)), np.linspace(0, 1, len(quantiles)), quantiles)
        ratios /= np.maximum(ratios.mean(axis=1, keepdims=True), 1e-12)
        sizes[uneven] = np.round(prog.size[uneven, None] * ratios).astype(np.int64)
    # compute time per rank and gap: the rank's factor times the gap's own noise (mean 1);
    # None where neither varies (ranks may then share a table)
    # (the stretch factors, fitted on the ranks' whole lag, replace the rank factors where known)
    factors = np.ones(npus)
    gap_of_node = np.repeat(np.arange(len(prog.gap_count)), prog.gap_count)
    noise = None
    sigma = sum(w * dict(spec.gap_noise)[n] for n, w in count_weights([n for n, _ in spec.gap_noise], npus).items()) \
        if spec.gap_noise else 0.0
    if not spec.gap_noise and spec.rank_spread > 1e-3:
        factors = np.exp(rng.normal(0, spec.rank_spread, npus))
        factors /= factors.mean()
    if sigma > 1e-3:
        segment = segments(prog.kind, prog.overlap)
        noise = np.exp(rng.normal(-sigma ** 2 / 2, sigma, (npus, segment[-1] + 1)))[:, segment]
    built: dict[bytes, pa.Table] = {}
    tables = []
    for r in range(npus):
        p2p_row = np.where(is_p2p, peers[:, r], -1)
        scale = None
        if noise is not None:
            scale = factors[r] * noise[r][gap_of_node]
        elif factors[r] != 1.0:
            scale = np.full(len(gap_of_node), factors[r])
        signature = b"".join([present[:, r].tobytes(), groups[:, r].tobytes(), p2p_row.tobytes(),
                              sizes[:, r].tobytes(), prog.op_us[:, r].tobytes(),
                              b"" if scale is None else scale.tobytes(),
                              b"" if not is_p2p.any() else np.int64(r).tobytes()])
        table = built.get(signature)
        if table is None:
            table = built[signature] = _rank_table(prog, present[:, r].astype(np.int64), groups[:, r],
                                                   peers[:, r], sizes[:, r], scale, r, model.node_names)
        tables.append(table)
    nodes = sum(t.num_rows for t in tables)
    return SampledJob(cluster, npus, tables, comm_groups, len(prog.kind), nodes)


def allocate(weights: np.ndarray, count: int) -> np.ndarray:
    """`count` split over the weights as evenly as possible (largest remainders)."""
    share = weights / weights.sum() * count
    out = np.floor(share).astype(np.int64)
    out[np.argsort(-(share - out), kind="stable")[:count - out.sum()]] += 1
    return out


def sample_jobs(model: SynthModel, npus: int, count: int, seed: int = 0) -> list[SampledJob]:
    """`count` jobs of `npus` NPUs, clusters in their training proportions at that count."""
    per_cluster = allocate(cluster_weights(model, npus), count)
    return [sample_job(model, npus, seed * 1_000_003 + i, int(c))
            for i, c in enumerate(np.repeat(np.arange(len(per_cluster)), per_cluster))]


def sample_like_training(model: SynthModel, per_job: int = 2, seed: int = 0) -> list[SampledJob]:
    """`per_job` synthetic jobs for every training job, of its cluster and NPU count: the set
    the fidelity report's `overall` compares fairly with the training fleet."""
    jobs = []
    for c, cluster in enumerate(model.clusters):
        for npus, real in cluster.jobs_by_npus:
            for i in range(per_job * real):
                jobs.append(sample_job(model, npus, seed * 1_000_003 + i, c))
    return jobs


def write_sampled_job(job: SampledJob, out_dir: str, name: str) -> list[str]:
    """Job.write of the sampled job: out_dir/name.<rank>.et per rank (a table shared by several
    ranks is encoded once and copied) and out_dir/name.comm_groups.json when it has sub-groups."""
    return Job(job.tables, job.comm_groups, name).write(out_dir)
