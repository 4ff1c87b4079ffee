"""The digests' own walk over a trace's array (digest_elements, jsonscan.h's walk_elements) finds
the elements jsonscan.scan_array finds, and reading with it gives what scanning then digesting gave."""

from __future__ import annotations

import gzip
import json

import pytest
from datapaths import GPU_H200, PYTORCH_ET

from chakra_core import limits
from chakra_core._native import _jsonscan, _kinetodigest, _ptdigest
from chakra_core.convert.common import jsonstream
from chakra_core.convert.pytorch import et as et_module
from chakra_core.convert.pytorch import kineto as kineto_module
from chakra_core.convert.pytorch.et import read_host_trace
from chakra_core.convert.pytorch.kineto import read_kineto

DEPTH = limits.value("json_depth") - 2


def _nodes_and_events():
    nodes = [{"id": k, "name": f"aten::op{k}", "ctrl_deps": k - 1, "attrs": [{"name": "rf_id", "type": "uint64",
             "value": k}], "inputs": {"values": [[k, k, 0, 4, 4, "cuda:0"]], "shapes": [[4]], "types": ["Tensor"]},
             "outputs": {"values": [], "shapes": [], "types": []}} for k in range(1, 6)]
    events = [{"ph": "X", "cat": "cpu_op", "name": f"e{k}", "pid": 1, "tid": 1, "ts": k, "dur": 1,
               "args": {"External id": k}} for k in range(5)]
    return nodes, events


@pytest.mark.parametrize("kind", ["nodes", "events"])
def test_the_walk_stops_where_scan_array_does_at_every_buffer_end(kind):
    nodes, events = _nodes_and_events()
    items = nodes if kind == "nodes" else events
    data = b"[" + b" ,\n ".join(json.dumps(x).encode() for x in items) + b" ]"
    for end in range(1, len(data) + 1):
        scanned = _jsonscan.scan_array(data, 1, 3, DEPTH, end)
        if kind == "nodes":
            walked = _ptdigest.digest_elements(data, 1, end, False, 3, DEPTH)
            assert len(walked[4]["names"]) == walked[0]
        else:
            walked = _kinetodigest.digest_elements(data, 1, end, {}, 3, DEPTH)
            assert len(walked[4]["cpu"]) == walked[0]
        assert walked[:4] == scanned, end


def test_the_walk_leaves_what_it_cannot_digest_to_the_scanner():
    nodes, _ = _nodes_and_events()
    deep = dict(nodes[1], extra=[[[[[[1]]]]]])
    data = b"[" + b",".join(json.dumps(x).encode() for x in (nodes[0], deep, nodes[2])) + b"]"
    assert _ptdigest.digest_elements(data, 1, len(data), False, 10, 5)[0] == 1  # the second opens 7 levels
    assert _ptdigest.digest_elements(data, 1, len(data), False, 10, 7)[0] == 3
    with pytest.raises(_jsonscan.TooDeep):
        _jsonscan.scan_array(data, 1, 10, 5)
    bad = dict(nodes[1], id=-4)  # wrong in content: digest words it
    data = b"[" + b",".join(json.dumps(x).encode() for x in (nodes[0], bad)) + b"]"
    assert _ptdigest.digest_elements(data, 1, len(data), False, 10, DEPTH)[0] == 1


def _unwalked(monkeypatch):
    monkeypatch.setattr(et_module._HostReader, "walk", lambda *args: None)
    monkeypatch.setattr(kineto_module._EventReader, "walk", lambda *args: None)


@pytest.mark.parametrize("name", ["gpt", "mlp_gloo2"])
def test_reading_walked_or_scanned_gives_the_same_trace_with_small_reads(monkeypatch, name):
    monkeypatch.setattr(jsonstream, "READ_CHUNK", 5000)  # many elements cut by a buffer end
    folder = GPU_H200 / name
    results = []
    for walked in (True, False):
        if not walked:
            _unwalked(monkeypatch)
        host = read_host_trace(str(folder / "rank0.et.json.gz"))
        kineto = read_kineto(str(folder / "rank0.kineto.json.gz"))
        results.append((list(host.ids), list(host.parents), host.names, {k: list(v) for k, v in host.attr_columns.items()},
                        list(host.reads), list(host.read_ends), list(host.writes), list(host.num_ops),
                        [c.to_pylist() for c in host.io_chunks], sorted(host.whole),
                        [(e.name, e.tid, e.ts, e.dur, e.external_id, e.rf_id) for e in kineto.cpu],
                        [(e.correlation, e.ts) for e in kineto.runtime], [(e.name, e.stream) for e in kineto.device]))
    assert results[0] == results[1]


@pytest.mark.parametrize("damage", [
    (b'"name": "aten::', b'"name": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["aten::'),
    (b'"ctrl_deps": ', b'"ctrl_deps": "x", "c": '),
    (b'"id": ', b'"id": -'),
    (b'"attrs": ', b'"attrs": 3, "a": '),
])
def test_errors_are_worded_the_same_walked_or_scanned(tmp_path, monkeypatch, damage):
    text = gzip.decompress((PYTORCH_ET / "resnet_ddp.rank0.et.json.gz").read_bytes())
    at = text.index(damage[0], len(text) // 2)
    path = tmp_path / "t.et.json"
    path.write_bytes(text[:at] + damage[1] + text[at + len(damage[0]):])
    errors = []
    for walked in (True, False):
        if not walked:
            _unwalked(monkeypatch)
        with pytest.raises((jsonstream.TraceJSONError, limits.LimitExceeded)) as exc:
            read_host_trace(str(path))
        errors.append(str(exc.value))
    assert errors[0] == errors[1]


def test_an_events_args_count_as_a_level_of_nesting():
    _, events = _nodes_and_events()
    data = b"[" + json.dumps(events[0]).encode() + b"]"  # args: {"External id": 0}, the second level
    with pytest.raises(_jsonscan.TooDeep):
        _jsonscan.scan_array(data, 1, 10, 1)
    assert _kinetodigest.digest_elements(data, 1, len(data), {}, 10, 1)[0] == 0
    walked = _kinetodigest.digest_elements(data, 1, len(data), {}, 10, 2)
    assert walked[0] == 1 and walked[4]["cpu"][0].external_id == 0
