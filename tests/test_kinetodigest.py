"""The C Kineto event digest (chakra_core/_native/kinetodigest.c) against reading every event
as parsed JSON (kineto._EventReader.add_event, what the digest leaves odd events and invalid
batches to): the same events, fields and errors, on the shipped traces and on hostile ones."""

from __future__ import annotations

import gzip
import json
import math
import random

import orjson
import pytest

from datapaths import DATASETS
from kineto_parsed import NoKinetoDigest

from chakra_core._native import _kinetodigest
from chakra_core.errors import ChakraFormatError
from chakra_core.convert.kineto.host import keep_args
from chakra_core.convert.pytorch import kineto as kineto_module
from chakra_core.convert.pytorch.kineto import read_kineto

SHIPPED = sorted(DATASETS.glob("*/*/rank*.kineto.json.gz")) + sorted(DATASETS.glob("pytorch-et/*.kineto.json.gz"))


def _snapshot(trace) -> dict:
    def rows(events, fields):
        return [tuple(getattr(e, f) for f in fields) for e in events]

    return {"cpu": rows(trace.cpu, ("name", "tid", "ts", "dur", "external_id", "rf_id", "exclusive", "idle_before",
                                    "args")),
            "device": rows(trace.device, ("name", "category", "ts", "dur", "stream", "external_id", "correlation")),
            "runtime": rows(trace.runtime, ("tid", "ts", "correlation", "external_id", "name", "dur")),
            "flags": (trace.has_rf_ids, trace.has_profiler_steps), "fields": trace.fields}


def _both(path, monkeypatch, keep=None):
    """(digested, reference) snapshots of one file, or the two errors' messages."""
    results = []
    for module in (_kinetodigest, NoKinetoDigest):
        monkeypatch.setattr(kineto_module, "_kinetodigest", module)
        try:
            results.append(_snapshot(read_kineto(str(path), keep_args=keep)))
        except ChakraFormatError as exc:  # malformed JSON, or an event refused (an element not an object)
            results.append(f"error: {exc}")
    return results


def test_the_shipped_kineto_traces_read_the_same_digested(monkeypatch):
    assert len(SHIPPED) >= 10
    for path in SHIPPED:
        digested, reference = _both(path, monkeypatch, keep_args)
        assert digested == reference, path


def _event(**changes) -> dict:
    event = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 7, "ts": 100.5, "dur": 20.25,
             "args": {"External id": 3, "Record function id": 4}}
    event.update(changes)
    return {k: v for k, v in event.items() if v is not DROP}


DROP = object()
KERNEL = dict(cat="kernel", name="k", args={"stream": 7, "correlation": 9, "External id": 3})
LAUNCH = dict(cat="cuda_runtime", name="cudaLaunchKernel", args={"correlation": 9, "External id": 3})
# (what, event or raw JSON text of one event): each read exactly as parsing it reads it
CASES = [
    ("plain", _event()),
    ("no args", _event(args=DROP)),
    ("args null", _event(args=None)),
    ("args empty list", _event(args=[])),
    ("args a string", _event(args="x")),
    ("no name", _event(name=DROP)),
    ("name null", _event(name=None)),
    ("name with escapes", '{"ph": "X", "cat": "cpu_op", "name": "a\\"b\\u00e9", "tid": 1, "ts": 1, "dur": 1}'),
    ("non-ASCII name", _event(name="opération ∑")),
    ("ph escaped", '{"ph": "\\u0058", "cat": "cpu_op", "name": "a", "tid": 1, "ts": 1, "dur": 1}'),
    ("key escaped", '{"ph": "X", "c\\u0061t": "cpu_op", "name": "a", "tid": 1, "ts": 1, "dur": 1}'),
    ("args key escaped", '{"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1, "args": {"Record function id": 5,'
                         ' "Record function i\\u0064": 6}}'),
    ("duplicate members", '{"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1, "ts": 2, "args": {"External id": 1},'
                          ' "args": {"External id": 2}}'),
    ("ph not X", _event(ph="i")),
    ("ph a number", _event(ph=3)),
    ("other category", _event(cat="python_function")),
    ("category a list", _event(cat=["cpu_op"])),
    ("tid a string", _event(tid="PyTorch Profiler")),
    ("tid a float", _event(tid=7.0)),
    ("tid null", _event(tid=None)),
    ("tid beyond int64", '{"ph": "X", "cat": "cpu_op", "name": "a", "tid": 18446744073709551615, "ts": 1}'),
    ("ts an integer", _event(ts=4912994631706)),
    ("ts a big integer", '{"ph": "X", "cat": "cpu_op", "name": "a", "tid": 1, "ts": 9007199254740993}'),
    ("ts with exponent", _event(ts=1.5e3)),
    ("ts many digits", '{"ph": "X", "cat": "cpu_op", "name": "a", "tid": 1, "ts": 4912994631706.2734999999999}'),
    ("ts a string", _event(ts="12")),
    ("ts negative", _event(ts=-1)),
    ("ts negative zero", '{"ph": "X", "cat": "cpu_op", "name": "a", "tid": 1, "ts": -0.0}'),
    ("ts beyond 2**62", _event(ts=2.0**62)),
    ("ts NaN", '{"ph": "X", "cat": "cpu_op", "name": "a", "tid": 1, "ts": NaN}'),
    ("ts a boolean", _event(ts=True)),
    ("dur missing", _event(dur=DROP)),
    ("ids not integers", _event(args={"External id": 3.0, "Record function id": "4"})),
    ("id beyond int64", '{"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1, "args": {"External id": 9223372036854775808}}'),
    ("id true", _event(args={"External id": True})),
    ("kernel", _event(**KERNEL)),
    ("kernel without stream", _event(**{**KERNEL, "args": {"correlation": 9}})),
    ("kernel without stream, string tid", _event(**{**KERNEL, "tid": "stream 7", "args": {"correlation": 9}})),
    ("kernel stream negative", _event(**{**KERNEL, "args": {"stream": -1}})),
    ("kernel stream too big", _event(**{**KERNEL, "args": {"stream": 2**31}})),
    ("kernel stream a string", _event(**{**KERNEL, "args": {"stream": "7"}})),
    ("memcpy", _event(**{**KERNEL, "cat": "gpu_memcpy"})),
    ("launch", _event(**LAUNCH)),
    ("launch without correlation", _event(**{**LAUNCH, "args": {"External id": 3}})),
    ("launch with a bad time and no correlation", _event(**{**LAUNCH, "ts": -5, "args": {}})),
    ("not an object", [1, 2]),
    ("nested args", _event(args={"External id": 1, "grid": [[1, {"a": [None, True, False]}], -0.5e-3], "s": ""})),
    ("whitespace everywhere", ' {\n "ph" : "X" ,\t"cat":"cpu_op" , "name" :"a","ts": 1 ,"args" : { } } '),
]


def _document(events_json: list[str]) -> bytes:
    return b'{"schemaVersion": 1, "traceEvents": [\n' + b",\n".join(e.encode() for e in events_json) + b"\n]}\n"


@pytest.mark.parametrize("what, event", CASES, ids=[c[0] for c in CASES])
def test_each_kind_of_event_reads_as_parsing_it_does(tmp_path, monkeypatch, what, event):
    text = event if isinstance(event, str) else json.dumps(event)
    path = tmp_path / "t.kineto.json"
    # the odd event between ordinary ones: where the digest hands it to Python, its place is kept
    path.write_bytes(_document([json.dumps(_event(name="before")), text, json.dumps(_event(**KERNEL)),
                                json.dumps(_event(name="after", ts=300))]))
    digested, reference = _both(path, monkeypatch, keep_args)
    assert digested == reference
    if what == "not an object":  # refused by both, naming the element (issue 47: it was dropped silently)
        assert digested.startswith("error: ") and "traceEvents[1] is a JSON array" in digested


@pytest.mark.parametrize("text", [
    '{"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1,}',  # trailing comma
    '{"ph": "X", "cat": "cpu_op", "name": "a", "ts": 01}',  # leading zero
    '{"ph": "X", "cat": "cpu_op", "name": "a\x01", "ts": 1}',  # control character in a string
    '{"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1, "args": {"x": [1 2]}}',
    '{"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1, "args": {"x": tru}}',
    '{"ph": "X", "cat": "cpu_op", "name": "a\\q", "ts": 1}',  # bad escape
])
def test_malformed_json_is_refused_as_before(tmp_path, monkeypatch, text):
    path = tmp_path / "t.kineto.json"
    path.write_bytes(_document([json.dumps(_event()), text]))
    digested, reference = _both(path, monkeypatch)
    # the same message and byte offset; the digest walks past event 0, so the batch parsed whole
    # starts at the bad event and the message names it, where the whole file's batch named event 0
    assert digested == reference.replace("element 0:", "element 1:")
    assert digested.startswith("error: ") and "malformed JSON" in digested and "element 1:" in digested


def test_invalid_utf8_is_refused_as_before(tmp_path, monkeypatch):
    path = tmp_path / "t.kineto.json"
    path.write_bytes(_document([json.dumps(_event())]).replace(b"aten::mm", b"aten\xff\xfe"))
    digested, reference = _both(path, monkeypatch)
    assert digested == reference and digested.startswith("error: ")


def test_a_kineto_error_names_the_element_as_before(tmp_path, monkeypatch):
    events = [json.dumps(_event(ts=k)) for k in range(5000)]  # past one batch of 4096
    events[4500] = json.dumps(_event(ts=-3))
    path = tmp_path / "t.kineto.json.gz"
    path.write_bytes(gzip.compress(_document(events)))
    digested, reference = _both(path, monkeypatch)
    assert digested == reference and "element 4500" in digested


def test_times_are_the_doubles_parsing_gives():
    texts = ["4912994631706.273", "0.1", "1e-7", "123456789012345678.5", "2.5E+3", "7"]
    data = _document([f'{{"ph": "X", "cat": "cpu_op", "name": "a", "ts": {t}, "dur": {t}}}' for t in texts])
    start = data.index(b"[")
    d = _kinetodigest.digest(bytearray(data), start, data.rindex(b"]") + 1, {})
    ts = [e.ts for e in d["cpu"]]
    assert ts == [float(orjson.loads(t)) for t in texts] and not any(map(math.isnan, ts))


# Bytes that end a string's plain text, each where the word-at-a-time scan must stop for it:
# the closing quote (b""), escapes, control bytes, the last and first bytes allowed as they
# are, UTF-8 of every length, and invalid UTF-8 (a cut sequence, 0xff, an encoded surrogate).
STOPS = [b"", b'\\"', b"\\n", b"\\u00e9", b"\x00", b"\x01", b"\x1f", b" ", b"\x7f", "é".encode(), "€".encode(),
         "😀".encode(), b"\xc3", b"\xff", b"\xed\xa0\x80", b"\x80"]


@pytest.mark.parametrize("stop", STOPS, ids=[repr(s) for s in STOPS])
def test_a_name_reads_as_parsing_it_does_whatever_byte_falls_where(stop):
    for before in range(18):
        for after in range(10):
            name = b"k" * before + stop + b"m" * after
            batch = b'[{"ph": "X", "cat": "cpu_op", "name": "' + name + b'", "ts": 1}]'
            digest = _kinetodigest.digest(batch, 0, len(batch), {})
            try:
                parsed = orjson.loads(batch)[0]["name"]
            except orjson.JSONDecodeError:
                assert digest is None, name
                continue
            if b"\\" in stop:  # escaped names are left to Python's reading
                assert len(digest["odd"]) == 1 and not digest["cpu"], name
            else:
                assert [e.name for e in digest["cpu"]] == [parsed], name


def test_decimal_times_are_the_doubles_parsing_gives_whatever_their_digits():
    # around the digest's exact path (digits below 2**53, up to 22 after the point) and past it
    rng = random.Random(40)
    texts = ["9007199254740991.5", "900719925474099.15", "9007199254740993.0", "0.0000000000000000000001",
             "0.00000000000000000000001", "1.0000000000000000000000", "4611686018427387903.9"]
    for _ in range(3000):
        whole, point = rng.randrange(10 ** rng.randint(1, 17)), rng.randint(1, 24)
        texts.append(f"{whole}.{rng.randrange(10 ** point):0{point}d}")
    data = _document([f'{{"ph": "X", "cat": "cpu_op", "name": "a", "ts": {t}}}' for t in texts])
    d = _kinetodigest.digest(data, data.index(b"["), data.rindex(b"]") + 1, {})
    kept = [float(t) for t in texts if float(t) < 2**62]  # later ones are odd, left to Python
    assert [e.ts for e in d["cpu"]] == kept and len(set(kept)) > 2900
