"""The HLO text parser, collectives and asynchronous pairs of convert/jax, and hostile JAX input:
every replica_groups form, source-target pairs, shapes and their bytes; -start/-done pairs (as
XLA schedules them on GPUs and TPUs) folded into one collective that only its -done's users wait
for; a truncated XPlane, bad HLO or a bad trace ends in one line naming the file and where."""

from __future__ import annotations

import gzip
import json
import shutil

import pytest

from jax_runs import one_line, run_copy  # noqa: F401 - run_copy is a fixture

from chakra_core.convert.jax.collectives import CollectiveError, replica_groups, source_target_pairs
from chakra_core.convert.jax.hlo import parse_hlo, parse_instruction
from chakra_core.convert.jax.hlo_shapes import shape_bytes
from chakra_core.convert.jax.run import convert_jax_run
from chakra_core.errors import SourceFormatError
from chakra_core.format.job import Job
from chakra_core.format.nodetypes import COLL, COMP, RECV, SEND
from chakra_core.format.schema import et_def_pb2 as pb

KIND = {v: k for k, v in pb.CollectiveCommType.items()}


@pytest.mark.parametrize("text, devices, groups", [
    ("{{0,1},{2,3}}", 4, ((0, 1), (2, 3))),
    ("{{0,1,2,3}}", 4, ((0, 1, 2, 3),)),
    ("{}", 4, ((0, 1, 2, 3),)),
    (None, 2, ((0, 1),)),
    ("[2,2]<=[4]", 4, ((0, 1), (2, 3))),
    ("[1,4]<=[4]", 4, ((0, 1, 2, 3),)),
    ("[2,2]<=[2,2]T(1,0)", 4, ((0, 2), (1, 3))),
    ("[4,2]<=[2,2,2]T(2,1,0)", 8, ((0, 4), (2, 6), (1, 5), (3, 7))),
    ("mesh['axis_0'=2,'axis_1'=2] {'axis_1'}", 4, ((0, 1), (2, 3))),
    ("mesh['axis_0'=2,'axis_1'=2] {'axis_0'}", 4, ((0, 2), (1, 3))),
    ("mesh['axis_0'=4,'axis_1'=1] {'axis_0'}", 4, ((0, 1, 2, 3),)),
    ("mesh['axis_0'=1,'axis_1'=4] {'axis_1'}", 4, ((0, 1, 2, 3),)),
    ("mesh['a'=2,'b'=2] {'a','b'}", 4, ((0, 1, 2, 3),)),
])
def test_replica_groups_in_every_form(text, devices, groups):
    assert replica_groups(text, devices) == groups


@pytest.mark.parametrize("text", ["{{0,1},{2,9}}", "[2,2]<=[5]", "[2,2]<=[2,2]T(0,0)", "mesh['a'=2] {'z'}",
                                  "<<0,1>>", "{{0,x}}"])
def test_unreadable_replica_groups_say_why(text):
    with pytest.raises(CollectiveError):
        replica_groups(text, 4)


def test_source_target_pairs_and_shapes():
    assert source_target_pairs("{{0,1},{1,2},{2,3},{3,0}}", 4) == ((0, 1), (1, 2), (2, 3), (3, 0))
    assert shape_bytes("(f32[1024,512]{1,0}, f32[16,1024]{1,0}, f32[])") == 4 * (1024 * 512 + 16 * 1024 + 1)
    assert shape_bytes("bf16[8,128]{1,0:T(8,128)(2,1)}") == 2 * 8 * 128  # tiles are not dimensions
    assert shape_bytes("pred[3]") == 3 and shape_bytes("s4[3]") == 2 and shape_bytes("f32[<=10]") == 40
    assert shape_bytes("((f32[2]{0}), s32[], token[])") == 12


def test_instructions_old_and_new_operand_forms():
    new = parse_instruction("%ar = f32[4]{0} all-reduce(%x, %y), channel_id=3, replica_groups={{0,1}}, "
                            "to_apply=%add, metadata={op_name=\"a,b\" source_file=\"x\"}", 7)
    assert (new.name, new.opcode, new.operands, new.attrs["channel_id"], new.line) == ("ar", "all-reduce", ["x", "y"],
                                                                                         "3", 7)
    old = parse_instruction("ROOT %t = (f32[2]{0}, f32[]) tuple(f32[2]{0} %a, f32[] %b)", 1)
    assert old.root and old.operands == ["a", "b"] and old.bytes == 12
    assert parse_instruction("%c = f32[] constant(0)", 1).operands == []


ASYNC_HLO = """HloModule jit_step, is_scheduled=true, num_partitions=2

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

%rs_body (p: f32[8,4]) -> f32[4,4] {
  %p = f32[8,4]{1,0} parameter(0)
  ROOT %reduce-scatter.1 = f32[4,4]{1,0} reduce-scatter(%p), channel_id=3, replica_groups={{0,1}}, dimensions={0}, to_apply=%add
}

%fused_dot (x: f32[8,4], y: f32[4,4]) -> f32[8,4] {
  %x = f32[8,4]{1,0} parameter(0)
  %y = f32[4,4]{1,0} parameter(1)
  ROOT %dot.1 = f32[8,4]{1,0} dot(%x, %y), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}

ENTRY %main (p0: f32[8,4], p1: f32[4,4]) -> (f32[8,4], f32[16,4], f32[4,4], f32[8,4]) {
  %p0 = f32[8,4]{1,0} parameter(0)
  %p1 = f32[4,4]{1,0} parameter(1)
  %all-reduce-start.1 = f32[8,4]{1,0} all-reduce-start(%p0), channel_id=1, replica_groups=[1,2]<=[2], use_global_device_ids=true, to_apply=%add
  %fusion.1 = f32[8,4]{1,0} fusion(%p0, %p1), kind=kOutput, calls=%fused_dot
  %all-reduce-done.1 = f32[8,4]{1,0} all-reduce-done(%all-reduce-start.1)
  %all-gather-start.1 = (f32[8,4]{1,0}, f32[16,4]{1,0}) all-gather-start(%fusion.1), channel_id=2, replica_groups={{0,1}}, dimensions={0}, use_global_device_ids=true
  %all-gather-done.1 = f32[16,4]{1,0} all-gather-done(%all-gather-start.1)
  %async-start.1 = ((f32[8,4]{1,0}), f32[4,4]{1,0}, s32[]) async-start(%all-reduce-done.1), calls=%rs_body
  %async-done.1 = f32[4,4]{1,0} async-done(%async-start.1)
  %collective-permute-start.1 = (f32[8,4]{1,0}, f32[8,4]{1,0}) collective-permute-start(%fusion.1), channel_id=4, source_target_pairs={{0,1},{1,0}}
  %collective-permute-done.1 = f32[8,4]{1,0} collective-permute-done(%collective-permute-start.1)
  %copy.1 = f32[8,4]{1,0} copy(%collective-permute-done.1)
  ROOT %tuple.1 = (f32[8,4]{1,0}, f32[16,4]{1,0}, f32[4,4]{1,0}, f32[8,4]{1,0}) tuple(%fusion.1, %all-gather-done.1, %async-done.1, %copy.1)
}
"""
SCHEDULE = ["all-reduce-start.1", "fusion.1", "all-reduce-done.1", "all-gather-start.1", "all-gather-done.1",
            "async-start.1", "async-done.1", "collective-permute-start.1", "collective-permute-done.1", "copy.1"]


def _gpu_like_run(folder, hlo: str = ASYNC_HLO):
    """A run as a GPU profile lays it out: each device's ops on the `XLA Ops` line of its
    /device:GPU:N plane (Chrome-trace JSON), the step on a host thread, and the module's HLO."""
    events = [{"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "/host:CPU"}},
              {"ph": "X", "pid": 1, "tid": 1, "ts": 0, "dur": 200, "name": "train", "args": {"step_num": "0"}}]
    for device in (0, 1):
        pid = 10 + device
        events += [{"ph": "M", "pid": pid, "name": "process_name", "args": {"name": f"/device:GPU:{device}"}},
                   {"ph": "M", "pid": pid, "tid": 2, "name": "thread_name", "args": {"name": "XLA Ops"}}]
        events += [{"ph": "X", "pid": pid, "tid": 2, "ts": 10 + 10 * i, "dur": 8, "name": name,
                    "args": {"hlo_module": "jit_step"}} for i, name in enumerate(SCHEDULE)]
        events += [{"ph": "M", "pid": pid, "tid": 3, "name": "thread_name", "args": {"name": "Stream #7(Compute)"}},
                   {"ph": "X", "pid": pid, "tid": 3, "ts": 21, "dur": 6, "name": "sm90_gemm_kernel",
                    "args": {"hlo_op": "fusion.1", "hlo_module": "jit_step"}}]  # fusion.1's kernel: not again
    profile = folder / "plugins" / "profile" / "2026_01_01"
    profile.mkdir(parents=True)
    (profile / "gpu.trace.json.gz").write_bytes(gzip.compress(json.dumps({"traceEvents": events}).encode()))
    (folder / "step.hlo.txt").write_text(hlo)
    return folder


def test_async_pairs_fold_into_one_collective_that_only_the_done_users_wait_for(tmp_path):
    run = _gpu_like_run(tmp_path / "run")
    convert_jax_run(str(run), str(tmp_path / "out"), "job")
    job = Job.read(str(tmp_path / "out" / "job"))
    assert job.npus == 2
    for device, table in enumerate(job.tables):
        rows = table.to_pylist()
        by_name = {r["name"].split(" ")[0]: r for r in rows}
        collectives = [(KIND[r["comm_type"]], r["comm_size"]) for r in rows if r["type"] == COLL]
        assert collectives == [("ALL_REDUCE", 128), ("ALL_GATHER", 128), ("REDUCE_SCATTER", 128)]
        assert sorted((r["type"], r["comm_size"]) for r in rows if r["type"] in (SEND, RECV)) == [(SEND, 128), (RECV, 128)]
        assert not any(r["name"].startswith(("all-reduce-done", "xla call:")) for r in rows)  # folded, asynchronous
        reduce_start, fusion = by_name["all-reduce-start.1"]["id"], by_name["fusion.1"]
        assert reduce_start not in fusion["data_deps"] + fusion["ctrl_deps"]  # computes beside the all-reduce
        assert reduce_start in by_name["async-start.1"]["data_deps"]  # uses its result, through the -done
        assert by_name["all-reduce-start.1"]["duration_micros"] == 28  # from its start to its -done's end
        assert fusion["type"] == COMP and fusion["name"].endswith("xla:gemm")
        assert not any("sm90_gemm_kernel" in r["name"] for r in rows)  # the XLA Ops line already gave fusion.1
        assert by_name["copy.1"]["name"].endswith("xla:copy")


def test_a_truncated_xplane_is_one_line_naming_it(run_copy, tmp_path, capsys):
    xplane = next(run_copy.rglob("*.xplane.pb"))
    xplane.write_bytes(xplane.read_bytes()[:5000])
    line = one_line(capsys, "convert", str(run_copy), "-o", str(tmp_path / "out"))
    assert "vm.xplane.pb" in line and "XPlane" in line


def test_bad_hlo_is_one_line_naming_the_file_and_line(run_copy, tmp_path, capsys):
    hlo = next(run_copy.glob("hlo/*after_optimizations.txt"))
    lines = hlo.read_text().splitlines()
    at = next(i for i, text in enumerate(lines) if " all-reduce(" in text)
    lines[at] = lines[at].replace("all-reduce(%ynn_fusion.2)", "all-reduce(%nowhere)")
    hlo.write_text("\n".join(lines))
    line = one_line(capsys, "convert", str(run_copy), "-o", str(tmp_path / "out"))
    assert hlo.name in line and f"line {at + 1}" in line and "nowhere" in line
    lines[at] = lines[at].replace("%nowhere", "%ynn_fusion.2").replace("mesh[", "grid[")
    hlo.write_text("\n".join(lines))
    line = one_line(capsys, "convert", str(run_copy), "-o", str(tmp_path / "out"))
    assert hlo.name in line and f"line {at + 1}" in line and "replica_groups" in line
    hlo.write_text("HloModule jit_step\n\nENTRY %main () -> f32[] {\n  %x = f32[] constant(0)\n")
    assert "not closed" in one_line(capsys, "convert", str(run_copy), "-o", str(tmp_path / "out"))


def test_a_bad_trace_or_timing_isone_line(run_copy, tmp_path, capsys):
    next(run_copy.rglob("*.xplane.pb")).unlink()
    trace = next(run_copy.rglob("vm.trace.json.gz"))
    document = json.loads(gzip.decompress(trace.read_bytes()))
    index = next(i for i, e in enumerate(document["traceEvents"]) if e.get("ph") == "X")
    document["traceEvents"][index]["ts"] = "soon"
    trace.write_bytes(gzip.compress(json.dumps(document).encode()))
    line = one_line(capsys, "convert", str(run_copy), "-o", str(tmp_path / "out"))
    assert "vm.trace.json.gz" in line and f"traceEvents[{index}].ts" in line
    trace.write_bytes(gzip.compress(b'{"traceEvents": [')[:-3])
    assert "vm.trace.json.gz" in one_line(capsys, "convert", str(run_copy), "-o", str(tmp_path / "out"))
    (run_copy / "timing.json").write_text('{"steps_ns": [1, -2]}')
    shutil.rmtree(trace.parent)
    assert "no JAX profile" in one_line(capsys, "convert", str(run_copy), "-o", str(tmp_path / "out"),
                                         "--from", "jax")


def test_bad_timing_names_the_key(run_copy, tmp_path):
    (run_copy / "timing.json").write_text('{"steps_ns": [1, -2]}')
    with pytest.raises(Exception, match="steps_ns"):
        convert_jax_run(str(run_copy), str(tmp_path / "out"), "job")


def test_a_module_line_is_required():
    with pytest.raises(SourceFormatError, match="HloModule"):
        parse_hlo("x.txt", "ENTRY %main () -> f32[] {\n}\n")
