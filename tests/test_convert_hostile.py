"""Hostile PyTorch ET and Kineto input to `chakra convert` / `chakra link` (issue 15).

Every case is refused with ONE line on stderr naming the file and where (byte offset,
element, node id or event), exit status 2, no traceback, in bounded time: nesting beyond the
json_depth limit, event times that are not times, negative node ids, parents and attrs of the
wrong kind, communication sizes that are not byte counts, a Kineto trace of another rank.
A node that names itself as its parent is a cycle of one: cut and reported, as cycles are.
"""

from __future__ import annotations

import copy
import gzip
import json
import shutil
import time
from pathlib import Path

import pytest

from datapaths import PYTORCH_ET

from chakra_core._native import _jsonscan
from chakra_core.cli import main

ALLGATHER = PYTORCH_ET / "allgather_2ranks.rank0.et.json"  # attrs layout, 263 nodes, 10 c10d::allgather_
LINEAR, LINEAR_KINETO = PYTORCH_ET / "linear.et.json.gz", PYTORCH_ET / "linear.kineto.json.gz"  # flat layout
HOLE = "__HOLE__"  # a placeholder string, replaced by raw JSON text (NaN, deep nesting)


@pytest.fixture(autouse=True)
def _no_debug(monkeypatch):
    monkeypatch.delenv("CHAKRA_DEBUG", raising=False)
    monkeypatch.delenv("CHAKRA_MAX_JSON_DEPTH", raising=False)


def _allgather() -> dict:
    return json.loads(ALLGATHER.read_text())


def _load_gz(path) -> dict:
    return json.loads(gzip.decompress(path.read_bytes()))


def _write(path, document: dict, hole: str = "") -> str:
    path.write_text(json.dumps(document).replace(json.dumps(HOLE), hole))
    return str(path)


def _node(trace: dict, name: str) -> dict:
    return next(n for n in trace["nodes"] if n["name"] == name)


def _refused(capsys, argv: list[str], *words: str) -> str:
    """Run the CLI; it must exit 2 with one line containing every word."""
    code = main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert "\n" not in err and "Traceback" not in err, err
    for word in words:
        assert word in err, (word, err)
    return err


def _accepted(capsys, argv: list[str]) -> None:
    assert main(argv) == 0
    capsys.readouterr()  # the notes of a conversion that went through


def _deep(levels: int, kind: str = "list") -> str:
    return "[" * levels + "]" * levels if kind == "list" else '{"a": ' * levels + "1" + "}" * levels


# ---------------------------------------------------------------- 1. nesting depth
def _set_deep_inputs(node: dict) -> None:
    node["inputs"]["values"] = HOLE


def _set_deep_attr(node: dict) -> None:
    node["attrs"].append({"name": "extra", "type": "string", "value": HOLE})


def _comm_index(trace: dict) -> int:
    return trace["nodes"].index(_node(trace, "c10d::allgather_"))


@pytest.mark.parametrize("pick,edit,kind", [
    (lambda trace: 5, _set_deep_inputs, "list"),
    (lambda trace: 5, _set_deep_attr, "object"),
    (lambda trace: 0, _set_deep_inputs, "list"),
    (_comm_index, _set_deep_inputs, "list"),
], ids=["operator inputs", "operator attrs", "first node (parsed for its layout)",
        "communication node (parsed whole)"])
def test_deep_nesting_in_a_node_is_refused_quickly(tmp_path, capsys, pick, edit, kind):
    trace = _allgather()
    index = pick(trace)
    edit(trace["nodes"][index])
    src = _write(tmp_path / "deep.et.json", trace, _deep(100_000, kind))
    started = time.perf_counter()
    err = _refused(capsys, ["convert", src, "-o", str(tmp_path / "out")],
                   src, f"element {index}:", "nested too deeply", "CHAKRA_MAX_JSON_DEPTH")
    assert time.perf_counter() - started < 5
    offset = int(err.split(": byte ")[1].split(":")[0])
    assert Path(src).read_bytes()[offset] in b"[{"  # the bracket that goes too deep


def test_deep_top_level_member_is_refused(tmp_path, capsys):
    trace = _allgather()
    trace["extra"] = HOLE
    src = _write(tmp_path / "deep.et.json", trace, _deep(100_000))
    _refused(capsys, ["convert", src, "-o", str(tmp_path / "out")], src, "byte", "nested too deeply")


def test_depth_limit_is_exact_and_set_by_the_environment(tmp_path, capsys, monkeypatch):
    """Depth counts every array/object from the document's own object: a node's inputs.values
    list is level 5, so 7 more levels inside it reach 12."""
    monkeypatch.setenv("CHAKRA_MAX_JSON_DEPTH", "12")
    for extra, allowed in ((7, True), (8, False)):
        trace = _allgather()
        trace["nodes"][5]["inputs"]["values"] = HOLE
        src = _write(tmp_path / f"depth{extra}.et.json", trace, _deep(extra + 1))
        if allowed:
            _accepted(capsys, ["convert", src, "-o", str(tmp_path / "out")])
        else:
            _refused(capsys, ["convert", src, "-o", str(tmp_path / "out")], src, "element 5:", "nested too deeply")


def test_raised_depth_limit_parses_what_the_parsers_can_and_refuses_the_rest_cleanly(tmp_path, capsys,
                                                                                        monkeypatch):
    monkeypatch.setenv("CHAKRA_MAX_JSON_DEPTH", "5000")
    trace = _allgather()
    _node(trace, "c10d::allgather_")["inputs"]["values"] = [HOLE]  # parsed whole, walked for tensors
    src = _write(tmp_path / "deep1000.et.json", trace, _deep(1000))
    _accepted(capsys, ["convert", src, "-o", str(tmp_path / "out")])  # no RecursionError
    trace = _allgather()
    trace["nodes"][0]["inputs"]["values"] = HOLE  # deeper than orjson (1024) and Python's recursion limit
    src = _write(tmp_path / "deep3000.et.json", trace, _deep(3000))
    _refused(capsys, ["convert", src, "-o", str(tmp_path / "out")], src, "element 0:", "nested too deeply")


def test_deep_json_inside_the_process_group_string_is_reported_not_parsed(tmp_path, capsys):
    """The init node's groups are a JSON string inside the trace: the scanner cannot see its
    depth, so its parser must stop on its own; as for any unreadable group list, it is a note."""
    trace = _allgather()
    _node(trace, "## process_group:init ##")["inputs"]["values"][0] = _deep(100_000)
    src = _write(tmp_path / "deep_pg.et.json", trace)
    assert main(["convert", src, "-o", str(tmp_path / "out")]) == 0
    assert "## process_group:init ## input is not JSON" in capsys.readouterr().err


def test_deep_kineto_event_is_refused(tmp_path, capsys):
    kineto = _load_gz(LINEAR_KINETO)
    kineto["traceEvents"][3]["args"] = {"x": HOLE}
    src = _write(tmp_path / "deep.kineto.json", kineto, _deep(100_000, "object"))
    _refused(capsys, ["link", str(LINEAR), src, "-o", str(tmp_path / "out.et")],
             src, "element 3:", "nested too deeply")


def test_deep_multi_rank_json_is_refused(tmp_path, capsys):
    src = tmp_path / "job.json"
    src.write_text('{"0": ' + _deep(100_000) + "}")
    _refused(capsys, ["split", str(src), "-o", str(tmp_path / "out")], str(src), "byte", "nested too deeply")


def test_scanner_reports_the_bracket_and_the_element():
    data = b"[1, [[2]], [[[3]]], 4]"
    with pytest.raises(_jsonscan.TooDeep) as info:
        _jsonscan.scan_array(data, 1, 10, 2)
    assert info.value.args[1:] == (data.index(b"[[[") + 2, 2)  # the third '[' of element 2
    assert _jsonscan.scan_array(data, 1, 10, 3)[0] == 4
    with pytest.raises(_jsonscan.TooDeep):
        _jsonscan.value_end(data, 0, 3)
    assert _jsonscan.value_end(data, 0, 4) == len(data)


# ---------------------------------------------------------------- 2. Kineto events
TIMES = "ts and dur must be microseconds from 0 to 2**62"
KINDS = "name must be a string, tid an integer or a string, args an object"


@pytest.mark.parametrize("category,field,value,message", [
    ("kernel", "ts", "1e300", TIMES), ("kernel", "dur", "NaN", TIMES), ("cpu_op", "dur", "-5", TIMES),
    ("cpu_op", "ts", "Infinity", TIMES), ("kernel", "ts", '"soon"', TIMES),
    ("cpu_op", "args", "[1]", KINDS), ("cpu_op", "tid", "[1]", KINDS),
])
def test_kineto_event_that_is_not_an_event_is_refused(tmp_path, capsys, category, field, value, message):
    """Refused, not skipped: a corrupt event means a corrupt file, and skipping it would quietly
    drop the durations of what it launched."""
    kineto = _load_gz(LINEAR_KINETO)
    events = kineto["traceEvents"]
    index = next(k for k, e in enumerate(events) if e.get("ph") == "X" and e.get("cat") == category)
    events[index][field] = HOLE
    src = _write(tmp_path / "bad.kineto.json", kineto, value)
    _refused(capsys, ["link", str(LINEAR), src, "-o", str(tmp_path / "out.et")],
             src, f"element {index}:", repr(events[index]["name"]), message)


def test_kineto_event_name_that_is_not_a_string_is_refused(tmp_path, capsys):
    kineto = _load_gz(LINEAR_KINETO)
    index = next(k for k, e in enumerate(kineto["traceEvents"]) if e.get("cat") == "cpu_op")
    kineto["traceEvents"][index]["name"] = 7
    src = _write(tmp_path / "bad.kineto.json", kineto)
    _refused(capsys, ["link", str(LINEAR), src, "-o", str(tmp_path / "out.et")], src, f"element {index}:", KINDS)


# ---------------------------------------------------------------- 3, 4. node ids, parents, attrs
@pytest.mark.parametrize("key,value,message", [
    ("id", "-7", "node id -7: element 5: a node id must not be negative"),
    ("ctrl_deps", "NaN", "ctrl_deps is not an integer node id"),
    ("ctrl_deps", "2.5", "ctrl_deps is not an integer node id"),
    ("ctrl_deps", '"2"', "ctrl_deps is not an integer node id"),
    ("attrs", '"rf_id=3"', "attrs is not a list"),
    ("attrs", '[{"value": 3}]', "an attrs entry has no name"),
    ("inputs", "[1, 2]", "inputs is not an object"),
    ("inputs", '{"values": 5}', "inputs.values is not a list"),
    ("outputs", '{"types": "Tensor"}', "outputs.types is not a list"),
])
def test_wrong_node_content_names_the_file_and_node(tmp_path, capsys, key, value, message):
    trace = _allgather()
    node = trace["nodes"][5]
    node[key] = HOLE
    src = _write(tmp_path / "bad.et.json", trace, value)
    _refused(capsys, ["convert", src, "-o", str(tmp_path / "out")], src, "byte", "element 5:", message,
             f"node id {-7 if key == 'id' else node['id']}")


def test_flat_layout_nan_parent_names_the_file_and_node(tmp_path, capsys):
    trace = _load_gz(LINEAR)
    node = trace["nodes"][7]
    node["parent"] = HOLE
    src = _write(tmp_path / "bad.et.json", trace, "NaN")
    _refused(capsys, ["convert", src, "-o", str(tmp_path / "out")], src, f"node id {node['id']}",
             "parent is not an integer node id")


def test_null_parent_means_none(tmp_path):
    trace = _allgather()
    trace["nodes"][5]["ctrl_deps"] = None
    src = _write(tmp_path / "null.et.json", trace)
    assert main(["convert", src, "-o", str(tmp_path / "out")]) == 0


def test_a_node_that_is_its_own_parent_is_cut_and_reported(tmp_path):
    out = tmp_path / "out"
    assert main(["convert", str(ALLGATHER), "-o", str(out), "--json"]) == 0
    report = json.loads((out / "trace.report.json").read_text())["ranks_report"][0]
    assert "parent cycle cut" not in report["counts"]  # the process root names itself: that is normal
    trace = _allgather()
    node = trace["nodes"][5]
    node["ctrl_deps"] = node["id"]
    src = _write(tmp_path / "self.et.json", trace)
    assert main(["convert", src, "-o", str(out), "--json"]) == 0
    report = json.loads((out / "trace.report.json").read_text())["ranks_report"][0]
    assert report["counts"]["parent cycle cut"] == 1
    assert any(f"node(s) {node['id']}" in note and "themselves" in note
               for note in report["notes"]), report["notes"]


# ---------------------------------------------------------------- 5. Kineto of another rank
def _kineto_of_rank(path, rank: int) -> str:
    kineto = _load_gz(LINEAR_KINETO)
    kineto["distributedInfo"] = {"rank": rank, "world_size": 2}
    return _write(path, kineto)


def test_link_refuses_a_kineto_trace_of_another_rank(tmp_path, capsys):
    kineto = _kineto_of_rank(tmp_path / "k.json", 0)
    _refused(capsys, ["link", str(LINEAR), kineto, "-o", str(tmp_path / "out.et"), "--rank", "1"],
             kineto, str(LINEAR), "rank 0", "rank 1")
    assert main(["link", str(LINEAR), kineto, "-o", str(tmp_path / "out.et"), "--rank", "0"]) == 0
    assert main(["link", str(LINEAR), kineto, "-o", str(tmp_path / "out.et")]) == 0  # the ET names no rank


def test_convert_refuses_a_folder_whose_kineto_trace_is_another_rank(tmp_path, capsys):
    folder = tmp_path / "job"
    folder.mkdir()
    shutil.copy(LINEAR, folder / "rank1.et.json.gz")
    kineto = _kineto_of_rank(folder / "rank1.kineto.json", 0)
    _refused(capsys, ["convert", str(folder), "-o", str(tmp_path / "out")],
             kineto, str(folder / "rank1.et.json.gz"), "rank 0", "rank 1")


# ---------------------------------------------------------------- 6. communication sizes
@pytest.mark.parametrize("slot,value", [(3, "-100"), (3, "NaN"), (4, "-4"), (3, "1e400"), (3, '"8"')])
def test_communication_size_that_is_not_a_byte_count_is_refused(tmp_path, capsys, slot, value):
    trace = _allgather()
    node = _node(trace, "c10d::allgather_")
    tensor = copy.deepcopy(node["inputs"]["values"][1][0])  # [id, storage, offset, numel, itemsize, device]
    tensor[slot] = HOLE
    node["inputs"]["values"][1][0] = tensor
    src = _write(tmp_path / "bad.et.json", trace, value)
    _refused(capsys, ["convert", src, "-o", str(tmp_path / "out")], src, f"node id {node['id']}",
             "c10d::allgather_", "communication size", "is not a byte count")


# ---------------------------------------------------------------- node count limit
def test_more_nodes_than_the_limit_are_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("CHAKRA_MAX_NODES", "100")
    _refused(capsys, ["convert", str(ALLGATHER), "-o", str(tmp_path / "out")], str(ALLGATHER),
             "more than 100 elements in 'nodes'", "CHAKRA_MAX_NODES")


def test_colliding_correlation_ids_are_reported_as_such(tmp_path, capsys):
    """Every launch given one correlation id: no kernel can be told apart, so none is attached,
    and the report says the ids collide rather than that the kernels ran outside the steps."""
    kineto = json.loads(gzip.decompress(LINEAR_KINETO.read_bytes()))
    for event in kineto["traceEvents"]:
        if isinstance(event.get("args"), dict) and "correlation" in event["args"]:
            event["args"]["correlation"] = 7
    path = tmp_path / "collide.kineto.json"
    path.write_text(json.dumps(kineto))
    assert main(["link", str(LINEAR), str(path), "-o", str(tmp_path / "x.et")]) == 0
    out = capsys.readouterr().out
    assert "have a correlation id that more than one launch of the Kineto trace uses" in out
    assert "attached 0 of" in out and "outside the host trace's steps" not in out
