"""The compact Kineto events (chakra_core/_native/kinetoevents.c): built, read, set, compared and
pickled as the dataclasses they replace, and their columns as numpy reads them."""

from __future__ import annotations

import pickle
import sys

import numpy as np
import pytest

from chakra_core.convert.pytorch.kineto import CpuEvent, DeviceEvent, RuntimeEvent, column


def test_fields_defaults_and_keywords():
    e = CpuEvent("aten::mm", 7, 1.5, 2.25, None, 4)
    assert (e.name, e.tid, e.ts, e.dur, e.external_id, e.rf_id, e.exclusive, e.idle_before, e.args) == \
        ("aten::mm", 7, 1.5, 2.25, None, 4, 0.0, 0.0, None)
    e = CpuEvent(name="x", tid="worker", ts=1, dur=2, external_id=3, rf_id=None, exclusive=60.0, args={"a": [1]})
    assert (e.tid, e.ts, type(e.ts), e.external_id, e.rf_id, e.exclusive, e.args) == \
        ("worker", 1.0, float, 3, None, 60.0, {"a": [1]})
    r = RuntimeEvent(1, 5.0, 9, None)
    assert (r.name, r.dur, r.correlation) == ("", 0.0, 9)
    d = DeviceEvent("gemm", "kernel", 105.0, 45.0, 7, None, correlation=9)
    assert (d.category, d.stream, d.correlation) == ("kernel", 7, 9)
    assert DeviceEvent("k", "kernel", 0.0, 1.0, 7, None).correlation is None


@pytest.mark.parametrize("call", [lambda: CpuEvent("a", 1, 0.0, 1.0, None),  # rf_id missing
                                  lambda: CpuEvent("a", 1, 0.0, 1.0, None, None, bogus=1),
                                  lambda: CpuEvent("a", 1, 0.0, 1.0, None, None, name="b"),
                                  lambda: CpuEvent("a", 1, "soon", 1.0, None, None),
                                  lambda: RuntimeEvent(1, 0.0, 1.5, None),
                                  lambda: RuntimeEvent(1, 0.0, 1, None, "", 0.0, "extra")])
def test_wrong_construction_is_refused(call):
    with pytest.raises(TypeError):
        call()


def test_fields_are_settable_and_ids_hold_any_int():
    e = CpuEvent("a", 1, 0.0, 10.0, None, None)
    e.exclusive -= 2.5
    e.rf_id, e.external_id = 2**70, -(2**63)
    e.args = {}
    assert (e.exclusive, e.rf_id, e.external_id, e.args) == (-2.5, 2**70, -(2**63), {})
    e.rf_id = None
    assert e.rf_id is None
    with pytest.raises(TypeError):
        e.rf_id = "3"
    with pytest.raises(AttributeError):
        del e.ts


def test_equality_repr_pickle_and_no_hash():
    a, b = CpuEvent("a", 1, 0.0, 1.0, None, 2), CpuEvent("a", 1, 0.0, 1.0, None, 2)
    assert a == b and a is not b and a != CpuEvent("a", 1, 0.0, 1.0, None, 3)
    assert RuntimeEvent(1, 0.0, 2, None) != DeviceEvent("a", "kernel", 0.0, 1.0, 1, None)
    assert repr(a) == ("CpuEvent(name='a', tid=1, ts=0.0, dur=1.0, external_id=None, rf_id=2, exclusive=0.0, "
                       "idle_before=0.0, args=None)")
    with pytest.raises(TypeError):
        hash(a)
    big = DeviceEvent("k", "kernel", 1.0, 2.0, 3, 2**64, correlation=5)
    assert pickle.loads(pickle.dumps(big)) == big


def test_an_event_is_small():
    assert sys.getsizeof(CpuEvent("a", 1, 0.0, 1.0, None, 2)) <= 112  # a dataclass with its floats: ~300


def test_columns():
    events = [CpuEvent("a", 5, 1.0, 2.0, 7, None), CpuEvent("b", "t", 3.0, 4.0, 2**64, 1),
              CpuEvent("a", 5, 5.0, 6.0, -1, 2)]
    assert column(events, "ts").tolist() == [1.0, 3.0, 5.0]
    values, known = column(events, "external_id")
    assert values[known].tolist() == [7, -1] and known.tolist() == [True, False, True]
    codes = {"b": 0}
    assert column(events, "name", codes).tolist() == [1, 0, 1] and codes == {"b": 0, "a": 1}
    calls = [RuntimeEvent("t", 0.0, 1, None), RuntimeEvent(9, 0.0, 2, None)]
    threads: dict = {}
    assert np.r_[column(events, "tid", threads), column(calls, "tid", threads)].tolist() == [0, 1, 0, 1, 2]
    assert len(column([], "ts")) == 0 and len(column([], "rf_id")[0]) == 0
    from chakra_core._native._kinetodigest import set_column

    set_column(events, "exclusive", np.array([0.5, 1.5, 2.5]))
    assert [e.exclusive for e in events] == [0.5, 1.5, 2.5]
    with pytest.raises(TypeError):
        set_column(events, "rf_id", np.zeros(3))
    with pytest.raises(ValueError):
        set_column(events, "exclusive", np.zeros(2))
    with pytest.raises(AttributeError):
        column(calls, "rf_id")
