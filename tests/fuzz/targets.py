"""Fuzz targets: random and mutated real inputs for every reader of untrusted bytes (ETs, PyTorch
and Kineto traces, FlexFlow task graphs, ASTRA-sim text workloads, JAX profiles and HLO text,
configurations), job bundles with odd members, YAML built of aliases, SQL that tries to leave
the warehouse, (issue 47) a day's lock and a damaged history file (night_targets.py), and (issue 41) a drop of hostile file names, untrusted text on the console and the
page, numbers at the edges of the environment, a network and a conversion's options.

Each target must end in success or in the project's own error type (ChakraError), never in
another exception, a crash, unbounded memory or unbounded time. `python tests/fuzz/run.py`
runs them under a memory and CPU-time cap; tests/test_fuzz.py does so with a few hundred
cases in all, `CHAKRA_FUZZ_EXAMPLES=5000 python tests/fuzz/run.py` for a longer hunt.
"""

from __future__ import annotations

import gzip
import json
import os
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import night_targets

from chakra_core.analysis.validate import validate_table
from chakra_core.convert.jax.run import convert_jax_run
from chakra_core.convert.pytorch.job import convert_job
from chakra_core.convert.pytorch.kineto import read_kineto
from chakra_core.convert.pytorch.et import read_host_trace
from chakra_core.convert.sources import SourceOptions, convert_source
from chakra_core.errors import ChakraError
from chakra_core.format.etfile import read_table
from chakra_core.format.job import read_comm_groups
from chakra_core.sim.config import load_network, load_system

DATASETS = Path(__file__).resolve().parents[2] / "datasets"
EXAMPLES = int(os.environ.get("CHAKRA_FUZZ_EXAMPLES", "40"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
                    suppress_health_check=list(HealthCheck))

REAL_ET = [(DATASETS / "astra-sim-microbenchmarks/all_reduce/4npus_1MB/all_reduce.0.et").read_bytes(),
           (DATASETS / "astra-sim-microbenchmarks/reduce_scatter/8npus_1MB/reduce_scatter.3.et").read_bytes()]
REAL_HOST = (DATASETS / "pytorch-et/allgather_2ranks.rank0.et.json").read_bytes()
REAL_KINETO = gzip.decompress((DATASETS / "pytorch-gloo/mlp_ddp-w2/rank0.kineto.json.gz").read_bytes())
REAL_FLEXFLOW = (DATASETS / "other-formats/flexflow/mnist_mlp.4.graph").read_bytes()
REAL_TEXT = [(DATASETS / "other-formats/text" / name).read_bytes()
             for name in ("DLRM_HybridParallel.txt", "MLP_HybridParallel_Data_Model.txt", "microAllReduce.txt")]
JAX_RUN = DATASETS / "jax-cpu/tp_mlp"
REAL_XPLANE = next(JAX_RUN.rglob("*.xplane.pb")).read_bytes()
REAL_TRACE_JSON = gzip.decompress(next(JAX_RUN.rglob("vm.trace.json.gz")).read_bytes())
REAL_HLO = (JAX_RUN / "step.hlo.txt").read_bytes()
REAL_CONFIGS = [(DATASETS / "astra-sim-reference/configs" / name).read_bytes()
                for name in ("Ring_4chunks.json", "Switch_8npus.yml", "Ring_8npus.yml")]


def _mutated(data: bytes, draw) -> bytes:
    """Random edits of real bytes: flips, cuts, insertions, duplicated ranges."""
    data = bytearray(data)
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["flip", "cut", "insert", "repeat", "truncate"]))
        at = draw(st.integers(0, max(0, len(data) - 1)))
        if kind == "flip" and data:
            data[at] ^= draw(st.integers(1, 255))
        elif kind == "cut":
            del data[at:at + draw(st.integers(1, 64))]
        elif kind == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=32))
        elif kind == "repeat":
            data[at:at] = data[at:at + draw(st.integers(1, 256))] * draw(st.integers(1, 50))
        else:
            del data[at:]
    return bytes(data)


@st.composite
def mutated_et(draw) -> bytes:
    data = _mutated(draw(st.sampled_from(REAL_ET)), draw)
    return gzip.compress(data) if draw(st.booleans()) else data


@st.composite
def mutated_json(draw, real: bytes) -> bytes:
    return _mutated(real, draw)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=20)


@st.composite
def odd_config(draw) -> bytes:
    """A real configuration with keys replaced by random JSON values (or removed)."""
    document = json.loads(REAL_CONFIGS[0])
    for key in draw(st.lists(st.sampled_from(sorted(document) + ["extra"]), max_size=4)):
        if draw(st.booleans()):
            document[key] = draw(JSON_VALUES)
        else:
            document.pop(key, None)
    return json.dumps(document).encode()


@st.composite
def odd_host_trace(draw) -> bytes:
    """The real PyTorch ET with fields of a few nodes replaced by random JSON values: valid JSON
    whose meaning is wrong (ids, parents, inputs, attributes, names, types)."""
    document = json.loads(REAL_HOST)
    nodes = document["nodes"]
    for _ in range(draw(st.integers(1, 4))):
        victim = nodes[draw(st.integers(0, len(nodes) - 1))]
        key = draw(st.sampled_from(["id", "ctrl_deps", "inputs", "outputs", "attrs", "name", "op_schema", "rf_id"]))
        victim[key] = draw(JSON_VALUES)
    return json.dumps(document).encode()


def _convert(path: str) -> None:
    with tempfile.TemporaryDirectory() as out:
        convert_job(path, out, "fuzz")


def _convert_source(fmt: str):
    """A FlexFlow graph or text workload converted and written, as `chakra convert --from fmt` does."""
    options = SourceOptions(npus=8, passes=2) if fmt == "text" else SourceOptions()

    def convert(path: str) -> None:
        with tempfile.TemporaryDirectory() as out:
            convert_source(path, out, "fuzz", fmt, options)
    return convert


def _convert_jax(mutated: str):
    """A JAX run converted whose XPlane ("xplane"), trace JSON ("trace", read as there is no
    XPlane) or compiled HLO ("hlo") is the drawn file."""
    def convert(path: str) -> None:
        with tempfile.TemporaryDirectory() as run:
            profile = Path(run, "plugins", "profile", "r")
            profile.mkdir(parents=True)
            data = Path(path).read_bytes()
            if mutated == "trace":
                Path(profile, "vm.trace.json").write_bytes(data)
            else:
                Path(profile, "vm.xplane.pb").write_bytes(data if mutated == "xplane" else REAL_XPLANE)
            Path(run, "step.hlo.txt").write_bytes(data if mutated == "hlo" else REAL_HLO)
            convert_jax_run(run, f"{run}/out", "fuzz")
    return convert


# numbers at the edges of what a profile's times, ids and counts hold
EDGE_NUMBERS = st.sampled_from([0, -1, 1e300, -1e300, 2**63, 2**64, 65535, 10**18, 0.5]) | st.integers(-2**70, 2**70) \
    | st.floats()


@st.composite
def odd_trace_json(draw) -> bytes:
    """The real trace JSON with fields of a few events replaced: times, ids, device ordinals and
    step numbers at the edges, or random JSON values (valid JSON whose meaning is wrong)."""
    document = json.loads(REAL_TRACE_JSON)
    events = document["traceEvents"]
    for _ in range(draw(st.integers(1, 4))):
        victim = events[draw(st.integers(0, len(events) - 1))]
        key = draw(st.sampled_from(["ts", "dur", "pid", "tid", "ph", "name", "device_ordinal", "step_num", "hlo_op",
                                    "run_id"]))
        value = draw(EDGE_NUMBERS | JSON_VALUES)
        if key in ("device_ordinal", "step_num", "hlo_op", "run_id"):
            victim.setdefault("args", {})[key] = str(value) if draw(st.booleans()) else value
        else:
            victim[key] = value
    return json.dumps(document).encode()


# attribute values and shapes of an HLO instruction as a hostile printer could write them
HLO_NUMBERS = st.sampled_from(["0", "1", "2", "4", "-1", "65535", "400000000", "99999999999", "9" * 30]) \
    | st.integers(0, 10**6).map(str)
HLO_GROUPS = st.one_of(
    st.lists(st.lists(HLO_NUMBERS, max_size=5).map(lambda g: "{" + ",".join(g) + "}"), max_size=4)
    .map(lambda gs: "{" + ",".join(gs) + "}"),
    st.tuples(HLO_NUMBERS, HLO_NUMBERS, st.lists(HLO_NUMBERS, min_size=1, max_size=4), st.booleans()).map(
        lambda t: f"[{t[0]},{t[1]}]<=[{','.join(t[2])}]" + (f"T({','.join(map(str, range(len(t[2]))))})" if t[3]
                                                             else "")),
    st.lists(st.tuples(st.sampled_from("abc"), HLO_NUMBERS), min_size=1, max_size=3).flatmap(
        lambda axes: st.lists(st.sampled_from("abcz"), max_size=3).map(
            lambda chosen: "mesh[" + ",".join(f"'{n}'={v}" for n, v in axes) + "] {"
                           + ",".join(f"'{c}'" for c in chosen) + "}")))
HLO_SHAPES = st.lists(st.sampled_from(["f32", "bf16", "pred", "s4", "token", "x9"]).flatmap(
    lambda e: st.lists(HLO_NUMBERS | st.just("<=8"), max_size=3).map(lambda d: f"{e}[{','.join(d)}]")),
    min_size=1, max_size=3).map(lambda arrays: arrays[0] if len(arrays) == 1 else f"({', '.join(arrays)})")
# long runs of what a pattern could backtrack over
HLO_RUNS = st.tuples(st.sampled_from(["->", "/*", "(", "{", "a", "a[", "%x,", "'", "\""]),
                     st.integers(1, 20_000)).map(lambda t: t[0] * t[1])


@st.composite
def odd_hlo(draw) -> bytes:
    """The real HLO with its all-reduce given drawn replica groups, source-target pairs or operand
    shape, or a line of a long run of one piece put before its entry computation or in it."""
    text = REAL_HLO.decode()
    kind = draw(st.sampled_from(["groups", "pairs", "shape", "run"]))
    if kind == "groups":
        text = text.replace("replica_groups=mesh['axis_0'=1,'axis_1'=4] {'axis_1'}",
                            f"replica_groups={draw(HLO_GROUPS)}", 1)
    elif kind == "pairs":
        text = text.replace(" all-reduce(%ynn_fusion.2)", " collective-permute(%ynn_fusion.2)", 1).replace(
            "replica_groups=mesh['axis_0'=1,'axis_1'=4] {'axis_1'}", f"source_target_pairs={draw(HLO_GROUPS)}", 1)
    elif kind == "shape":
        text = text.replace("%ynn_fusion.2 = f32[256,512]{1,0}", f"%ynn_fusion.2 = {draw(HLO_SHAPES)}", 1)
    else:
        line = draw(st.sampled_from(["x ({}", "  %y = ({}) tuple()", "  %y = f32[] add({})",
                                     "  %y = f32[] constant(0) {}"]))
        text = text.replace("\nENTRY", f"\n{line.format(draw(HLO_RUNS))}\nENTRY", 1)
    return text.encode()


def _parse_hlo(path: str) -> None:
    """The HLO parsed, and each collective of its entry described for the run's 4 devices."""
    from chakra_core.convert.jax.collectives import describe
    from chakra_core.convert.jax.hlo import parse_hlo

    module = parse_hlo(path, Path(path).read_text(errors="replace"))
    for instruction in module.entry_computation.instructions:
        describe(module, instruction, 4)


def _attempt(data: bytes, suffix: str, read) -> None:
    """read(path) on the bytes: success or a ChakraError, nothing else."""
    with tempfile.NamedTemporaryFile(suffix=suffix) as f:
        f.write(data)
        f.flush()
        try:
            read(f.name)
        except ChakraError:
            pass


def _read_and_validate(path: str) -> None:
    validate_table(read_table(path))


def _target(name: str, inputs, suffix: str, *readers):
    """A fuzz target: every reader on every drawn input must succeed or raise a ChakraError."""
    @SETTINGS
    @given(inputs)
    def target(data):
        for read in readers:
            _attempt(data, suffix, read)

    target.__name__ = target.__qualname__ = name
    return target


def _bundle(kind: str, members: list[tuple[str, bytes]]) -> bytes:
    """A zip or tar(.gz) holding the members."""
    import io
    import tarfile
    import zipfile

    buffer = io.BytesIO()
    if kind == "zip":
        with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as z:
            for name, data in members:
                z.writestr(name, data)
    else:
        with tarfile.open(fileobj=buffer, mode="w:gz" if kind == "tgz" else "w") as t:
            for name, data in members:
                info = tarfile.TarInfo(name)
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


MEMBER_NAMES = st.sampled_from(["rank0.et.json", "rank1.et.json", "a/rank0.et.json", "rank-1.et.json",
                                "rank1e3.et.json", "rank0.kineto.json", "rank0.timing.json", "../rank2.et.json",
                                "/abs/rank3.et.json", "README", ".archive", "rank0.et.json.gz", "dir/"])


@st.composite
def odd_bundle(draw) -> bytes:
    """A job bundle of odd member names (duplicates, traversal, bad ranks) holding real or
    mutated traces, then itself mutated: every unpacking must end in a result or a ChakraError."""
    members = [(draw(MEMBER_NAMES), draw(st.sampled_from([REAL_HOST, b"{}", b""]) | mutated_json(REAL_HOST)))
               for _ in range(draw(st.integers(1, 4)))]
    data = _bundle(draw(st.sampled_from(["zip", "tar", "tgz"])), members)
    return _mutated(data, draw) if draw(st.booleans()) else data


@st.composite
def yaml_with_aliases(draw) -> bytes:
    """YAML documents built of anchors and aliases (nested, repeated, merged, cyclic)."""
    lines, anchors = [], []
    for i in range(draw(st.integers(1, 8))):
        refs = [f"*{draw(st.sampled_from(anchors))}" for _ in range(draw(st.integers(0, 12)))] if anchors else []
        items = refs + [str(draw(st.integers(-3, 3))) for _ in range(draw(st.integers(0, 3)))]
        if draw(st.booleans()) and i:
            items.append(f"*a{i}")  # an alias to itself: a cycle, or an unknown anchor
        body = f"[{', '.join(items)}]" if draw(st.booleans()) or not anchors else \
            f"{{<<: *{draw(st.sampled_from(anchors))}, k{i}: {draw(st.sampled_from(['.nan', '.inf', '1', 'x']))}}}"
        lines.append(f"a{i}: &a{i} {body}")
        anchors.append(f"a{i}")
    return "\n".join(lines).encode()


@st.composite
def hostile_sql(draw) -> str:
    """Queries that try to leave the warehouse, write, or run more than one statement."""
    pieces = ["SELECT * FROM sim_results", "COPY sim_results TO '{out}/x.csv'", "ATTACH '{out}/y.db'",
              "SELECT * FROM read_csv('/etc/passwd')", "SELECT * FROM read_text('{out}/../secret')",
              "INSTALL httpfs", "LOAD httpfs", "SET enable_external_access = true", "PRAGMA version",
              "CREATE TABLE t AS SELECT 1", "SELECT * FROM glob('/*')", "EXPORT DATABASE '{out}/e'",
              "SELECT 1", "SELECT count(*) FROM rejects", "DESCRIBE sim_results", "CALL pragma_version()"]
    chosen = draw(st.lists(st.sampled_from(pieces), min_size=1, max_size=3))
    return draw(st.sampled_from(["; ", ";\n", " UNION ALL "])).join(chosen)


def _read_document(path: str) -> None:
    from chakra_core.documents import read_document

    read_document(path)


_WAREHOUSE = tempfile.mkdtemp(prefix="chakra-fuzz-wh-")


def _confined_query(sql: str) -> None:
    """The query ends in rows or a ChakraError, and nothing appears outside the warehouse."""
    from chakra_core.warehouse.query import open_warehouse, run_query
    from pipeline.tables import from_rows, write_day

    tables = Path(_WAREHOUSE) / "tables"
    if not tables.exists():
        write_day(_WAREHOUSE, "sim_results", "2026-01-01", from_rows("sim_results", [
            {"job_id": "a", "system": "s", "topology": "Ring", "npus": 2, "traced_npus": 2, "status": "ok",
             "finish_ns": 1}]))
        write_day(_WAREHOUSE, "rejects", "2026-01-01", from_rows("rejects", []))
    with tempfile.TemporaryDirectory() as out:
        con, _, _ = open_warehouse(_WAREHOUSE)
        try:
            run_query(con, sql.format(out=out))
        except ChakraError:
            pass
        assert not os.listdir(out), f"{sql!r} wrote {os.listdir(out)}"


# Names other libraries read as something else: patterns, markup, escapes, reordering, other digits.
HOSTILE_PIECES = ["rank0.et.json", "rank1.et.json.gz", "j.0.et", "rank0.kineto.json", "*", "?", "[", "]", "{a,b}",
                  "[/]", "[red]", "\n", "\r", "\x1b[2J", "\x1b]52;c;eA==\x07", "\u202e", "\u2066", "\u200b",
                  "\u0661", "\uff11", " ", "\t", "..", "%20", "\\", "é", "e\u0301", ".txt", ".gz"]
HOSTILE_TEXT = st.lists(st.sampled_from(HOSTILE_PIECES) | st.text(max_size=4), min_size=1, max_size=5).map("".join)


@st.composite
def hostile_drop(draw) -> dict[str, bytes]:
    """A job folder of hostile file names holding real, empty or odd bytes."""
    names = draw(st.lists(HOSTILE_TEXT.filter(lambda n: "/" not in n and n not in ("", ".", "..")), min_size=1,
                          max_size=4, unique=True))
    return {name: draw(st.sampled_from([b"", b"{}", REAL_ET[0]])) for name in names}


def _process_drop(files: dict[str, bytes]) -> None:
    """The day's listing and the job's processing never raise: every file ends in exactly one of
    the ingest rows and reject rows (a bad name costs its job at most)."""
    import fsspec

    from pipeline.nightly.drop import list_day
    from pipeline.nightly.jobs import process_job

    fs = fsspec.filesystem("memory")
    fs.store.clear()
    for name, data in files.items():
        fs.pipe_file(f"/drops/2026-01-01/job/{name}", data)
    jobs, loose = list_day("memory://drops", "2026-01-01")
    for job in jobs:
        outcome = process_job(job, "2026-01-01", "memory://wh", "fuzz")
        logged = sorted(r["file"] for r in outcome.ingest + outcome.rejects)
        assert logged == sorted(f.name for f in job.files), (logged, [f.name for f in job.files])


def _shown_as_text(value: str) -> None:
    """Printed through the console and put on a page, untrusted text is text: no markup read,
    no escape sequence or bidi control left raw."""
    from chakra_core.terminal import BIDI_CONTROLS, console, printable
    from chakra_core.viz.pages import environment

    out = console()
    with out.capture() as captured:
        out.print(value)
        out.print(value, value)
    shown = captured.get()
    assert "\x1b" not in shown and not BIDI_CONTROLS & set(shown) and not BIDI_CONTROLS & set(environment().from_string("{{ v }}").render(v=value)), shown
    assert all(printable(c) in shown for c in value if not c.isspace()), shown


def _environment_number(value: str) -> None:
    from chakra_core import limits

    os.environ["CHAKRA_DECODE_POOL_BYTES"] = value
    try:
        found = limits.environment_int("CHAKRA_DECODE_POOL_BYTES", 0, 1 << 40)
        assert found is None or 0 <= found <= 1 << 40
    except ChakraError:
        pass
    finally:
        del os.environ["CHAKRA_DECODE_POOL_BYTES"]


NUMBERS = (st.integers() | st.floats() | st.sampled_from([0, -1, 10**400, 1e308, True, "1", None]))


@st.composite
def network_numbers(draw) -> bytes:
    """A 4-NPU ring whose bandwidth and latency are drawn from the edges of the numbers."""
    return (f"topology: [ Ring ]\nnpus_count: [ 4 ]\nbandwidth: [ {draw(NUMBERS)} ]\n"
            f"latency: [ {draw(NUMBERS)} ]\n").encode()


def _simulate_on(path: str) -> None:
    from chakra_core.sim.files import simulate_files

    simulate_files(str(DATASETS / "astra-sim-microbenchmarks/all_reduce/4npus_1MB/all_reduce"), path,
                   str(DATASETS / "astra-sim-reference/configs/Ring_4chunks.json"))


def _source_options(values: tuple) -> None:
    from chakra_core.convert.sources import SourceOptions

    try:
        SourceOptions(*values)
    except ChakraError:
        pass


def _plain_target(name: str, inputs, check):
    @SETTINGS
    @given(inputs)
    def target(value):
        check(value)

    target.__name__ = target.__qualname__ = name
    return target


TARGETS = [
    _target("et_random_bytes", st.binary(max_size=512), ".et", _read_and_validate),
    _target("et_mutated", mutated_et(), ".et", _read_and_validate),
    _target("pytorch_et_mutated", mutated_json(REAL_HOST), ".et.json", read_host_trace),
    _target("pytorch_et_meaning", odd_host_trace(), ".et.json", _convert),
    _target("kineto_mutated", mutated_json(REAL_KINETO), ".json", read_kineto),
    _target("flexflow_mutated", mutated_json(REAL_FLEXFLOW), ".graph", _convert_source("flexflow")),
    _target("text_mutated", st.sampled_from(REAL_TEXT).flatmap(mutated_json), ".txt", _convert_source("text")),
    _target("jax_xplane_mutated", mutated_json(REAL_XPLANE), ".pb", _convert_jax("xplane")),
    _target("jax_hlo_mutated", mutated_json(REAL_HLO), ".txt", _convert_jax("hlo")),
    _target("jax_trace_json_mutated", mutated_json(REAL_TRACE_JSON), ".json", _convert_jax("trace")),
    _target("jax_trace_json_meaning", odd_trace_json(), ".json", _convert_jax("trace")),
    _target("jax_hlo_hostile", odd_hlo(), ".txt", _parse_hlo, _convert_jax("hlo")),
    _target("configs_mutated", st.sampled_from(REAL_CONFIGS).flatmap(mutated_json) | odd_config(), ".json",
            load_system, load_network, read_comm_groups),
    _target("bundles_odd", odd_bundle(), ".zip", _convert),
    _target("yaml_aliases", yaml_with_aliases(), ".yml", _read_document, load_network, read_comm_groups),
    _plain_target("sql_confined", hostile_sql(), _confined_query),
    _plain_target("drop_hostile_names", hostile_drop(), _process_drop),
    _plain_target("text_untrusted", HOSTILE_TEXT, _shown_as_text),
    _plain_target("env_numbers", HOSTILE_TEXT | st.integers().map(str) | st.floats().map(str), _environment_number),
    _target("network_numbers", network_numbers(), ".yml", load_network, _simulate_on),
    _plain_target("source_options", st.tuples(NUMBERS, NUMBERS, NUMBERS, NUMBERS), _source_options),
    _plain_target("history_damaged", night_targets.odd_history_file(mutated_json),
                  night_targets.compared_against_damaged_history),
    _plain_target("day_lock_odd", night_targets.odd_lock(), night_targets.lock_taken_or_refused),
]
