"""Hostile JAX runs (issue 47): each case of the fuzzing round kept, with more of its kind. A
device ordinal far beyond the devices that ran ops, or devices x steps beyond what a job built in
Python may cost, is refused before a table is built; a time that does not fit int64 ns, a negative
duration, replica groups or shapes too large for the run (or empty, or naming a device twice) are
one line naming the event, the instruction or the line; the HLO parser is linear in its input."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import textwrap

import pytest

from jax_runs import (convert_line, device_events, edit_hlo, edit_trace, edit_xplane, run_copy,  # noqa: F401
                      trace_ops)

from chakra_core.convert.jax.collectives import CollectiveError, describe, replica_groups, source_target_pairs
from chakra_core.convert.jax.hlo import parse_hlo
from chakra_core.convert.jax.hlo_shapes import ShapeError, shape_bytes
from chakra_core.convert.jax.run import convert_jax_run
from chakra_core.errors import SourceFormatError
from chakra_core.format.job import Job

GROUPS = "replica_groups=mesh['axis_0'=1,'axis_1'=4] {'axis_1'}"  # tp_mlp's all-reduce, on line 185
SHAPE = "%ynn_fusion.2 = f32[256,512]{1,0}"  # the all-reduce's operand, on line 184


# 1. device ordinals

def test_one_event_on_device_65535_is_one_line_not_65536_tables(run_copy, capsys):
    # the kept case: std::bad_alloc at 2.7 GB
    edit_xplane(run_copy, lambda space: setattr(next(device_events(space))[2], "int64_value", 65535))
    line = convert_line(capsys, run_copy)
    assert "vm.xplane.pb: device ordinal 65,535 makes 65,536 devices, but ops ran on 5 of them (at most 96" in line


def test_a_far_ordinal_in_a_trace_of_300_steps_is_one_line(run_copy, capsys):
    # the kept case: 2.9 GB, one table row per device and step, under the 20M node check
    def change(events):
        trace_ops(events)[0]["args"]["device_ordinal"] = "65535"
        step = next(e for e in events if "step_num" in e.get("args", {}))
        events += [{**step, "ts": 10**6 + i, "dur": 0.5, "args": {"step_num": str(100 + i)}} for i in range(300)]
    edit_trace(run_copy, change)
    assert "vm.trace.json.gz: device ordinal 65,535 makes 65,536 devices" in convert_line(capsys, run_copy)


def test_idle_devices_within_the_bound_convert(run_copy, tmp_path):
    edit_xplane(run_copy, lambda space: setattr(next(device_events(space))[2], "int64_value", 6))
    convert_jax_run(str(run_copy), str(tmp_path / "out"), "job")
    job = Job.read(str(tmp_path / "out" / "job"))
    assert job.npus == 7 and [t.num_rows for t in job.tables[4:6]] == [3, 3]  # idle: a launch per step


def test_an_ordinal_beyond_the_npus_limit_names_it(run_copy, capsys, monkeypatch):
    monkeypatch.setenv("CHAKRA_MAX_NPUS", "4")
    edit_xplane(run_copy, lambda space: setattr(next(device_events(space))[2], "int64_value", 6))
    line = convert_line(capsys, run_copy)
    assert "device ordinal 6 (the limit is 4 NPUs" in line and "CHAKRA_MAX_NPUS" in line


def test_many_devices_times_many_steps_is_refused_before_a_node_is_built(tmp_path, capsys, monkeypatch):
    # 1,500 devices with one op each and 1,500 steps: 3,000 events that would make 4.5M nodes
    monkeypatch.delenv("CHAKRA_DEBUG", raising=False)
    events = [{"ph": "X", "pid": 1, "tid": 1, "ts": 10 * s, "dur": 5, "name": "train", "args": {"step_num": str(s)}}
              for s in range(1500)]
    events += [{"ph": "X", "pid": 1, "tid": 2, "ts": 1, "dur": 1, "name": "add.1",
                "args": {"hlo_op": "add.1", "device_ordinal": str(d)}} for d in range(1500)]
    run = _trace_run(tmp_path, events)
    line = convert_line(capsys, run)
    assert "1,500 device ops on 1,500 device(s) over 1,500 step(s) make up to 4,729,500 nodes" in line
    assert "CHAKRA_MAX_SOURCE_NODES" in line


def _trace_run(tmp_path, events: list, hlo: str | None = None):
    run = tmp_path / "run"
    profile = run / "plugins" / "profile" / "r"
    profile.mkdir(parents=True)
    (profile / "h.trace.json.gz").write_bytes(gzip.compress(json.dumps({"traceEvents": events}).encode()))
    if hlo is not None:
        (run / "step.hlo.txt").write_text(hlo)
    return run


# 2. times

@pytest.mark.parametrize("key, value, found", [
    ("ts", 1e300, "(ts 1e+300 us, dur 83.133 us) ends at 1e+303 ns, beyond 2**63 ns (292 years)"),  # kept
    ("dur", 1e300, "(ts 30586.564 us, dur 1e+300 us) ends at 1e+303 ns, beyond 2**63 ns"),  # kept
    ("dur", 9.3e15, "ends at 9.3e+18 ns, beyond 2**63 ns"),  # just past int64 ns
    ("ts", -5, "starts at -5,000 ns, before 0"),
    ("dur", -1, "lasts -1,000 ns, a negative duration"),
])
def test_a_trace_time_that_is_not_an_int64_ns_names_the_event(run_copy, capsys, key, value, found):
    index = []
    edit_trace(run_copy, lambda events: (index.append(events.index(trace_ops(events)[0])),
                                         trace_ops(events)[0].__setitem__(key, value)))
    line = convert_line(capsys, run_copy)
    assert f"vm.trace.json.gz: traceEvents[{index[0]}] 'multiply_subtract_fusion.1' " in line and found in line


def test_an_xplane_negative_duration_is_refused_naming_the_event(run_copy, capsys):
    edit_xplane(run_copy, lambda space: setattr(next(device_events(space))[1], "duration_ps", -5_000_000))
    line = convert_line(capsys, run_copy)
    assert "vm.xplane.pb: plane '/host:CPU' line 'tf_XLAEigen/" in line
    assert "'multiply_subtract_fusion.1' (timestamp_ns 7141 + offset_ps 30579423000, duration_ps -5000000) lasts" \
           " -5,000 ns, a negative duration" in line


def test_an_xplane_time_past_int64_ns_is_refused(run_copy, capsys):
    edit_xplane(run_copy, lambda space: setattr(next(device_events(space))[0], "timestamp_ns", 2**63 - 1))
    assert "beyond 2**63 ns (292 years)" in convert_line(capsys, run_copy)


# 3. replica groups and source-target pairs, checked before they are built

@pytest.mark.parametrize("text, found", [
    ("[1,400000000]<=[400000000]", "400,000,000 devices named, but the run has 4 (each may be named once)"),  # kept
    ("mesh['a'=400000000] {'a'}", "400,000,000 devices named, but the run has 4"),  # kept
    ("[1,400000000000000000]<=[400000000000000000]", "400,000,000,000,000,000 devices named"),
    ("[2,2]<=[4294967296,4294967296]", "do not fit together"),  # numpy's product wrapped round to 0
    ("[2,2]<=[9999999999999999999,1]", "expected whole numbers of at most 18 digits"),
    ("mesh['a'=2000000000,'b'=2000000000] {'b'}", "4,000,000,000,000,000,000 devices named"),
    ("{" + ",".join(f"{{{d}}}" for d in range(5)) + "}", "5 devices named, but the run has 4"),
    ("{{0,1,1,2,3}}", "5 devices named"),  # kept: a device twice
    ("{{0,1},{1,2}}", "device 1 named twice"),
    ("{{},{}}", "an empty group"),  # kept: every collective was local
    ("{{0,1},{}}", "an empty group"),
    ("[0,4]<=[0]", "is not [groups,size] of at least 1 each"),
    ("[1,1]<=[" + ",".join(["1"] * 40) + "]", "reshaped to 40 dimensions (at most 32)"),
    ("mesh['a'=2,'a'=2] {'a'}", "named twice"),
    ("mesh['a'=2,'b'=2] {'a','a'}", "named twice"),
    ("mesh['a'=0] {'a'}", "a size from 1"),
])
def test_replica_groups_too_large_empty_or_naming_a_device_twice_say_why(text, found):
    with pytest.raises(CollectiveError, match="replica_groups") as error:
        replica_groups(text, 4)
    assert found in str(error.value)


@pytest.mark.parametrize("text, found", [
    ("{" + ",".join(f"{{{d},{d + 1}}}" for d in range(6)) + "}", "more pairs than the run's 4 devices"),
    ("{{0,1},{0,2}}", "device 0 as a source twice"),
    ("{{0,1},{2,1}}", "device 1 as a target twice"),
    ("{{0,9}}", "outside 0..3"),
])
def test_source_target_pairs_beyond_the_devices_say_why(text, found):
    with pytest.raises(CollectiveError, match=found.replace(".", r"\.")):
        source_target_pairs(text, 4)


def test_groups_too_large_for_the_run_are_one_line_naming_the_instruction(run_copy, capsys):
    hlo = edit_hlo(run_copy, GROUPS, "replica_groups=mesh['a'=400000000] {'a'}")
    line = convert_line(capsys, run_copy)
    assert f"{hlo.name}: line 185: instruction all-reduce: replica_groups \"mesh['a'=400000000] {{'a'}}\"" \
           ": 400,000,000 devices named, but the run has 4" in line


# 4. shapes

@pytest.mark.parametrize("shape, found", [
    ("f32[99999999999,99999999999]", "holds over 2**63 bytes"),  # kept
    ("(c128[576460752303423487], c128[576460752303423487])", "holds over 2**63 bytes"),  # each fits, not both
    ("token[" + ",".join(["999999999999999999"] * 1000) + "]", "holds over 2**63 bytes"),  # stopped early
    ("f32[-256,512]", "dimension '-256' is negative"),  # kept
    ("f32[9999999999999999999]", "is not a size"),  # 19 digits
    ("(" + "a" * 400_000 + ")", "no array in shape"),  # kept: a tuple of letters
])
def test_shapes_beyond_int64_or_negative_say_why(shape, found):
    with pytest.raises(ShapeError) as error:
        shape_bytes(shape)
    assert found in str(error.value)


def test_an_operand_too_large_is_one_line_naming_the_instruction(run_copy, capsys):
    hlo = edit_hlo(run_copy, SHAPE, "%ynn_fusion.2 = f32[99999999999,99999999999]{1,0}")
    line = convert_line(capsys, run_copy)
    assert f"{hlo.name}: line 184: bad instruction in computation main.0_spmd: instruction ynn_fusion.2:" \
           " f32[99999999999,99999999999] holds over 2**63 bytes" in line


def test_operands_that_sum_past_int64_name_the_collective():
    module = parse_hlo("m.txt", textwrap.dedent("""\
        HloModule m
        ENTRY %main (a: c128[576460752303423487], b: c128[576460752303423487]) -> f32[] {
          %a = c128[576460752303423487]{0} parameter(0)
          %b = c128[576460752303423487]{0} parameter(1)
          ROOT %ar = (f32[2]{0}, f32[2]{0}) all-reduce(%a, %b), replica_groups={}, channel_id=99999999999999999999999
        }
        """))
    with pytest.raises(SourceFormatError, match=r"m.txt: line 5: instruction ar: its operands hold 1.84e\+19 bytes"):
        describe(module, module.entry_computation.by_name["ar"], 4)


# 5. linear parsing

LINEAR = r"""
import time
from chakra_core.convert.jax.hlo import parse_hlo
from chakra_core.errors import SourceFormatError

def entry(line):
    return "ENTRY %main () -> f32[] {\n  " + line + "\n}\n"

cases = {
    "x ( and 400,000 ->": "x (" + "->" * 400_000 + "\n" + entry("%x = f32[] constant(0)"),
    "a tuple of 400,000 letters": entry("%x = (" + "a" * 400_000 + ") tuple()"),
    "400,000 unclosed comments": entry("%x = f32[] constant(0) " + "/*" * 400_000),
    "200,000 a[": entry("%x = (" + "a[" * 200_000 + ") tuple()"),
}
for name, text in cases.items():
    started = time.monotonic()
    try:
        parse_hlo("x.txt", "HloModule m\n" + text)
    except SourceFormatError:
        pass
    print(f"{name}: {time.monotonic() - started:.2f} s", flush=True)
"""


def test_hlo_parsing_is_linear_on_long_runs_of_one_piece():
    # kept: `x (` and 400,000 `->`, and a tuple shape of 400,000 letters, were killed at 60 s
    # (a pattern scanning to the line's end from each position); a linear parse takes well under 1 s
    done = subprocess.run([sys.executable, "-c", LINEAR], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert [float(line.split(": ")[1].split()[0]) < 15 for line in done.stdout.splitlines()] == [True] * 4, done.stdout


# more of the same kind: ids, names and depth a fuzzer reaches

def test_an_unhashable_process_id_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("CHAKRA_DEBUG", raising=False)
    run = _trace_run(tmp_path, [{"ph": "M", "pid": [1], "name": "process_name", "args": {"name": "a"}}])
    assert "traceEvents[0].pid is [1], not an id" in convert_line(capsys, run)


def test_a_device_plane_of_5000_digits_is_no_device(tmp_path):
    plane = {"ph": "M", "pid": 2, "name": "process_name", "args": {"name": "/device:GPU:" + "9" * 5000}}
    op = {"ph": "X", "pid": 2, "tid": 1, "ts": 1, "dur": 1, "name": "x", "args": {"hlo_op": "x"}}
    run = _trace_run(tmp_path, [plane, op])  # int() of 5,000 digits was a ValueError
    with pytest.raises(SourceFormatError, match="no device ops"):
        convert_jax_run(str(run), str(tmp_path / "out"), "job")


def test_a_chain_of_3000_nested_fusions_converts(tmp_path):
    chain = "".join(f"%c{i} (p: f32[]) -> f32[] {{\n  %p = f32[] parameter(0)\n  ROOT %f{i} = f32[] fusion(%p),"
                    f" kind=kLoop, calls=%c{i + 1}\n}}\n" for i in range(3000))
    hlo = (f"HloModule m\n{chain}%c3000 (p: f32[]) -> f32[] {{\n  %p = f32[] parameter(0)\n"
           "  ROOT %d = f32[] dot(%p, %p)\n}\nENTRY %main (p: f32[]) -> f32[] {\n  %p = f32[] parameter(0)\n"
           "  ROOT %add.1 = f32[] fusion(%p), kind=kLoop, calls=%c0\n}\n")
    op = {"ph": "X", "pid": 1, "tid": 1, "ts": 10, "dur": 5, "name": "add.1",
          "args": {"hlo_op": "add.1", "device_ordinal": "0", "hlo_module": "m"}}
    convert_jax_run(str(_trace_run(tmp_path, [op], hlo)), str(tmp_path / "out"), "job")  # was a RecursionError
    names = Job.read(str(tmp_path / "out" / "job")).tables[0].column("name").to_pylist()
    assert "add.1 xla:gemm" in names  # the dot 3,000 calls down, found without recursion
