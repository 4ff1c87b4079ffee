"""Benchmark: columnar ET I/O (chakra_core.read_table / write_table) against the plain protobuf loop.

Run it as a script (pytest does not collect it: the file name does not start with ``test_``):

    .venv/bin/python tests/benchmarks/bench_et_io.py [--nodes 1000000] [--ranks 8] [--out DIR]
        [--workload real|pytorch|compact ...] [--copies 40] [--co-runner cpu|memory]

Workloads: ``real`` is the real ResNet PyTorch trace of datasets/pytorch-et converted to a
Chakra ET (what ``chakra convert`` writes: tensor text and 8 attributes a node) and repeated
``--copies`` times with shifted ids into one file (40 copies = 573,880 nodes); ``pytorch`` and
``compact`` are built vectorised with numpy/pyarrow (no per-node Python loop) over ``--ranks``
files. Each is written with ``write_table``, read back with
``read_table`` and with the reference tools' approach (a Python loop over varint length
prefixes calling ``Node.ParseFromString``), checks that both views agree, measures the peak
memory of ``read_table`` in a fresh subprocess, and prints a summary with PASS/FAIL against
two targets:

- read_table throughput >= 10x the plain protobuf loop;
- peak RSS of read_table (minus the RSS after imports) < 3x the file size (largest rank file).

Beside the default (``CHAKRA_DECODE_THREADS``, else every CPU) it prints read_table with one
decoding thread and, as floors on the same bytes, what one core does when it only copies them
(memcpy), only follows the length prefixes, or walks every protobuf tag (nested into inputs,
outputs and attributes) without building anything (``_etcodec.scan``).

--co-runner runs another process for the whole measurement, busy on the other core: ``cpu``
spins in Python (the registers and caches of its own core), ``memory`` streams 256 MiB
copies through numpy (the shared last-level cache and memory bandwidth): what other users of
a shared machine do to the per-core figures.

The exit status is 0 whatever the figures (this is a report) unless a correctness check
fails (exit status 1). Importing this module has no side effects.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

READ_RATIO_TARGET = 10.0
MEMORY_RATIO_TARGET = 3.0
REPEATS = 5  # each read measurement runs this often; the best run counts (warm page cache, a noisy machine)
SAMPLE_NODES = 2000  # protobuf nodes compared field by field with table rows (one rank)

# ----------------------------------------------------------------------------- trace content

# (name, op_schema, inputs per node, is a matmul-like op with num_ops/tensor_size)
CPU_OPS = (
    ("aten::mm", "aten::mm(Tensor self, Tensor mat2) -> Tensor", 2, True),
    ("aten::addmm", "aten::addmm(Tensor self, Tensor mat1, Tensor mat2, *, Scalar beta=1, Scalar alpha=1) -> Tensor",
     2, True),
    ("aten::bmm", "aten::bmm(Tensor self, Tensor mat2) -> Tensor", 2, True),
    ("aten::matmul", "aten::matmul(Tensor self, Tensor other) -> Tensor", 2, True),
    ("aten::linear", "aten::linear(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor", 2, True),
    ("aten::add_", "aten::add_.Tensor(Tensor(a!) self, Tensor other, *, Scalar alpha=1) -> Tensor(a!)", 2, False),
    ("aten::mul", "aten::mul.Tensor(Tensor self, Tensor other) -> Tensor", 2, False),
    ("aten::relu", "aten::relu(Tensor self) -> Tensor", 1, False),
    ("aten::view", "aten::view(Tensor(a) self, SymInt[] size) -> Tensor(a)", 1, False),
    ("aten::t", "aten::t(Tensor(a) self) -> Tensor(a)", 1, False),
    ("aten::empty", "aten::empty.memory_format(SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, "
     "Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor", 1, False),
    ("aten::copy_", "aten::copy_(Tensor(a!) self, Tensor src, bool non_blocking=False) -> Tensor(a!)", 2, False),
    ("aten::layer_norm", "aten::layer_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight=None, "
     "Tensor? bias=None, float eps=1e-05, bool cudnn_enable=True) -> Tensor", 1, False),
    ("aten::_softmax", "aten::_softmax(Tensor self, int dim, bool half_to_float) -> Tensor", 1, False),
)
GPU_KERNELS = (
    ("ampere_sgemm_128x64_nn", 2, True),
    ("sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_aligna4_alignc4_execute_kernel",
     2, True),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
     "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)", 2, False),
    ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, "
     "at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(float*, float const*, int)", 1, False),
    ("Memcpy DtoD (Device -> Device)", 1, False),
)
# (kernel name, CollectiveCommType)
COLLECTIVES = (
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", 0),
    ("ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", 2),
    ("ncclDevKernel_ReduceScatter_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", 7),
)
SENDRECV_NAME = "ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)"
ROOT_NAME = "[pytorch|profiler|execution_trace|thread]"
DIMS = (32, 64, 128, 256, 512, 768, 1024, 2048, 4096)
PG_NAMES = ("0", "1", "2", "3")
KERNEL_FILES = ("/opt/pytorch/aten/src/ATen/native/cuda/Blas.cpp", "/opt/pytorch/aten/src/ATen/native/cuda/Loops.cuh",
                "/opt/pytorch/aten/src/ATen/native/cuda/SoftMax.cu")

COMP_NODE, SEND_NODE, RECV_NODE, COLL_NODE = 4, 5, 6, 7
COLL_FRACTION = 0.05
SENDRECV_FRACTION = 0.0025  # each of SEND and RECV
GPU_FRACTION_OF_COMP = 0.35
GROUP = 8  # every GROUP-th node is a top-level op (ctrl parent = thread root); others hang below it
FAN_IN_EVERY = 16  # every FAN_IN_EVERY-th node also depends on two earlier nodes


def build_rank_table(rank: int, ranks: int, n: int, id_base: int, seed: int = 0):
    """The node table of one rank: n nodes with ids id_base .. id_base + n - 1, built vectorised."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from chakra_core.format.columns import IO_INFO_TYPE, OTHER_ATTR_TYPE, VALUE_KINDS

    rng = np.random.default_rng(seed * 1000003 + rank)
    idx = np.arange(n, dtype=np.int64)
    ids = (id_base + idx).astype(np.uint64)

    # --- node kinds and names
    u = rng.random(n)
    ntype = np.full(n, COMP_NODE, np.int32)
    ntype[u < COLL_FRACTION] = COLL_NODE
    ntype[(u >= COLL_FRACTION) & (u < COLL_FRACTION + SENDRECV_FRACTION)] = SEND_NODE
    ntype[(u >= COLL_FRACTION + SENDRECV_FRACTION) & (u < COLL_FRACTION + 2 * SENDRECV_FRACTION)] = RECV_NODE
    ntype[0] = COMP_NODE
    comp = ntype == COMP_NODE
    coll = ntype == COLL_NODE
    p2p = (ntype == SEND_NODE) | (ntype == RECV_NODE)
    gpu = comp & (rng.random(n) < GPU_FRACTION_OF_COMP)
    gpu[0] = False
    cpu = comp & ~gpu

    # one pool of names; per-node index into it
    names_pool = [ROOT_NAME] + [c[0] for c in CPU_OPS] + [g[0] for g in GPU_KERNELS] + \
                 [c[0] for c in COLLECTIVES] + [SENDRECV_NAME]
    schema_pool = [""] + [c[1] for c in CPU_OPS] + [""] * len(GPU_KERNELS) + [""] * len(COLLECTIVES) + [""]
    n_inputs_pool = np.array([1] + [c[2] for c in CPU_OPS] + [g[1] for g in GPU_KERNELS] +
                             [1] * len(COLLECTIVES) + [1], np.int64)
    matmul_pool = np.array([False] + [c[3] for c in CPU_OPS] + [g[2] for g in GPU_KERNELS] +
                           [False] * len(COLLECTIVES) + [False])
    cpu_first = 1
    gpu_first = cpu_first + len(CPU_OPS)
    coll_first = gpu_first + len(GPU_KERNELS)
    p2p_index = coll_first + len(COLLECTIVES)
    name_idx = np.zeros(n, np.int32)
    name_idx[cpu] = cpu_first + rng.integers(0, len(CPU_OPS), int(cpu.sum()))
    name_idx[gpu] = gpu_first + rng.integers(0, len(GPU_KERNELS), int(gpu.sum()))
    coll_choice = rng.integers(0, len(COLLECTIVES), int(coll.sum()))
    name_idx[coll] = coll_first + coll_choice
    name_idx[p2p] = p2p_index
    name_idx[0] = 0
    take = pa.array(name_idx)
    names = pa.array(names_pool, pa.string()).take(take)
    op_schema = pa.array(schema_pool, pa.string()).take(take)

    # --- dependencies: ctrl parent = top-level op of the group (or the thread root); data = chain + fan-in
    ctrl_parent = np.where(idx % GROUP == 1, 0, idx - ((idx - 1) % GROUP))
    ctrl_counts = (idx > 0).astype(np.int32)
    ctrl_offsets = np.zeros(n + 1, np.int32)
    np.cumsum(ctrl_counts, out=ctrl_offsets[1:])
    ctrl_values = (id_base + ctrl_parent[1:]).astype(np.uint64)
    ctrl_deps = pa.ListArray.from_arrays(pa.array(ctrl_offsets), pa.array(ctrl_values), type=pa.list_(pa.uint64()))

    fan_in = (idx % FAN_IN_EVERY == 0) & (idx >= FAN_IN_EVERY)
    data_counts = (idx > 0).astype(np.int32) + 2 * fan_in.astype(np.int32)
    data_offsets = np.zeros(n + 1, np.int32)
    np.cumsum(data_counts, out=data_offsets[1:])
    data_values = np.zeros(int(data_offsets[-1]), np.uint64)
    has_dep = idx > 0
    data_values[data_offsets[:-1][has_dep]] = (id_base + idx[has_dep] - 1).astype(np.uint64)
    data_values[data_offsets[:-1][fan_in] + 1] = (id_base + idx[fan_in] - 5).astype(np.uint64)
    data_values[data_offsets[:-1][fan_in] + 2] = (id_base + idx[fan_in] - 9).astype(np.uint64)
    data_deps = pa.ListArray.from_arrays(pa.array(data_offsets), pa.array(data_values), type=pa.list_(pa.uint64()))

    duration = rng.integers(1, 5000, n).astype(np.uint64)

    # --- tensors as PyTorch writes them: values "[[id, storage, offset, numel, elem_bytes, device]]"
    dims = np.array(DIMS, np.int64)
    a = dims[rng.integers(0, len(dims), n)]
    b = dims[rng.integers(0, len(dims), n)]
    c = dims[rng.integers(0, len(dims), n)]
    two_inputs = n_inputs_pool[name_idx] == 2
    tensor_base = 1000 + 3 * (idx + rank * n)
    device = np.where(cpu, "'cpu'", f"'cuda:{rank % 8}'")

    def s(x) -> pa.Array:
        return pa.array(x).cast(pa.string())

    def join(*parts) -> pa.Array:
        return pc.binary_join_element_wise(*parts, "")

    dev = pa.array(device, pa.string())
    t0, t1, t2 = s(tensor_base), s(tensor_base + 1), s(tensor_base + 2)
    ne_ab, ne_bc, ne_ac = s(a * b), s(b * c), s(a * c)
    sa, sb, sc = s(a), s(b), s(c)
    one_tensor = join("[[", t0, ", ", t0, ", 0, ", ne_ab, ", 4, ", dev, "]]")
    two_tensors = join("[[", t0, ", ", t0, ", 0, ", ne_ab, ", 4, ", dev, "], [", t1, ", ", t1, ", 0, ", ne_bc,
                       ", 4, ", dev, "]]")
    mask2 = pa.array(two_inputs)
    in_values = pc.if_else(mask2, two_tensors, one_tensor)
    in_shapes = pc.if_else(mask2, join("[[", sa, ", ", sb, "], [", sb, ", ", sc, "]]"), join("[[", sa, ", ", sb, "]]"))
    in_types = pc.if_else(mask2, pa.scalar("['Tensor(float)', 'Tensor(float)']"), pa.scalar("['Tensor(float)']"))
    out_values = join("[[", t2, ", ", t2, ", 0, ", ne_ac, ", 4, ", dev, "]]")
    out_shapes = join("[[", sa, ", ", sc, "]]")
    out_types = pa.array(np.full(n, "['Tensor(float)']"), pa.string())
    inputs = pa.StructArray.from_arrays([in_values, in_shapes, in_types], fields=list(IO_INFO_TYPE))
    outputs = pa.StructArray.from_arrays([out_values, out_shapes, out_types], fields=list(IO_INFO_TYPE))

    # --- attributes as the PyTorch converter writes them (plus roofline and send/recv ones)
    def opt(values, present, type_) -> pa.Array:
        return pa.array(values, type_, mask=~present)

    every = np.ones(n, bool)
    tid = np.where(rng.random(n) < 0.9, 1, 2).astype(np.int64)
    matmul = matmul_pool[name_idx] & comp
    comm_size = np.where(coll | p2p, a * b * 4, 0).astype(np.int64)
    comm_type = np.zeros(n, np.int64)
    comm_type[coll] = np.array([ct for _, ct in COLLECTIVES], np.int64)[coll_choice]
    send = ntype == SEND_NODE
    comm_src = np.where(send, rank, (rank - 1) % ranks).astype(np.int64)
    comm_dst = np.where(send, (rank + 1) % ranks, rank).astype(np.int64)
    comm_tag = np.cumsum(p2p).astype(np.int64)
    stream = np.where(cpu, 0, np.where(coll | p2p, 24, 7)).astype(np.int64)
    seq_id = np.where(rng.random(n) < 0.5, -1, idx // 2).astype(np.int64)
    pg = pa.array(PG_NAMES, pa.string()).take(pa.array(rng.integers(0, len(PG_NAMES), n)))
    pg_name = pc.if_else(pa.array(coll | p2p), pg, pa.scalar(None, pa.string()))
    columns = {
        "id": pa.array(ids),
        "name": names,
        "type": pa.array(ntype),
        "ctrl_deps": ctrl_deps,
        "data_deps": data_deps,
        "duration_micros": pa.array(duration),
        "inputs": inputs,
        "outputs": outputs,
        "is_cpu_op": pa.array(cpu | (idx == 0)),
        "num_ops": opt(2 * a * b * c, matmul, pa.int64()),
        "tensor_size": opt((4 * (a * b + b * c + a * c)).astype(np.uint64), matmul, pa.uint64()),
        "comm_type": opt(comm_type, coll, pa.int64()),
        "comm_size": opt(comm_size, coll | p2p, pa.int64()),
        "comm_src": opt(comm_src, p2p, pa.int64()),
        "comm_dst": opt(comm_dst, p2p, pa.int64()),
        "comm_tag": opt(comm_tag, p2p, pa.int64()),
        "pg_name": pg_name,
        "rf_id": pa.array(id_base + idx + 7),
        "fw_parent": pa.array(np.where(rng.random(n) < 0.3, idx // 3, 0).astype(np.int64)),
        "seq_id": pa.array(seq_id),
        "scope": pa.array(np.where(rng.random(n) < 0.95, 0, 7).astype(np.int64)),
        "tid": pa.array(tid),
        "fw_tid": pa.array(np.where(seq_id >= 0, 0, tid)),
        "op_schema": op_schema,
        "stream": opt(stream, every, pa.int64()),
        "other_attrs": _other_attrs(np, pa, OTHER_ATTR_TYPE, VALUE_KINDS, rng, gpu, n),
    }
    return pa.table(columns)


def build_compact_rank_table(rank: int, ranks: int, n: int, id_base: int, seed: int = 0):
    """An ASTRA-sim-style rank (as the text converter and chakra_generator write): compute nodes
    with durations and collectives with comm_type/comm_size, data dependencies, no tensor text."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    rng = np.random.default_rng(seed * 1000003 + rank + 7)
    idx = np.arange(n, dtype=np.int64)
    coll = rng.random(n) < 0.2
    coll[0] = False
    layer = pa.array(idx // 3).cast(pa.string())
    phase = pa.array(np.array(["FWD", "BWD_IG", "BWD_WG"])[idx % 3])
    comp_names = pc.binary_join_element_wise("COMP_NODE_", layer, "_", phase, "")
    coll_names = pc.binary_join_element_wise("COMM_COLL_NODE_", layer, "_ALL_REDUCE", "")
    deps_off = np.concatenate([[0], np.arange(n, dtype=np.int32)]).astype(np.int32)  # node i>0 depends on i-1
    deps = pa.ListArray.from_arrays(pa.array(deps_off), pa.array((id_base + idx[:-1]).astype(np.uint64)))
    return pa.table({
        "id": pa.array((id_base + idx).astype(np.uint64)),
        "name": pc.if_else(pa.array(coll), coll_names, comp_names),
        "type": pa.array(np.where(coll, COLL_NODE, COMP_NODE).astype(np.int32)),
        "data_deps": deps,
        "duration_micros": pa.array(np.where(coll, 0, rng.integers(1, 5000, n)).astype(np.uint64)),
        "is_cpu_op": pa.array(np.zeros(n, bool)),
        "comm_type": pa.array(rng.choice([0, 2, 6, 7], n), mask=~coll),
        "comm_size": pa.array(rng.integers(1 << 10, 1 << 26, n), mask=~coll),
    })


RESNET = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "datasets", "pytorch-et",
                      "resnet_ddp.rank0.et.json.gz")
REAL_COPIES = 40


def build_real_table(copies: int, out_dir: str):
    """The ResNet trace converted (chakra_core.convert.pytorch.job.convert_job) and repeated `copies`
    times, ids and dependencies shifted per copy; returns (table, metadata bytes)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    import chakra_core
    from chakra_core.convert.pytorch.job import convert_job
    from chakra_core.format import etfile

    job = convert_job(RESNET, os.path.join(out_dir, "resnet-job"), "resnet")
    one = chakra_core.read_table(job.et_files[0])
    span = pc.max(one.column("id")).as_py() + 1
    schema = one.schema
    parts = []
    for k in range(copies):
        shift = pa.scalar(k * span, pa.uint64())
        columns = dict(zip(one.column_names, one.columns))
        columns["id"] = pc.add(one.column("id"), shift)
        for name in ("ctrl_deps", "data_deps"):
            deps = one.column(name).combine_chunks()
            columns[name] = pa.ListArray.from_arrays(deps.offsets, pc.add(deps.values, shift))
        parts.append(pa.table(list(columns.values()), schema=schema))
    return pa.concat_tables(parts), etfile.table_metadata_bytes(one)


WORKLOADS = {"real": "build_real_table", "pytorch": "build_rank_table", "compact": "build_compact_rank_table"}


def _other_attrs(np, pa, other_type, value_kinds, rng, gpu, n):
    """list<struct> column: GPU kernels get a string "kernel_file" and a double "achieved_occupancy"."""
    counts = 2 * gpu.astype(np.int32)
    offsets = np.zeros(n + 1, np.int32)
    np.cumsum(counts, out=offsets[1:])
    m = int(offsets[-1])
    k = m // 2
    is_file = np.tile(np.array([True, False]), k)
    names = np.tile(np.array(["kernel_file", "achieved_occupancy"]), k)
    kind_codes = np.where(is_file, value_kinds.index("string_val"), value_kinds.index("double_val")).astype(np.int8)
    files = np.array(KERNEL_FILES)[rng.integers(0, len(KERNEL_FILES), m)]
    children = []
    for f in other_type:
        if f.name == "name":
            children.append(pa.array(names, pa.string()))
        elif f.name == "kind":
            children.append(pa.DictionaryArray.from_arrays(pa.array(kind_codes), pa.array(value_kinds, pa.string())))
        elif f.name == "string":
            children.append(pa.array(files, pa.string(), mask=~is_file))
        elif f.name == "double":
            children.append(pa.array(rng.random(m), pa.float64(), mask=is_file))
        else:
            children.append(pa.nulls(m, f.type))
    entries = pa.StructArray.from_arrays(children, fields=list(other_type))
    return pa.ListArray.from_arrays(pa.array(offsets), entries, type=pa.list_(other_type))


def global_metadata(rank: int):
    from chakra_core.format.schema import et_def_pb2 as pb

    meta = pb.GlobalMetadata(version="0.0.4")
    meta.attr.add(name="schema", string_val="1.1.1-chakra.0.0.4")
    meta.attr.add(name="pid", uint64_val=4242 + rank)
    meta.attr.add(name="time", string_val="2026-01-01 00:00:00")
    return meta


# ----------------------------------------------------------------------------- readers


def plain_loop_read(path: str) -> int:
    """The reference tools' way: read the bytes, decode each varint prefix in Python, ParseFromString."""
    from google.protobuf.internal.decoder import _DecodeVarint32

    from chakra_core.format.schema import et_def_pb2 as pb

    with open(path, "rb") as f:
        data = f.read()
    end = len(data)
    size, pos = _DecodeVarint32(data, 0)
    meta = pb.GlobalMetadata()
    meta.ParseFromString(data[pos:pos + size])
    pos += size
    count = 0
    Node = pb.Node
    while pos < end:
        size, pos = _DecodeVarint32(data, pos)
        node = Node()
        node.ParseFromString(data[pos:pos + size])
        pos += size
        count += 1
    return count


def plain_loop_table(path: str):
    """What a user writes without this library to get a table: the plain loop, plus copying
    every node field and attribute into Python lists, then pyarrow.table. Not the issue's
    baseline (that is plain_loop_read); printed for context."""
    import pyarrow as pa
    from google.protobuf.internal.decoder import _DecodeVarint32

    from chakra_core.format.schema import et_def_pb2 as pb

    with open(path, "rb") as f:
        data = f.read()
    size, pos = _DecodeVarint32(data, 0)
    pos += size
    columns: dict[str, list] = {k: [] for k in ("id", "name", "type", "ctrl_deps", "data_deps",
                                                "duration_micros", "inputs", "outputs")}
    attrs: dict[str, list] = {}
    row = 0
    while pos < len(data):
        size, pos = _DecodeVarint32(data, pos)
        node = pb.Node()
        node.ParseFromString(data[pos:pos + size])
        pos += size
        columns["id"].append(node.id)
        columns["name"].append(node.name)
        columns["type"].append(node.type)
        columns["ctrl_deps"].append(list(node.ctrl_deps))
        columns["data_deps"].append(list(node.data_deps))
        columns["duration_micros"].append(node.duration_micros)
        columns["inputs"].append(node.inputs.values if node.HasField("inputs") else None)
        columns["outputs"].append(node.outputs.values if node.HasField("outputs") else None)
        for a in node.attr:
            kind = a.WhichOneof("value")
            value = getattr(a, kind) if kind else None
            if a.name not in attrs:
                attrs[a.name] = [None] * row
            attrs[a.name].append(value if not kind or not kind.endswith("_list") else list(value.values))
        row += 1
        for values in attrs.values():
            if len(values) < row:
                values.append(None)
    return pa.table({**columns, **attrs})


def plain_loop_nodes(path: str, wanted: set[int]) -> dict[int, object]:
    """Protobuf nodes at the given 0-based node indices (same loop as plain_loop_read)."""
    from google.protobuf.internal.decoder import _DecodeVarint32

    from chakra_core.format.schema import et_def_pb2 as pb

    with open(path, "rb") as f:
        data = f.read()
    size, pos = _DecodeVarint32(data, 0)
    pos += size
    out = {}
    index = 0
    while pos < len(data):
        size, pos = _DecodeVarint32(data, pos)
        if index in wanted:
            node = pb.Node()
            node.ParseFromString(data[pos:pos + size])
            out[index] = node
        pos += size
        index += 1
    return out


def floors(path: str, repeats: int = 5) -> dict:
    """Seconds of one core (best of `repeats`, process CPU time) to copy the file's bytes, to
    follow its length prefixes, and to walk every tag of every node (nested one level: inputs,
    outputs, attributes), building nothing: what any decoder of these bytes costs at least."""
    import numpy as np

    from chakra_core._native import _etcodec
    from chakra_core.format import etfile

    with open(path, "rb") as f:
        data = f.read()
    with etfile.ETReader(path) as reader:
        start = reader._offset
    src = np.frombuffer(data, np.uint8)
    dst = np.empty_like(src)
    steps = {"memcpy": lambda: np.copyto(dst, src), "frames": lambda: _etcodec.scan(data, start, -1),
             "tags": lambda: _etcodec.scan(data, start, 1)}
    out = {}
    for name, step in steps.items():
        best = float("inf")
        for _ in range(repeats):
            c0 = time.process_time()
            step()
            best = min(best, time.process_time() - c0)
        out[name] = best
    return out


def _proc_status_bytes(key: str) -> int | None:
    """A VmXXX line of /proc/self/status in bytes (Linux); None where there is none."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _maxrss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == "darwin" else 1024)


def _rss_bytes() -> int:
    rss = _proc_status_bytes("VmRSS")
    return rss if rss is not None else _maxrss_bytes()


def _peak_rss_bytes() -> int:
    """Peak RSS of this process image. On Linux ru_maxrss survives exec(): a child started by a
    large parent reports the parent's RSS (subprocess forks/vforks first), so prefer VmHWM,
    which belongs to the new address space."""
    hwm = _proc_status_bytes("VmHWM")
    return hwm if hwm is not None else _maxrss_bytes()


def _measure_memory_child(path: str) -> None:
    """Runs in a fresh interpreter: peak RSS of read_table(path) above the RSS after imports."""
    import chakra_core  # imports pyarrow, numpy, the C codec

    chakra_core.read_metadata(path)  # loads what the first open imports lazily (fsspec's local filesystem)
    gc.collect()
    base_rss = _rss_bytes()
    base_peak = _peak_rss_bytes()
    usage0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    table = chakra_core.read_table(path)
    seconds = time.perf_counter() - t0
    usage1 = resource.getrusage(resource.RUSAGE_SELF)
    peak = _peak_rss_bytes()
    after_rss = _rss_bytes()
    print(json.dumps({
        "base_rss": base_rss, "base_peak": base_peak, "peak": peak, "after_rss": after_rss,
        "ru_maxrss": _maxrss_bytes(),
        "table_nbytes": table.nbytes, "rows": table.num_rows, "seconds": seconds,
        "user_s": usage1.ru_utime - usage0.ru_utime, "sys_s": usage1.ru_stime - usage0.ru_stime,
        "page_faults": usage1.ru_minflt - usage0.ru_minflt,
    }))


def measure_read_memory(path: str) -> dict:
    parent_peak = _peak_rss_bytes()
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--_measure-memory", path],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"memory subprocess failed ({proc.returncode}): {proc.stderr[-2000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["parent_peak"] = parent_peak
    return result


# ----------------------------------------------------------------------------- the run


@dataclass
class Results:
    workload: str = "pytorch"
    nodes: int = 0
    ranks: int = 0
    file_bytes: int = 0
    build_s: float = 0.0
    normalize_s: float = 0.0
    write_s: float = 0.0
    read_s: list = field(default_factory=list)
    plain_s: list = field(default_factory=list)
    read_cpu_s: list = field(default_factory=list)  # process CPU time of the same runs (robust to a busy machine)
    plain_cpu_s: list = field(default_factory=list)
    read1_cpu_s: list = field(default_factory=list)  # read_table with one decoding thread, process CPU time
    floors: dict = field(default_factory=dict)
    memory: dict = field(default_factory=dict)
    plain_table_s: float = 0.0
    plain_table_nodes: int = 0
    largest_file: int = 0
    errors: list = field(default_factory=list)


def _mb(n_bytes: float) -> float:
    return n_bytes / 1e6


def _check_sample(table, nodes_by_index: dict, source_cols: dict, errors: list) -> int:
    """Compares protobuf nodes with table rows (and with the table that was written)."""
    ids = table.column("id")
    names = table.column("name")
    comm_size = table.column("comm_size")
    types = table.column("type")
    checked = 0
    for i, node in sorted(nodes_by_index.items()):
        attrs = {a.name: a for a in node.attr}
        pb_comm = attrs["comm_size"].int64_val if "comm_size" in attrs else None
        row = (ids[i].as_py(), names[i].as_py(), types[i].as_py(), comm_size[i].as_py())
        want = (node.id, node.name, node.type, pb_comm)
        src = (source_cols["id"][i], source_cols["name"][i], source_cols["type"][i], source_cols["comm_size"][i])
        if row != want or row != src:
            errors.append(f"node #{i}: table {row} != protobuf {want} (written {src})")
        if len(errors) > 10:
            break
        checked += 1
    return checked


def run(nodes: int, ranks: int, out_dir: str, repeats: int = REPEATS, workload: str = "pytorch") -> Results:
    import numpy as np

    import chakra_core

    build_rank = globals()[WORKLOADS[workload]]
    t0 = time.perf_counter()
    real_metadata = None
    if workload == "real":  # one file: the real trace, `nodes` = copies
        table, real_metadata = build_rank(nodes, out_dir)
        tables, ranks, nodes = [table], 1, table.num_rows
    r = Results(nodes=nodes, ranks=ranks, workload=workload)
    per_rank = [nodes // ranks + (1 if k < nodes % ranks else 0) for k in range(ranks)]
    paths = [os.path.join(out_dir, f"bench.{k}.et") for k in range(ranks)]

    # 1. build
    if real_metadata is None:
        tables = []
        id_base = 0
        for k in range(ranks):
            tables.append(build_rank(k, ranks, per_rank[k], id_base))
            id_base += per_rank[k]
    r.build_s = time.perf_counter() - t0
    print(f"built {nodes:,} nodes over {ranks} ranks in {r.build_s:.2f} s", flush=True)

    # 2. write (normalize_table timed apart: write_table would call it on a hand-built table)
    t0 = time.perf_counter()
    tables = [chakra_core.normalize_table(t) for t in tables]
    r.normalize_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    for k, (t, p) in enumerate(zip(tables, paths)):
        chakra_core.write_table(t, p, metadata=real_metadata or global_metadata(k))
    r.write_s = time.perf_counter() - t0
    sizes = [os.path.getsize(p) for p in paths]
    r.file_bytes = sum(sizes)
    r.largest_file = int(np.argmax(sizes))
    print(f"normalize_table {r.normalize_s:.2f} s; write_table {r.write_s:.2f} s, "
          f"{_mb(r.file_bytes):.1f} MB", flush=True)

    # keep what the checks need from rank 0, drop the rest before reading
    check_rank = 0
    src = tables[check_rank]
    source_cols = {name: src.column(name).to_pylist() for name in ("id", "name", "type", "comm_size")}
    del tables

    gc.collect()

    # 3./4. read_table and the plain protobuf loop on the same files, interleaved (so that a
    # change in background load hits both alike), best of `repeats` each
    table_rows, plain_rows = [], []
    for rep in range(repeats):
        rows = []
        c0, t0 = time.process_time(), time.perf_counter()
        for p in paths:
            t = chakra_core.read_table(p)
            rows.append(t.num_rows)
            del t
        r.read_s.append(time.perf_counter() - t0)
        r.read_cpu_s.append(time.process_time() - c0)
        table_rows = rows
        rows = []
        c0, t0 = time.process_time(), time.perf_counter()
        for p in paths:
            rows.append(plain_loop_read(p))
        r.plain_s.append(time.perf_counter() - t0)
        r.plain_cpu_s.append(time.process_time() - c0)
        plain_rows = rows
        c0 = time.process_time()
        for p in paths:
            with chakra_core.ETReader(p) as reader:
                for _ in reader.iter_batches(threads=1):
                    pass
        r.read1_cpu_s.append(time.process_time() - c0)
        print(f"run {rep + 1}: read_table {r.read_s[-1]:.3f} s, plain protobuf loop {r.plain_s[-1]:.3f} s",
              flush=True)

    # context: the plain loop when it also builds a table (one rank, once: it is slow)
    t0 = time.perf_counter()
    plain_table = plain_loop_table(paths[0])
    r.plain_table_s = time.perf_counter() - t0
    r.plain_table_nodes = plain_table.num_rows
    del plain_table

    # 5. correctness
    if table_rows != per_rank:
        r.errors.append(f"read_table node counts {table_rows} != written {per_rank}")
    if plain_rows != per_rank:
        r.errors.append(f"plain-loop node counts {plain_rows} != written {per_rank}")
    table = chakra_core.read_table(paths[check_rank])
    rng = np.random.default_rng(12345)
    n0 = per_rank[check_rank]
    sample = set(rng.choice(n0, size=min(SAMPLE_NODES, n0), replace=False).tolist()) | {0, n0 - 1}
    pb_nodes = plain_loop_nodes(paths[check_rank], sample)
    checked = _check_sample(table, pb_nodes, source_cols, r.errors)
    # the whole rank round-trips: every column equals what was written (attr_layout excepted:
    # written null = canonical order, read back as the order found in the file)
    for name in src.column_names:
        if name != "attr_layout" and not table.column(name).equals(src.column(name)):
            r.errors.append(f"rank {check_rank}: column {name} read back differs from what was written")
    del src
    for i, node in pb_nodes.items():  # deps of the sampled protobuf nodes, too
        if list(node.data_deps) != table.column("data_deps")[i].as_py():
            r.errors.append(f"node #{i}: data_deps differ between protobuf and table")
            break
    meta = chakra_core.table_metadata(table)
    if real_metadata is not None:
        from chakra_core.format.etfile import table_metadata_bytes

        if table_metadata_bytes(table) != real_metadata:
            r.errors.append("the real trace's GlobalMetadata does not round-trip")
    elif meta != global_metadata(check_rank):
        r.errors.append(f"rank {check_rank}: GlobalMetadata does not round-trip: {meta}")
    print(f"checked {checked} sampled nodes of rank {check_rank} (protobuf vs table vs written); "
          f"node counts {'OK' if table_rows == plain_rows == per_rank else 'MISMATCH'}", flush=True)
    del table, pb_nodes
    gc.collect()

    # 6. peak memory of read_table in a fresh process, largest file
    r.memory = measure_read_memory(paths[r.largest_file])
    # 7. floors on the largest file (per core), scaled to all files by bytes
    largest = paths[r.largest_file]
    scale = r.file_bytes / os.path.getsize(largest)
    r.floors = {k: v * scale for k, v in floors(largest).items()}
    return r


def default_decode_threads() -> int:
    from chakra_core.format.codec import default_decode_threads as threads

    return threads()


def print_summary(r: Results) -> bool:
    best_read = min(r.read_s)
    best_plain = min(r.plain_s)
    ratio = best_plain / best_read
    mem = r.memory
    largest = mem["file_bytes"]
    base = mem["base_rss"]
    peak_over = mem["peak"] - base
    mem_ratio = peak_over / largest
    read_ok = ratio >= READ_RATIO_TARGET
    mem_ok = mem_ratio < MEMORY_RATIO_TARGET
    lines = [
        "",
        "=" * 78,
        f"Chakra ET I/O benchmark, {r.workload} workload: {r.nodes:,} nodes, {r.ranks} ranks, "
        f"{_mb(r.file_bytes):.1f} MB of .et ({r.file_bytes / r.nodes:.0f} B/node), "
        f"{default_decode_threads()} decode thread(s)",
        "-" * 78,
        f"build (numpy/pyarrow)        {r.build_s:9.2f} s",
        f"normalize_table              {r.normalize_s:9.2f} s",
        f"write_table                  {r.write_s:9.2f} s   {r.nodes / r.write_s / 1e6:8.2f} M nodes/s  "
        f"{_mb(r.file_bytes) / r.write_s:8.1f} MB/s",
        f"read_table (best of {len(r.read_s)})      {best_read:9.3f} s   {r.nodes / best_read / 1e6:8.2f} M nodes/s  "
        f"{_mb(r.file_bytes) / best_read:8.1f} MB/s",
        f"plain protobuf loop (best {len(r.plain_s)}) {best_plain:9.3f} s   {r.nodes / best_plain / 1e6:8.2f} M nodes/s  "
        f"{_mb(r.file_bytes) / best_plain:8.1f} MB/s",
        f"read ratio table/plain       {ratio:9.1f} x   (target >= {READ_RATIO_TARGET:.0f}x)   "
        f"{'PASS' if read_ok else 'FAIL'}",
        f"  same runs in process CPU time (all threads): read_table {min(r.read_cpu_s):.3f} s, plain loop "
        f"{min(r.plain_cpu_s):.3f} s, ratio {min(r.plain_cpu_s) / min(r.read_cpu_s):.1f} x",
        f"  one core (process CPU time, best of {len(r.read1_cpu_s)}): read_table with 1 decoding thread "
        f"{r.nodes / min(r.read1_cpu_s) / 1e6:.2f} M nodes/s ({_mb(r.file_bytes) / min(r.read1_cpu_s):.0f} MB/s), "
        f"plain loop {r.nodes / min(r.plain_cpu_s) / 1e6:.2f} M nodes/s: ratio "
        f"{min(r.plain_cpu_s) / min(r.read1_cpu_s):.1f} x per core",
        "  floors, one core on the same bytes (nothing built): " + ", ".join(
            f"{label} {r.nodes / r.floors[key] / 1e6:.1f} M nodes/s ({_mb(r.file_bytes) / r.floors[key] / 1e3:.1f} GB/s)"
            for key, label in (("memcpy", "memcpy"), ("frames", "length prefixes only"),
                               ("tags", "every tag walked"))),
        f"  for context, a plain loop that also builds a table (rank 0): "
        f"{r.plain_table_nodes / r.plain_table_s / 1e6:.2f} M nodes/s, read_table is "
        f"{(r.plain_table_s / r.plain_table_nodes) / (best_read / r.nodes):.1f} x faster",
        f"peak memory of read_table, largest file ({_mb(largest):.1f} MB, {mem['rows']:,} nodes, fresh process):",
        f"  RSS after imports {_mb(base):.1f} MB; peak {_mb(mem['peak']):.1f} MB; peak - imports "
        f"{_mb(peak_over):.1f} MB; table.nbytes {_mb(mem['table_nbytes']):.1f} MB; "
        f"RSS after read {_mb(mem['after_rss']):.1f} MB",
        f"  the same read, CPU time: user {mem['user_s']:.3f} s + system {mem['sys_s']:.3f} s, "
        f"{mem['page_faults']:,} page faults (a fresh process maps and zeroes every page of its table)",
        f"  (peak = the child's VmHWM; its ru_maxrss reads {_mb(mem['ru_maxrss']):.1f} MB because Linux keeps"
        f" the peak of the forked parent image across exec: parent peak {_mb(mem['parent_peak']):.1f} MB)",
        f"  peak / file size           {mem_ratio:9.2f} x   (target < {MEMORY_RATIO_TARGET:.0f}x)    "
        f"{'PASS' if mem_ok else 'FAIL'}",
        f"correctness                  {'OK' if not r.errors else 'FAILED'}",
        "=" * 78,
    ]
    print("\n".join(lines), flush=True)
    for e in r.errors:
        print(f"CORRECTNESS: {e}", file=sys.stderr)
    return not r.errors


CO_RUNNERS = {"cpu": "while True: pass",
              "memory": "import numpy as np\na = np.ones(1 << 25); b = np.empty_like(a)\nwhile True: np.copyto(b, a)"}


@contextlib.contextmanager
def co_runner(kind: str | None):
    """Another process busy (CO_RUNNERS[kind]) while the block runs; nothing for None."""
    if kind is None:
        yield
        return
    process = subprocess.Popen([sys.executable, "-c", CO_RUNNERS[kind]])
    try:
        yield
    finally:
        process.kill()
        process.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1_000_000, help="nodes in total (default 1,000,000)")
    parser.add_argument("--ranks", type=int, default=8, help="ranks = .et files (default 8)")
    parser.add_argument("--out", help="directory for the .et files (kept); default: a temp dir, removed")
    parser.add_argument("--repeats", type=int, default=REPEATS, help="runs per read measurement (best counts)")
    parser.add_argument("--workload", choices=sorted(WORKLOADS), action="append",
                        help="real: the ResNet PyTorch trace of datasets/ converted, --copies times in one file; "
                        "pytorch: nodes like a converted PyTorch trace (tensor text, ~10 attributes); "
                        "compact: ASTRA-sim-style compute/collective nodes. Repeatable; default: all three")
    parser.add_argument("--copies", type=int, default=REAL_COPIES,
                        help=f"copies of the real trace in the real workload (default {REAL_COPIES} = 573,880 nodes)")
    parser.add_argument("--co-runner", choices=sorted(CO_RUNNERS), help="another process busy meanwhile: "
                        "cpu (a Python spin) or memory (numpy copies of 256 MiB)")
    parser.add_argument("--_measure-memory", dest="measure_memory", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.measure_memory:
        _measure_memory_child(args.measure_memory)
        return 0
    if args.nodes < args.ranks * (FAN_IN_EVERY + 1) or args.ranks < 1:
        parser.error(f"need at least {FAN_IN_EVERY + 1} nodes per rank")
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        out_dir, cleanup = args.out, False
    else:
        out_dir, cleanup = tempfile.mkdtemp(prefix="chakra_bench_"), True
    ok = True
    try:
        for workload in args.workload or ["real", "pytorch", "compact"]:
            size = args.copies if workload == "real" else args.nodes
            with co_runner(args.co_runner):
                results = run(size, args.ranks, out_dir, args.repeats, workload)
            if args.co_runner:
                print(f"(measured beside a {args.co_runner} co-runner)")
            paths = [os.path.join(out_dir, f"bench.{k}.et") for k in range(results.ranks)]
            results.memory["file_bytes"] = os.path.getsize(paths[results.largest_file])
            ok = print_summary(results) and ok
    finally:
        if cleanup:
            shutil.rmtree(out_dir, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
