"""Canned training jobs for any NPU count, sized from model dimensions and a parallelism description.

    job = generate("transformer", 64, tp=2, pp=2, hidden=2048)    # a JobBuilder
    job.write("out/jobs", "gpt")       # gpt.0.et ... gpt.63.et, gpt.comm_groups.json

Workloads (``WORKLOADS`` lists each one's options and defaults):

- ``mlp``: a stack of hidden x hidden linear layers. ``parallelism`` is ``dp`` (data parallel:
  every NPU holds all weights and a slice of the batch; one gradient all-reduce per layer,
  issued as soon as its weight gradient exists, overlapping the rest of backward), ``mp``
  (model parallel: every layer's output features split over the NPUs; the output shards are
  all-gathered after each forward layer and the partial input gradients all-reduced in
  backward), or a hybrid of ``mp`` model-parallel degree and npus / mp data-parallel degree:
  ``dp-mp`` (ASTRA-sim's HYBRID_DATA_MODEL) puts the data-parallel groups on the inner,
  contiguous ranks and the model-parallel groups on the outer, strided ones; ``mp-dp``
  (HYBRID_MODEL_DATA) the reverse. With dp = 2 and mp = 4 on 8 NPUs, ``dp-mp`` has DP groups
  {0,1}, {2,3}, ... and MP groups {0,2,4,6}, {1,3,5,7}; ``mp-dp`` has MP groups {0,1,2,3},
  {4,5,6,7} and DP groups {0,4}, {1,5}, ...
- ``dlrm``: embedding tables model-parallel (table t on NPU t mod npus), the pooled
  embeddings exchanged by an all-to-all forward and their gradients by one backward;
  bottom and top MLPs data-parallel (a gradient all-reduce per layer over all NPUs).
- ``transformer``: Megatron-style tensor parallelism over ``tp`` NPUs (attention heads and
  MLP columns split; two activation all-reduces per layer forward, two backward), ``pp``
  pipeline stages (consecutive layers; GPipe: all micro-batches forward, then all
  backward; activations and their gradients sent between stages with matching send/recv
  tags and sizes), and dp = npus / (tp x pp) data-parallel replicas with ZeRO-2 sharding
  (gradients accumulate locally over the micro-batches; the last backward reduce-scatters
  each layer's gradients over the DP group, each rank updates its 1/dp shard, then the
  shards are all-gathered). Ranks are laid out tp innermost, then pp, then dp outermost:
  rank = t + tp x (p + pp x d); stage neighbours are tp ranks apart.

Conventions shared by every workload:

- A matmul of an (m x k) by a (k x n) matrix is 2mkn FLOPs (num_ops) touching
  bytes_per_element x (mk + kn + mn) bytes (tensor_size), so the simulator's roofline mode
  works; its duration is num_ops / flops (the effective FLOP/s of one NPU), at least 1 µs.
- The global batch is fixed: a data-parallel replica gets batch / dp samples, so per-NPU
  compute shrinks as data-parallel NPUs are added. Degrees must divide what they split.
- Sub-groups are JobBuilder groups (pg_name "1", "2", ...); a group of all NPUs is "0"; a
  collective over a group of one NPU is left out (there is nothing to communicate).
- Every rank issues its collectives in program order (each ctrl-depends on the previous
  one), as one communication stream does; so members of a group always meet in the same
  order, whatever the compute times.
- comm_size follows ASTRA-sim: the whole buffer, except for ALL_GATHER (one NPU's input).
- On a one-dimensional Ring, the simulator times only sub-groups evenly spread around the
  ring (strided groups spanning it, or pairs); contiguous groups of 3+ NPUs need a network
  whose dimensions match the layout (say Ring [mp, dp] for ``mp-dp``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from chakra_core import limits
from chakra_core.generate.builder import JobBuilder

ALL_REDUCE, ALL_GATHER, ALL_TO_ALL, REDUCE_SCATTER = "ALL_REDUCE", "ALL_GATHER", "ALL_TO_ALL", "REDUCE_SCATTER"
ADAM_BYTES_PER_PARAM = 16  # fp32 master weight, gradient and two moments, read and written by the update


# ------------------------------------------------------------------ rank layout


class Mesh:
    """NPU ranks as a grid of parallelism axes, the first innermost: rank = c0 + n0 x (c1 + n1 x (c2 ...))."""

    def __init__(self, npus: int, axes: Sequence[tuple[str, int]]):
        if math.prod(degree for _, degree in axes) != npus:
            raise ValueError(f"parallel degrees {dict(axes)} do not multiply to {npus} NPUs")
        self.npus = npus
        self._stride: dict[str, tuple[int, int]] = {}
        stride = 1
        for name, degree in axes:
            self._stride[name] = (stride, degree)
            stride *= degree

    def degree(self, axis: str) -> int:
        return self._stride[axis][1]

    def coord(self, rank: int, axis: str) -> int:
        stride, degree = self._stride[axis]
        return rank // stride % degree

    def along(self, rank: int, axis: str) -> list[int]:
        """The ranks that differ from `rank` only along `axis` (its group on that axis), ascending."""
        stride, degree = self._stride[axis]
        base = rank - self.coord(rank, axis) * stride
        return [base + i * stride for i in range(degree)]

    def shift(self, rank: int, axis: str, delta: int) -> int | None:
        """The rank `delta` steps along `axis`, or None past its ends."""
        stride, degree = self._stride[axis]
        c = self.coord(rank, axis) + delta
        return rank + delta * stride if 0 <= c < degree else None


class _Rank:
    """One rank's graph with its groups on each mesh axis and the program order of its collectives."""

    def __init__(self, job: JobBuilder, mesh: Mesh, rank: int, bytes_per_element: int):
        self.g = job.rank(rank)
        self.job, self.mesh, self.rank = job, mesh, rank
        self.bpe = bytes_per_element
        self._last_comm: int | None = None

    def coll(self, axis: str, name: str, comm_type: str, size: int, after: int) -> int:
        """A collective over this rank's group on `axis`, after node `after`; returns its id, or
        `after` itself when the group has one member (nothing to communicate)."""
        if self.mesh.degree(axis) == 1:
            return after
        pg_name = self.job.group(self.mesh.along(self.rank, axis))  # registered on first use only
        node = self.g.collective(name, comm_type, size, [after], pg_name=pg_name, ctrl_deps=[self._last_comm])
        self._last_comm = node
        return node

    def matmul(self, name: str, deps: Sequence[int | None], m: int, k: int, n: int) -> int:
        """(m x k) @ (k x n) on the NPU."""
        return self.g.compute(name, deps, num_ops=2 * m * k * n, tensor_size=self.bpe * (m * k + k * n + m * n))

    def dense_forward(self, prefix: str, x: int | None, dims: Sequence[int], rows: int) -> int:
        """Linear layers dims[0] -> dims[1] -> ...; output features split over the "mp" axis and the
        shards all-gathered after every layer."""
        mp = self.mesh.degree("mp")
        for l in range(len(dims) - 1):
            y = self.matmul(f"{prefix}/layer{l}", [x], rows, dims[l], dims[l + 1] // mp)
            x = self.coll("mp", f"{prefix}/layer{l}/all_gather", ALL_GATHER, rows * (dims[l + 1] // mp) * self.bpe, y)
        return x

    def dense_backward(self, prefix: str, x: int, dims: Sequence[int], rows: int, grads: list[int],
                       input_grad: bool = True) -> int:
        """Backward of dense_forward: per layer (last first) the input gradient (partial sums
        all-reduced over "mp") on the critical path, then the weight gradient, all-reduced over
        "dp" while the layers below run. Appends the gradient reductions to `grads`."""
        mp = self.mesh.degree("mp")
        for l in reversed(range(len(dims) - 1)):
            dy, out = x, dims[l + 1] // mp
            if l > 0 or input_grad:
                dx = self.matmul(f"{prefix}/layer{l}/input_grad", [dy], rows, out, dims[l])
                x = self.coll("mp", f"{prefix}/layer{l}/input_grad/all_reduce", ALL_REDUCE, rows * dims[l] * self.bpe,
                              dx)
            w = self.matmul(f"{prefix}/layer{l}/weight_grad", [dy], dims[l], rows, out)
            grads.append(self.coll("dp", f"{prefix}/layer{l}/grad/all_reduce", ALL_REDUCE, dims[l] * out * self.bpe,
                                   w))
        return x


def _degree(name: str, value: int, npus: int) -> int:
    if npus % value:
        raise ValueError(f"{name}={value} does not divide the {npus} NPUs")
    return value


def _tag(step: int, backward: int, micro_batch: int, micro_batches: int) -> int:
    """The send/recv tag of a micro-batch's activations (0) or gradients (1): unique per step."""
    return (step * 2 + backward) * micro_batches + micro_batch


def _divides(what: str, value: int, by_what: str, by: int) -> None:
    if value % by:
        raise ValueError(f"{what}={value} is not divisible by {by_what} ({by})")


# ------------------------------------------------------------------ workloads


MLP_PARALLELISMS = ("dp", "mp", "dp-mp", "mp-dp")


def mlp(npus: int, *, parallelism: str, mp: int | None, layers: int, hidden: int, batch: int,
        bytes_per_element: int, flops: float, steps: int) -> JobBuilder:
    """An MLP of `layers` hidden x hidden linear layers (see the module docstring for parallelism)."""
    if parallelism == "dp":
        if mp not in (None, 1):
            raise ValueError(f"mp={mp}: parallelism dp has no model parallelism (use dp-mp or mp-dp)")
        mp = 1
    elif parallelism == "mp":
        if mp not in (None, npus):
            raise ValueError(f"mp={mp}: parallelism mp splits the model over all {npus} NPUs "
                             "(use dp-mp or mp-dp for a smaller degree)")
        mp = npus
    elif mp is None:
        mp = 2
    mp = _degree("mp", mp, npus)
    dp = npus // mp
    _divides("hidden", hidden, "mp", mp)
    _divides("batch", batch, "the data-parallel degree", dp)
    inner_dp = parallelism in ("dp", "dp-mp")
    mesh = Mesh(npus, [("dp", dp), ("mp", mp)] if inner_dp else [("mp", mp), ("dp", dp)])
    job = JobBuilder(npus, flops_per_s=flops)
    rows, dims = batch // dp, [hidden] * (layers + 1)
    params = layers * hidden * (hidden // mp)  # weights on one NPU
    for rank in range(npus):
        r = _Rank(job, mesh, rank, bytes_per_element)
        prev = None
        for s in range(steps):
            x = r.dense_forward(f"step{s}/fwd", prev, dims, rows)
            x = r.g.compute(f"step{s}/loss", [x], num_ops=3 * rows * hidden,
                            tensor_size=2 * rows * hidden * bytes_per_element)
            grads: list[int] = []
            x = r.dense_backward(f"step{s}/bwd", x, dims, rows, grads, input_grad=False)
            prev = r.g.compute(f"step{s}/optimizer/sgd", grads + [x], num_ops=2 * params,
                               tensor_size=3 * params * bytes_per_element)
    return job


def dlrm(npus: int, *, tables: int, embedding_dim: int, pooling: int, dense_features: int,
         bottom_mlp: Sequence[int], top_mlp: Sequence[int], batch: int, bytes_per_element: int, flops: float,
         steps: int) -> JobBuilder:
    """DLRM: model-parallel embedding tables (all-to-all), data-parallel MLPs (all-reduce)."""
    _divides("batch", batch, "the NPU count", npus)
    d, bpe = embedding_dim, bytes_per_element
    rows = batch // npus
    # every NPU's all-to-all buffer holds the pooled vectors of the most tables one NPU owns
    # (the others are padded to it), for the whole global batch
    a2a = batch * -(-tables // npus) * d * bpe
    bottom = [dense_features, *bottom_mlp, d]
    top = [d + tables * (tables + 1) // 2, *top_mlp, 1]  # dense vector + pairwise dot products of the T+1 vectors
    interaction = rows * d * tables * (tables + 1)  # FLOPs of those dot products
    mesh = Mesh(npus, [("dp", npus), ("mp", 1)])
    job = JobBuilder(npus, flops_per_s=flops)
    for rank in range(npus):
        r = _Rank(job, mesh, rank, bpe)
        own = len(range(rank, tables, npus))  # tables on this NPU
        lookups = batch * own * pooling  # rows gathered from them
        prev = None
        for s in range(steps):
            emb = r.g.compute(f"step{s}/fwd/embedding_bag", [prev], num_ops=lookups * d,
                              tensor_size=(lookups + batch * own) * d * bpe)
            emb = r.coll("dp", f"step{s}/fwd/pooled/all_to_all", ALL_TO_ALL, a2a, emb)
            dense = r.dense_forward(f"step{s}/fwd/bottom_mlp", prev, bottom, rows)
            x = r.g.compute(f"step{s}/fwd/interaction", [emb, dense], num_ops=interaction,
                            tensor_size=rows * ((tables + 1) * d + top[0]) * bpe)
            x = r.dense_forward(f"step{s}/fwd/top_mlp", x, top, rows)
            x = r.g.compute(f"step{s}/loss", [x], num_ops=3 * rows, tensor_size=2 * rows * bpe)
            grads: list[int] = []
            x = r.dense_backward(f"step{s}/bwd/top_mlp", x, top, rows, grads)
            x = r.g.compute(f"step{s}/bwd/interaction", [x], num_ops=2 * interaction,
                            tensor_size=2 * rows * ((tables + 1) * d + top[0]) * bpe)
            emb_grad = r.coll("dp", f"step{s}/bwd/pooled/all_to_all", ALL_TO_ALL, a2a, x)
            x = r.dense_backward(f"step{s}/bwd/bottom_mlp", x, bottom, rows, grads, input_grad=False)
            update = r.g.compute(f"step{s}/bwd/embedding_update", [emb_grad], num_ops=2 * lookups * d,
                                 tensor_size=2 * lookups * d * bpe)
            params = sum(a * b for dims in (bottom, top) for a, b in zip(dims, dims[1:]))
            prev = r.g.compute(f"step{s}/optimizer/sgd", grads + [x, update], num_ops=2 * params,
                               tensor_size=3 * params * bpe)
    return job


def transformer(npus: int, *, tp: int, pp: int, layers: int, hidden: int, ffn: int, seq: int, batch: int,
                micro_batches: int, bytes_per_element: int, flops: float, steps: int) -> JobBuilder:
    """Transformer blocks under tensor, pipeline and ZeRO-2 data parallelism (module docstring)."""
    _degree("tp", tp, npus)
    _degree("pp", pp, npus)
    _degree("tp x pp", tp * pp, npus)
    dp = npus // (tp * pp)
    h, bpe, ffn_h = hidden, bytes_per_element, ffn * hidden
    _divides("hidden", h, "tp", tp)
    _divides("ffn x hidden", ffn_h, "tp", tp)
    if layers < pp:
        raise ValueError(f"layers={layers}: fewer layers than the {pp} pipeline stages")
    _divides("batch", batch, "data-parallel degree x micro_batches", dp * micro_batches)
    mb = batch // (dp * micro_batches)  # sequences per micro-batch
    tokens = mb * seq
    act = tokens * h * bpe  # activations (or their gradients) of one micro-batch between layers and stages
    # attention: QKV and output projections (4 h x h matmuls), then scores and context (2 seq x seq x h each)
    attn_flops = 2 * tokens * 4 * h * h // tp + 4 * mb * seq * seq * h // tp
    attn_bytes = bpe * (4 * h * h // tp + 2 * tokens * h + 3 * tokens * h // tp)
    mlp_flops = 2 * tokens * 2 * ffn_h * h // tp
    mlp_bytes = bpe * (2 * ffn_h * h // tp + 2 * tokens * h + tokens * ffn_h // tp)
    layer_params = (4 * h * h + 2 * ffn_h * h) // tp  # weights of one layer on one TP rank
    shard = -(-layer_params // dp)  # ZeRO-2: the part of them this DP rank updates
    per_stage = [layers // pp + (i < layers % pp) for i in range(pp)]
    mesh = Mesh(npus, [("tp", tp), ("pp", pp), ("dp", dp)])
    job = JobBuilder(npus, flops_per_s=flops)
    template_names: dict[int, list[str]] = {}  # per stage: its first rank's groups and (rank, before, after)
    template_peers: dict[int, tuple] = {}
    for rank in range(npus):
        # a stage's ranks run its first rank's graph with their own groups and neighbours
        stage, template = mesh.coord(rank, "pp"), tp * mesh.coord(rank, "pp")
        before, after = mesh.shift(rank, "pp", -1), mesh.shift(rank, "pp", 1)
        names = [job.group(mesh.along(rank, axis)) for axis in ("tp", "dp") if mesh.degree(axis) > 1]
        if rank != template:
            job.derive(rank, template, dict(zip(template_names[stage], names)),
                       {t: r for t, r in zip(template_peers[stage], (rank, before, after)) if t is not None})
            continue
        template_names[stage], template_peers[stage] = names, (rank, before, after)
        r, g = _Rank(job, mesh, rank, bpe), job.rank(rank)
        mine = range(sum(per_stage[:stage]), sum(per_stage[:stage + 1]))
        ready: dict[int, int | None] = dict.fromkeys(mine)  # layer l's parameters are up to date
        x = None
        for s in range(steps):
            for m in range(micro_batches):
                deps = [x]
                if before is not None:
                    deps.append(g.recv(f"step{s}/fwd/mb{m}/recv_activation", before, act, _tag(s, 0, m, micro_batches)))
                for l in mine:
                    a = g.compute(f"step{s}/fwd/mb{m}/layer{l}/attention", deps + [ready[l]], num_ops=attn_flops,
                                  tensor_size=attn_bytes)
                    a = r.coll("tp", f"step{s}/fwd/mb{m}/layer{l}/attention/all_reduce", ALL_REDUCE, act, a)
                    x = g.compute(f"step{s}/fwd/mb{m}/layer{l}/mlp", [a], num_ops=mlp_flops, tensor_size=mlp_bytes)
                    x = r.coll("tp", f"step{s}/fwd/mb{m}/layer{l}/mlp/all_reduce", ALL_REDUCE, act, x)
                    deps = [x]
                if after is not None:
                    g.send(f"step{s}/fwd/mb{m}/send_activation", after, act, _tag(s, 0, m, micro_batches), [x])
            grads = []
            for m in reversed(range(micro_batches)):
                deps = [x]
                if after is not None:
                    deps.append(g.recv(f"step{s}/bwd/mb{m}/recv_grad", after, act, _tag(s, 1, m, micro_batches)))
                for l in reversed(mine):
                    y = g.compute(f"step{s}/bwd/mb{m}/layer{l}/mlp", deps, num_ops=2 * mlp_flops,
                                  tensor_size=2 * mlp_bytes)
                    y = r.coll("tp", f"step{s}/bwd/mb{m}/layer{l}/mlp/all_reduce", ALL_REDUCE, act, y)
                    w = g.compute(f"step{s}/bwd/mb{m}/layer{l}/attention", [y], num_ops=2 * attn_flops,
                                  tensor_size=2 * attn_bytes)
                    x = r.coll("tp", f"step{s}/bwd/mb{m}/layer{l}/attention/all_reduce", ALL_REDUCE, act, w)
                    if m == 0:  # the last micro-batch: the accumulated gradients are complete
                        grads.append(r.coll("dp", f"step{s}/bwd/layer{l}/grad/reduce_scatter", REDUCE_SCATTER,
                                            layer_params * bpe, w))
                    deps = [x]
                if before is not None:
                    g.send(f"step{s}/bwd/mb{m}/send_grad", before, act, _tag(s, 1, m, micro_batches), [x])
            x = g.compute(f"step{s}/optimizer/adam", grads + [x], num_ops=10 * shard * len(mine),
                          tensor_size=ADAM_BYTES_PER_PARAM * shard * len(mine))
            for l in mine:
                ready[l] = r.coll("dp", f"step{s}/optimizer/layer{l}/all_gather", ALL_GATHER, shard * bpe, x)
    return job


# ------------------------------------------------------------------ registry and entry point


@dataclass(frozen=True)
class Option:
    """One option of a workload: its default, kind (int, float, str or ints, written "512,256"),
    allowed values and help."""

    default: object
    help: str
    kind: type = int
    choices: tuple = ()

    def coerce(self, name: str, value) -> object:
        """The value in this option's kind (strings are parsed, as from the command line)."""
        if value is None:
            if self.default is None:
                return None
            raise ValueError(f"option {name} needs a value")
        try:
            if self.kind is tuple:
                items = value.split(",") if isinstance(value, str) else list(value)
                value = tuple(int(v) for v in items)
                bad = not value or min(value) < 1
            elif self.kind is str:
                value = str(value)
                bad = False
            else:
                if isinstance(value, bool) or (self.kind is int and isinstance(value, float)):
                    raise ValueError
                value = self.kind(float(value) if self.kind is float else value)
                bad = not value >= 1 if self.kind is int else not (value > 0 and math.isfinite(value))
        except (TypeError, ValueError):
            bad = True
        if bad:
            what = {int: "an integer >= 1", float: "a number > 0", tuple: "integers >= 1 like 512,256",
                    str: "text"}[self.kind]
            raise ValueError(f"option {name}={value!r}: expected {what}")
        if self.choices and value not in self.choices:
            raise ValueError(f"option {name}={value!r}: expected one of {', '.join(map(str, self.choices))}")
        return value


@dataclass(frozen=True)
class Workload:
    name: str
    build: Callable[..., JobBuilder]
    description: str
    options: dict[str, Option]


def _common(bytes_per_element: int, flops: float) -> dict[str, Option]:
    return {
        "bytes_per_element": Option(bytes_per_element, "bytes per element of weights, activations and gradients"),
        "flops": Option(flops, "effective FLOP/s of one NPU: a compute node lasts num_ops / flops", float),
        "steps": Option(1, "training steps (iterations), each after the previous one's optimizer"),
    }


WORKLOADS: dict[str, Workload] = {w.name: w for w in (
    Workload("mlp", mlp, "an MLP of hidden x hidden linear layers, data/model parallel or a hybrid", {
        "parallelism": Option("dp", "dp, mp, dp-mp (DP groups inner, contiguous; MP outer, strided) or "
                              "mp-dp (MP inner, DP outer)", str, MLP_PARALLELISMS),
        "mp": Option(None, "model-parallel degree (dp: 1, mp: all NPUs, hybrids: default 2); "
                     "the data-parallel degree is npus / mp"),
        "layers": Option(6, "linear layers"),
        "hidden": Option(4096, "hidden size (every layer is hidden x hidden)"),
        "batch": Option(4096, "global batch (samples per step, split over the data-parallel replicas)"),
        **_common(2, 100e12),
    }),
    Workload("dlrm", dlrm, "DLRM: model-parallel embedding tables (all-to-all), data-parallel MLPs", {
        "tables": Option(26, "embedding tables, table t on NPU t mod npus"),
        "embedding_dim": Option(64, "embedding vector size (also the bottom MLP's output)"),
        "pooling": Option(20, "lookups per sample and table (summed)"),
        "dense_features": Option(13, "dense input features (the bottom MLP's input)"),
        "bottom_mlp": Option((512, 256), "bottom MLP hidden sizes", tuple),
        "top_mlp": Option((1024, 512, 256), "top MLP hidden sizes (a final layer to 1 is added)", tuple),
        "batch": Option(16384, "global batch (samples per step, split over all NPUs)"),
        **_common(4, 50e12),
    }),
    Workload("transformer", transformer, "transformer blocks: tensor x pipeline x ZeRO-2 data parallel", {
        "tp": Option(1, "tensor-parallel degree (inner, contiguous ranks)"),
        "pp": Option(1, "pipeline stages (consecutive layers; micro-batches exchanged by send/recv)"),
        "layers": Option(4, "transformer layers"),
        "hidden": Option(1024, "hidden size"),
        "ffn": Option(4, "MLP width as a multiple of hidden"),
        "seq": Option(1024, "sequence length (tokens per sequence)"),
        "batch": Option(256, "global batch in sequences, split over the data-parallel replicas"),
        "micro_batches": Option(4, "micro-batches per step and replica (GPipe; gradient accumulation)"),
        **_common(2, 150e12),
    }),
)}


def generate(workload: str, npus: int, **options) -> JobBuilder:
    """The job of `workload` (a WORKLOADS name) on `npus` NPUs; options as listed in WORKLOADS
    (absent ones take their defaults; strings are parsed as on the command line)."""
    spec = WORKLOADS.get(workload)
    if spec is None:
        raise ValueError(f"workload {workload!r}: expected one of {', '.join(WORKLOADS)}")
    if isinstance(npus, bool) or not isinstance(npus, int) or npus < 1:
        raise ValueError(f"npus={npus!r}: expected an integer >= 1")
    unknown = sorted(set(options) - set(spec.options))
    if unknown:
        raise ValueError(f"option(s) {', '.join(unknown)} do not apply to workload {workload} "
                         f"(its options: {', '.join(spec.options)})")
    if npus > limits.value("npus"):
        raise limits.LimitExceeded(f"generate {workload}", "npus", f"{npus:,} NPUs")
    values = {name: opt.coerce(name, options.get(name, opt.default)) for name, opt in spec.options.items()}
    _check_size(spec, npus, values)
    return spec.build(npus, **values)


REPEATS = ("layers", "steps", "micro_batches", "tables")  # options a job's nodes grow with, at most linearly
PROBE = 16


def _check_size(spec: Workload, npus: int, values: dict) -> None:
    """Refuses, before building it, a job beyond the `nodes` limit (per rank, and for all ranks,
    which are held in memory together): the job is built once with each repeat count above PROBE
    cut to PROBE (layers never below the pipeline stages), and its nodes scaled by how much each
    count was cut, an upper bound as nodes grow at most linearly in each."""
    cut = {k: max(PROBE, values.get("pp") or 1) if k == "layers" else PROBE
           for k in REPEATS if isinstance(values.get(k), int) and values[k] > PROBE}
    cut = {k: v for k, v in cut.items() if values[k] > v}
    if not cut:
        return
    probe = spec.build(npus, **{**values, **cut})
    scale = math.prod(values[k] / v for k, v in cut.items())
    per_rank = max(len(probe.rank(r)) for r in range(npus)) * scale
    total = sum(len(probe.rank(r)) for r in range(npus)) * scale
    most = limits.value("nodes")
    if max(per_rank, total) > most:
        raise limits.LimitExceeded(f"generate {spec.name}", "nodes", f"about {per_rank:,.0f} nodes per rank and "
                                   f"{total:,.0f} in all ({', '.join(f'{k}={values[k]:,}' for k in cut)})")
