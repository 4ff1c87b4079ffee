"""The C node digest (chakra_core/_native/ptdigest.c) against a plain Python reading of the same nodes."""

from __future__ import annotations

import gzip
import json

import numpy as np
import orjson
import pytest

from datapaths import PYTORCH_ET

from chakra_core._native import _jsonscan, _ptdigest
from chakra_core.convert.pytorch.et import ID_ATTRS, WholeNodes, normalize_node, read_host_trace, tensors_in

DATA = PYTORCH_ET


def _load(name: str) -> dict:
    path = DATA / name
    with (gzip.open(path, "rb") if name.endswith(".gz") else open(path, "rb")) as f:
        return json.load(f)


def _reference(nodes: list, layout: str) -> dict:
    """What the digest must return, computed the slow way."""
    out = {k: [] for k in ("ids", "parents", "names", "reads", "writes", "tensor_bytes", *ID_ATTRS)}
    for raw in nodes:
        node = normalize_node(raw, layout)
        out["ids"].append(node["id"])
        parent = node["ctrl_deps"]
        out["parents"].append(parent if type(parent) is int else -1)
        out["names"].append(node["name"])
        for key in ID_ATTRS:
            value = node["attrs"].get(key)
            out[key].append(value if type(value) is int else 0)
        ins = tensors_in(node["inputs"].get("values") or [], [])
        outs = tensors_in(node["outputs"].get("values") or [], [])
        key = lambda t: t[1] if t[1] else -1 - t[0]  # noqa: E731
        out["reads"].append([key(t) for t in ins])
        out["writes"].append([key(t) for t in outs] + ([key(t) for t in ins] if node["name"].startswith("c10d::") else []))
        out["tensor_bytes"].append(sum(t[3] * t[4] for t in ins + outs))
    return out


def _digest(nodes: list, layout: str) -> dict:
    data = json.dumps(nodes, indent=1).encode()  # whitespace everywhere, as pretty-printed traces have
    d = _ptdigest.digest(data, 0, len(data), layout == "flat")
    ints = lambda key: np.frombuffer(d[key], np.int64).tolist()  # noqa: E731

    def csr(values, ends):
        v, e = ints(values), ints(ends)
        return [v[a:b] for a, b in zip([0] + e[:-1], e)]

    got = {k: ints(k) for k in ("ids", "parents", "tensor_bytes", *ID_ATTRS)}
    got["names"] = d["names"]
    got["reads"], got["writes"] = csr("reads", "read_ends"), csr("writes", "write_ends")
    offsets, text = d["io"][0]
    at = np.frombuffer(offsets, np.int32)
    got["input_values"] = [orjson.loads(text[at[k]:at[k + 1]]) if at[k + 1] > at[k] else None for k in range(len(at) - 1)]
    return got


@pytest.mark.parametrize("name,layout", [("resnet_ddp.rank0.et.json.gz", "attrs"),
                                         ("allgather_2ranks.rank0.et.json", "attrs"),
                                         ("linear.et.json.gz", "flat")])
def test_digest_matches_a_python_reading(name, layout):
    nodes = _load(name)["nodes"]
    got, want = _digest(nodes, layout), _reference(nodes, layout)
    for key, values in want.items():
        assert got[key] == values, key
    values_of = (lambda n: n["inputs"]["values"]) if layout == "attrs" else (lambda n: n["inputs"])
    assert got["input_values"] == [values_of(n) for n in nodes]


def test_digest_decodes_escapes_and_skips_odd_values():
    nodes = [
        {"id": 5, "name": 'a "quoted" \\ name \u00e9 \U0001f600', "ctrl_deps": None,
         "inputs": {"values": [1.5, -2, [[1, 2, 0, 3, 4, "cpu"]], {"k": [1, 2, 3, 4, 5, "x"]}, "s"],
                    "shapes": [], "types": []},
         "outputs": {"values": [[9, 0, 0, 2, 8, "cuda:0"]], "shapes": [[2]], "types": ["Tensor(long)"]},
         "attrs": [{"name": "rf_id", "type": "uint64", "value": 7}, {"name": "op_schema", "type": "string",
                                                                     "value": "x(Tensor a) -> \"b\""}]},
    ]
    data = json.dumps(nodes).encode()
    d = _ptdigest.digest(data, 0, len(data), False)
    assert d["names"] == [nodes[0]["name"]] and d["op_schemas"] == ['x(Tensor a) -> "b"']
    assert np.frombuffer(d["parents"], np.int64).tolist() == [-1]
    assert np.frombuffer(d["rf_id"], np.int64).tolist() == [7]
    # the tensor inside a list counts; the 6-element list inside an object is not a tensor value
    assert np.frombuffer(d["reads"], np.int64).tolist() == [2]
    assert np.frombuffer(d["writes"], np.int64).tolist() == [-10]  # storage 0: keyed by tensor id
    assert np.frombuffer(d["tensor_bytes"], np.int64).tolist() == [3 * 4 + 2 * 8]


@pytest.mark.parametrize("text,message", [(b'[{"name": "x"}]', "no integer id"),
                                          (b'[{"id": 1, "name": "x"', "not a well-formed"),
                                          (b'[{"id": 1, "name": "x"} {"id": 2}]', "expected ','")])
def test_digest_reports_the_node_and_byte(text, message):
    with pytest.raises(ValueError, match=f"node 0 at byte .*{message}"):
        _ptdigest.digest(text, 0, len(text), False)


@pytest.mark.parametrize("at", range(0, 40, 3))
def test_strings_with_an_escape_before_or_after_the_short_string_scan(at):
    # strings are scanned byte by byte for 16 bytes, then by memchr: a quote or backslash on
    # either side of that boundary must be found the same
    name = "n" * at + '"q\\' + "m" * (40 - at)
    data = json.dumps([{"id": 1, "name": name, "attrs": [{"name": "op_schema", "value": name[:at] + "\\"}]}]).encode()
    d = _ptdigest.digest(data, 0, len(data), False)
    assert d["names"] == [name] and d["op_schemas"] == [name[:at] + "\\"]
    assert _jsonscan.value_end(data, 0, 8) == len(data)


def test_the_nodes_kept_whole_read_back_as_parsed():
    """Kept as compact JSON (et.WholeNodes), each communication node reads back as its parsed,
    normalized self, and the metadata node too."""
    host = read_host_trace(str(DATA / "allgather_2ranks.rank0.et.json"))
    parsed = [normalize_node(n, host.layout) for n in _load("allgather_2ranks.rank0.et.json")["nodes"]]
    assert len(host.whole) > 10 and all(host.whole[i] == parsed[i] for i in host.whole)
    assert {host.names[i] for i in host.whole} >= {"c10d::allgather_", "## process_group:init ##"}


def test_a_node_kept_whole_is_kept_as_given_where_orjson_cannot_write_it():
    whole = WholeNodes()
    whole[3] = orjson.dumps({"id": 4, "inputs": {"values": [1.5, "a"]}})
    whole[7] = {"id": 8, "inputs": {"values": [float("nan")]}}  # NaN: only the json module reads it
    assert sorted(whole) == [3, 7] and len(whole) == 2 and whole.get(5) is None
    assert whole[3] == {"id": 4, "inputs": {"values": [1.5, "a"]}} and whole[7] is whole[7]
