"""Randomised training jobs of five families, each drawn from a `random.Random`: the jobs of the
nightly pipeline's test drops (tools/make_drop.py) and of the selection and synthesis tests.

    info, tables = generate_family("moe", 8, seed=3)     # job.json fields, one table per rank
    Job(tables, name="moe").write("out/jobs")             # chakra_core.format.job

Families (``FAMILIES``):

- ``data_parallel``: DDP; a forward chain, a backward chain with one gradient all-reduce per
  layer (split into buckets of at most BUCKET_BYTES) overlapping it, then the optimizer;
- ``tensor_parallel``: Megatron-style sequence / tensor parallelism, an all-gather before and a
  reduce-scatter after every attention and MLP block, forward and backward;
- ``pipeline_parallel``: GPipe, one stage per rank, all forward micro-batches then all
  backward, activations and gradients exchanged with matching send/recv pairs (what-if scaling
  of send/recv needs the simulated NPU count to be a multiple of the traced one);
- ``dlrm``: sharded embedding tables (all-to-alls of indices and pooled vectors) and
  data-parallel MLPs (all-reduces);
- ``moe``: expert dispatch / combine all-to-alls and dense-gradient all-reduces.

Every job runs STEPS training steps; compute nodes are timed from their FLOPs at a drawn
effective rate, clamped to MIN_US..MAX_US. Jobs are SPMD where they can be (every rank shares one
table object: Job.write encodes it once); pipeline_parallel has one table per stage. The same
`random.Random` state gives the same job, byte for byte; ``chakra_core.generate.workloads`` holds
the canned jobs sized from model dimensions instead.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import pyarrow as pa

from chakra_core.generate.builder import RankGraph, check_send_recv
from chakra_core.generate.workloads import (
    ALL_GATHER,
    ALL_REDUCE,
    ALL_TO_ALL,
    REDUCE_SCATTER,
)

STEPS = 2
BUCKET_BYTES = 16 << 20  # gradient all-reduces larger than this are split into buckets (like DDP's)
MIN_US, MAX_US = 10, 950  # compute durations are clamped to tens .. hundreds of microseconds


def _graph(rate_flops: float, rank: int = 0) -> RankGraph:
    """A rank's graph whose compute nodes are timed from their FLOPs at the job's effective rate."""
    return RankGraph(rank, flops_per_s=rate_flops, duration_bounds=(MIN_US, MAX_US))


def _all_reduce(g: RankGraph, name: str, deps, size: int) -> list[int]:
    """Gradient all-reduce(s) of size bytes: one node, or equal buckets of at most BUCKET_BYTES."""
    n = -(-size // BUCKET_BYTES)
    if n <= 1:
        return [g.collective(name, ALL_REDUCE, size, deps)]
    return [g.collective(f"{name}/bucket{b}", ALL_REDUCE, size // n + (b < size % n), deps) for b in range(n)]


def _data_parallel(rng: random.Random, npus: int) -> tuple[dict, list[pa.Table]]:
    """DDP: forward chain, backward chain with one all-reduce per layer's gradients, optimizer."""
    layers = rng.randint(4, 24)
    widths = [rng.choice((256, 512, 1024, 2048)) for _ in range(layers + 1)]
    tokens = rng.choice((1024, 2048, 4096))  # samples (or tokens) per rank per step
    rate = rng.uniform(30e12, 80e12)
    params = [widths[i] * widths[i + 1] for i in range(layers)]
    g = _graph(rate)
    prev = None
    for s in range(STEPS):
        load = g.compute(f"step{s}/dataloader", [prev], duration_us=rng.randint(5, 40), is_cpu=True)
        x = load
        for l in range(layers):
            x = g.compute(f"step{s}/fwd/layer{l}/linear", [x], num_ops=2 * tokens * params[l],
                          tensor_size=4 * (params[l] + tokens * (widths[l] + widths[l + 1])))
        x = g.compute(f"step{s}/loss", [x], num_ops=4 * tokens * widths[-1], tensor_size=8 * tokens * widths[-1])
        reduces = []
        for l in reversed(range(layers)):
            x = g.compute(f"step{s}/bwd/layer{l}/linear", [x], num_ops=4 * tokens * params[l],
                          tensor_size=4 * (2 * params[l] + tokens * (widths[l] + widths[l + 1])))
            reduces += _all_reduce(g, f"step{s}/ddp/all_reduce/layer{l}", [x], 4 * params[l])
        prev = g.compute(f"step{s}/optimizer/sgd", reduces + [x], num_ops=3 * sum(params),
                         tensor_size=12 * sum(params))
    info = {"model": f"synthetic MLP, {layers} linear layers (widths {widths[0]}..{widths[-1]}), fp32, SGD",
            "parallelism": "data parallel (DDP, gradient all-reduce per layer)",
            "layers": layers, "tokens_per_rank": tokens, "gradient_bytes": 4 * sum(params)}
    table = g.table()
    return info, [table] * npus


def _tensor_parallel(rng: random.Random, npus: int) -> tuple[dict, list[pa.Table]]:
    """Megatron-style sequence/tensor parallel: all-gather before and reduce-scatter after each block."""
    layers = rng.randint(2, 12)
    hidden = rng.choice((1024, 2048, 4096))
    tokens = rng.choice((256, 512, 1024))
    rate = rng.uniform(60e12, 150e12)
    act = 2 * tokens * hidden  # bf16 activations of the whole sequence
    attn, mlp = 4 * hidden * hidden // npus, 8 * hidden * hidden // npus  # parameters per rank
    g = _graph(rate)
    prev = None
    for s in range(STEPS):
        x = g.compute(f"step{s}/dataloader", [prev], duration_us=rng.randint(5, 40), is_cpu=True)
        x = g.compute(f"step{s}/fwd/embedding", [x], num_ops=2 * tokens * hidden, tensor_size=act)
        for l in range(layers):
            x = g.collective(f"step{s}/fwd/layer{l}/attn/all_gather", ALL_GATHER, act, [x])
            x = g.compute(f"step{s}/fwd/layer{l}/attn", [x],
                          num_ops=2 * tokens * attn + 4 * tokens * tokens * hidden // npus,
                          tensor_size=2 * attn + 3 * act)
            x = g.collective(f"step{s}/fwd/layer{l}/attn/reduce_scatter", REDUCE_SCATTER, act, [x])
            x = g.collective(f"step{s}/fwd/layer{l}/mlp/all_gather", ALL_GATHER, act, [x])
            x = g.compute(f"step{s}/fwd/layer{l}/mlp", [x], num_ops=2 * tokens * mlp, tensor_size=2 * mlp + 3 * act)
            x = g.collective(f"step{s}/fwd/layer{l}/mlp/reduce_scatter", REDUCE_SCATTER, act, [x])
        x = g.compute(f"step{s}/loss", [x], num_ops=2 * tokens * hidden, tensor_size=act)
        for l in reversed(range(layers)):
            x = g.collective(f"step{s}/bwd/layer{l}/mlp/all_gather", ALL_GATHER, act, [x])
            x = g.compute(f"step{s}/bwd/layer{l}/mlp", [x], num_ops=4 * tokens * mlp, tensor_size=4 * mlp + 3 * act)
            x = g.collective(f"step{s}/bwd/layer{l}/mlp/reduce_scatter", REDUCE_SCATTER, act, [x])
            x = g.collective(f"step{s}/bwd/layer{l}/attn/all_gather", ALL_GATHER, act, [x])
            x = g.compute(f"step{s}/bwd/layer{l}/attn", [x],
                          num_ops=4 * tokens * attn + 8 * tokens * tokens * hidden // npus,
                          tensor_size=4 * attn + 3 * act)
            x = g.collective(f"step{s}/bwd/layer{l}/attn/reduce_scatter", REDUCE_SCATTER, act, [x])
        per_rank = layers * (attn + mlp)
        prev = g.compute(f"step{s}/optimizer/adam", [x], num_ops=10 * per_rank, tensor_size=16 * per_rank)
    info = {"model": f"synthetic transformer, {layers} layers, hidden {hidden}, {tokens} tokens, bf16",
            "parallelism": f"tensor parallel ({npus}-way, sequence parallel: all-gather / reduce-scatter)",
            "layers": layers, "hidden": hidden, "tokens": tokens, "activation_bytes": act}
    table = g.table()
    return info, [table] * npus


def _pipeline_parallel(rng: random.Random, npus: int) -> tuple[dict, list[pa.Table]]:
    """GPipe: one stage per rank, all forward micro-batches then all backward, send/recv between stages."""
    per_stage = [rng.randint(1, 6) for _ in range(npus)]
    hidden = rng.choice((1024, 2048))
    mb_tokens = rng.choice((128, 256, 512))
    micro = rng.choice((4, 6, 8))
    rate = rng.uniform(80e12, 200e12)
    act = 2 * mb_tokens * hidden  # bf16 activations (and their gradients) of one micro-batch
    layer_params = 12 * hidden * hidden
    fwd_flops = 2 * mb_tokens * layer_params
    tables = []
    for stage in range(npus):
        g = _graph(rate, stage)
        prev, x = None, None
        for s in range(STEPS):
            base = s * 100_000
            x = g.compute(f"step{s}/dataloader", [prev], duration_us=rng.randint(5, 40),
                          is_cpu=True) if stage == 0 else prev
            for m in range(micro):
                deps = [x]
                if stage > 0:
                    deps.append(g.recv(f"step{s}/fwd/mb{m}/recv_act", stage - 1, act, base + m, [prev]))
                for l in range(per_stage[stage]):
                    x = g.compute(f"step{s}/fwd/mb{m}/layer{l}", deps, num_ops=fwd_flops,
                                  tensor_size=2 * layer_params + 3 * act)
                    deps = [x]
                if stage < npus - 1:
                    g.send(f"step{s}/fwd/mb{m}/send_act", stage + 1, act, base + m, [x])
            for m in reversed(range(micro)):
                deps = [x]
                if stage < npus - 1:
                    deps.append(g.recv(f"step{s}/bwd/mb{m}/recv_grad", stage + 1, act, base + 50_000 + m, [prev]))
                for l in reversed(range(per_stage[stage])):
                    x = g.compute(f"step{s}/bwd/mb{m}/layer{l}", deps, num_ops=2 * fwd_flops,
                                  tensor_size=4 * layer_params + 3 * act)
                    deps = [x]
                if stage > 0:
                    g.send(f"step{s}/bwd/mb{m}/send_grad", stage - 1, act, base + 50_000 + m, [x])
            params = per_stage[stage] * layer_params
            prev = x = g.compute(f"step{s}/optimizer/adam", [x], num_ops=10 * params, tensor_size=16 * params)
        tables.append(g.table())
    info = {"model": f"synthetic transformer, {sum(per_stage)} layers over {npus} stages ({per_stage}), "
                     f"hidden {hidden}, {micro} micro-batches of {mb_tokens} tokens, bf16",
            "parallelism": f"pipeline parallel ({npus} stages, GPipe schedule, {micro} micro-batches)",
            "layers": sum(per_stage), "layers_per_stage": per_stage, "micro_batches": micro,
            "activation_bytes": act}
    return info, tables


def _mlp(g: RankGraph, prefix: str, x: int, dims: list[int], batch: int) -> int:
    for l in range(len(dims) - 1):
        p = dims[l] * dims[l + 1]
        x = g.compute(f"{prefix}/layer{l}", [x], num_ops=2 * batch * p,
                      tensor_size=4 * (p + batch * (dims[l] + dims[l + 1])))
    return x


def _mlp_backward(g: RankGraph, prefix: str, x: int, dims: list[int], batch: int, reduces: list[int]) -> int:
    for l in reversed(range(len(dims) - 1)):
        p = dims[l] * dims[l + 1]
        x = g.compute(f"{prefix}/layer{l}", [x], num_ops=4 * batch * p,
                      tensor_size=4 * (2 * p + batch * (dims[l] + dims[l + 1])))
        reduces += _all_reduce(g, f"{prefix}/layer{l}/all_reduce", [x], 4 * p)
    return x


def _dlrm(rng: random.Random, npus: int) -> tuple[dict, list[pa.Table]]:
    """DLRM: sharded embedding tables (all-to-all of indices and pooled vectors), DDP MLPs."""
    tables_per_rank = rng.randint(1, 4)
    n_tables = tables_per_rank * npus
    dim = rng.choice((32, 64))
    batch = rng.choice((256, 512, 1024))
    pooling = rng.choice((8, 16, 32))
    bottom = [13] + [rng.choice((256, 512)) for _ in range(rng.randint(1, 3))] + [dim]
    top = [dim * (n_tables + 1)] + [rng.choice((256, 512, 1024)) for _ in range(rng.randint(2, 4))] + [1]
    rate = rng.uniform(20e12, 60e12)
    indices = 8 * batch * n_tables * pooling  # int64 indices of the local batch, to the table owners
    pooled = 4 * batch * n_tables * dim  # fp32 pooled vectors, back from the owners
    g = _graph(rate)
    prev = None
    for s in range(STEPS):
        load = g.compute(f"step{s}/dataloader", [prev], duration_us=rng.randint(5, 40), is_cpu=True)
        a2a = g.collective(f"step{s}/fwd/indices/all_to_all", ALL_TO_ALL, indices, [load])
        emb = g.compute(f"step{s}/fwd/embedding_bag", [a2a], num_ops=2 * batch * n_tables * pooling * dim,
                        tensor_size=indices + pooled)
        a2a = g.collective(f"step{s}/fwd/pooled/all_to_all", ALL_TO_ALL, pooled, [emb])
        dense = _mlp(g, f"step{s}/fwd/bottom_mlp", load, bottom, batch)
        x = g.compute(f"step{s}/fwd/interaction", [a2a, dense], num_ops=2 * batch * (n_tables + 1) ** 2 * dim,
                      tensor_size=pooled + 4 * batch * dim)
        x = _mlp(g, f"step{s}/fwd/top_mlp", x, top, batch)
        x = g.compute(f"step{s}/loss", [x], num_ops=10 * batch, tensor_size=8 * batch)
        reduces: list[int] = []
        x = _mlp_backward(g, f"step{s}/bwd/top_mlp", x, top, batch, reduces)
        x = g.compute(f"step{s}/bwd/interaction", [x], num_ops=4 * batch * (n_tables + 1) ** 2 * dim,
                      tensor_size=2 * pooled)
        a2a = g.collective(f"step{s}/bwd/pooled/all_to_all", ALL_TO_ALL, pooled, [x])
        x = _mlp_backward(g, f"step{s}/bwd/bottom_mlp", x, bottom, batch, reduces)
        upd = g.compute(f"step{s}/bwd/embedding_update", [a2a], num_ops=2 * batch * n_tables * pooling * dim,
                        tensor_size=2 * pooled + indices)
        prev = g.compute(f"step{s}/optimizer/sgd", reduces + [x, upd], num_ops=3 * 4096 * 1024,
                         tensor_size=12 * 4096 * 1024)
    info = {"model": f"synthetic DLRM, {n_tables} embedding tables (dim {dim}, pooling {pooling}), "
                     f"bottom MLP {bottom}, top MLP {top}, batch {batch}/rank",
            "parallelism": "hybrid: model-parallel embeddings (all-to-all) + data-parallel MLPs (all-reduce)",
            "layers": len(bottom) + len(top) - 2, "embedding_tables": n_tables, "batch_per_rank": batch}
    table = g.table()
    return info, [table] * npus


def _moe(rng: random.Random, npus: int) -> tuple[dict, list[pa.Table]]:
    """Mixture of experts (expert parallel): all-to-all dispatch and combine around every expert layer."""
    layers = rng.randint(2, 12)
    every = rng.choice((1, 2))  # an MoE block every layer or every other layer
    hidden = rng.choice((512, 1024, 2048))
    tokens = rng.choice((512, 1024, 2048))
    top_k = rng.choice((1, 2))
    rate = rng.uniform(60e12, 150e12)
    act = 2 * tokens * hidden
    routed = act * top_k
    attn, ffn = 4 * hidden * hidden, 8 * hidden * hidden
    g = _graph(rate)
    prev = None
    for s in range(STEPS):
        x = g.compute(f"step{s}/dataloader", [prev], duration_us=rng.randint(5, 40), is_cpu=True)
        moe_layers = []
        for l in range(layers):
            x = g.compute(f"step{s}/fwd/layer{l}/attn", [x],
                          num_ops=2 * tokens * attn + 4 * tokens * tokens * hidden, tensor_size=2 * attn + 3 * act)
            if l % every == 0:
                moe_layers.append(l)
                x = g.compute(f"step{s}/fwd/layer{l}/router", [x], num_ops=2 * tokens * hidden * npus,
                              tensor_size=act)
                x = g.collective(f"step{s}/fwd/layer{l}/dispatch/all_to_all", ALL_TO_ALL, routed, [x])
                x = g.compute(f"step{s}/fwd/layer{l}/experts", [x], num_ops=2 * tokens * top_k * ffn,
                              tensor_size=2 * ffn + 2 * routed)
                x = g.collective(f"step{s}/fwd/layer{l}/combine/all_to_all", ALL_TO_ALL, routed, [x])
            else:
                x = g.compute(f"step{s}/fwd/layer{l}/ffn", [x], num_ops=2 * tokens * ffn,
                              tensor_size=2 * ffn + 2 * act)
        x = g.compute(f"step{s}/loss", [x], num_ops=2 * tokens * hidden, tensor_size=act)
        reduces = []
        for l in reversed(range(layers)):
            if l in moe_layers:
                x = g.collective(f"step{s}/bwd/layer{l}/combine/all_to_all", ALL_TO_ALL, routed, [x])
                x = g.compute(f"step{s}/bwd/layer{l}/experts", [x], num_ops=4 * tokens * top_k * ffn,
                              tensor_size=4 * ffn + 2 * routed)
                x = g.collective(f"step{s}/bwd/layer{l}/dispatch/all_to_all", ALL_TO_ALL, routed, [x])
                dense = attn
            else:
                x = g.compute(f"step{s}/bwd/layer{l}/ffn", [x], num_ops=4 * tokens * ffn,
                              tensor_size=4 * ffn + 2 * act)
                dense = attn + ffn
            x = g.compute(f"step{s}/bwd/layer{l}/attn", [x],
                          num_ops=4 * tokens * attn + 8 * tokens * tokens * hidden, tensor_size=4 * attn + 3 * act)
            reduces += _all_reduce(g, f"step{s}/bwd/layer{l}/dense_grads/all_reduce", [x], 2 * dense)
        params = layers * (attn + ffn)
        prev = g.compute(f"step{s}/optimizer/adam", reduces + [x], num_ops=10 * params, tensor_size=16 * params)
    info = {"model": f"synthetic MoE transformer, {layers} layers ({len(range(0, layers, every))} with experts, "
                     f"top-{top_k}, one expert per rank), hidden {hidden}, {tokens} tokens/rank, bf16",
            "parallelism": f"expert parallel ({npus} experts, all-to-all) + data-parallel dense layers (all-reduce)",
            "layers": layers, "hidden": hidden, "tokens_per_rank": tokens, "top_k": top_k}
    table = g.table()
    return info, [table] * npus


Family = Callable[[random.Random, int], tuple[dict, list[pa.Table]]]
FAMILIES: dict[str, Family] = {"data_parallel": _data_parallel, "tensor_parallel": _tensor_parallel,
                               "pipeline_parallel": _pipeline_parallel, "dlrm": _dlrm, "moe": _moe}


def generate_family(family: str, npus: int, rng: random.Random | None = None, *, seed: int | str = 0
                    ) -> tuple[dict, list[pa.Table]]:
    """A job of `family` on `npus` ranks, drawn from rng (else from random.Random(seed)): its
    description (model, parallelism and the drawn sizes, JSON-ready) and one node table per rank
    (ranks may share one table object). Raises ValueError for an unknown family or a job whose
    sends and receives do not pair up (a generator bug: such a job would hang)."""
    build = FAMILIES.get(family)
    if build is None:
        raise ValueError(f"family {family!r}: expected one of {', '.join(FAMILIES)}")
    if isinstance(npus, bool) or not isinstance(npus, int) or npus < 1:
        raise ValueError(f"npus={npus!r}: expected an integer >= 1")
    info, tables = build(rng if rng is not None else random.Random(seed), npus)
    problems = check_send_recv(tables)
    if problems:
        raise ValueError(f"{family} on {npus} NPUs: unmatched send/recv: {problems[0]}")
    return info, tables
