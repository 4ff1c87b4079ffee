"""Whether a trace's recorded steps repeat one another: per step (`ProfilerStep#N`), its host
operators, their recorded time, and the operators it holds beyond every other step.

A predicted step time (`chakra simulate`, `chakra calibrate`'s host model) takes the recorded
steps for the steady step repeated. Work that one step does and the others do not breaks that:
a warm-up, DDP's rebuild of its gradient buckets in its second iteration (a broadcast of the
bucket order and views of the new buckets), logging every N steps. It shows as operators that
one step holds more often than any other: per operator name, the step's count beyond the
largest count of any other step (`one_time_operators` in all, by name in `one_time`). A trace of
one step has nothing to compare with: 0.

Operators belong to steps as in device_work.py, by their recorded start: host COMP nodes other
than the steps' own and a JAX profile's host gaps (nodetypes.HOST_GAP_PREFIXES). `host_us` sums
their recorded durations, an operator inside another counted in both, so it compares steps with
each other, not with a step's span.
"""

from __future__ import annotations

import functools

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from chakra_core.analysis.device_work import host_steps, step_marks
from chakra_core.format.depgraph import to_numpy
from chakra_core.format.nodenames import as_strings, on_names
from chakra_core.format.nodetypes import COMP, HOST_GAP_PREFIXES
from chakra_core.format.normalize import normalize_table
from chakra_core.table_schema import TableSchema, column

COLUMNS = ("name", "type", "is_cpu_op", "start_time_micros", "duration_micros")
NAMES_IN_NOTE = 4  # operator names a note spells out per step
STEPS_IN_NOTE = 3  # steps a note spells out

ONE_TIME = pa.list_(pa.struct([("name", pa.string()), ("count", pa.int64())]))
STEP = TableSchema("recorded steps", (
    column("step", pa.string()), column("operators", pa.int64()), column("host_us", pa.int64()),
    column("one_time_operators", pa.int64()), column("one_time", ONE_TIME)))
STEP_SCHEMA = STEP.schema
# what a trace's row (chakra stats, the nightly's `traces` table) keeps of its steps
TRACE_FIGURES = (column("one_time_operators", pa.int64()),)


def trace_figures(steps: pa.Table) -> dict:
    """A trace's figures of TRACE_FIGURES from its step_table: the operators its steps hold
    beyond one another, over all its steps (0: they repeat, or there is one step or none)."""
    return {"one_time_operators": int(pc.sum(steps.column("one_time_operators")).as_py() or 0)}


def step_table(table: pa.Table) -> pa.Table:
    """One row per recorded step in time order (STEP_SCHEMA); none without ProfilerStep nodes."""
    table = normalize_table(table, COLUMNS)
    names = table.column("name")
    host = (to_numpy(table.column("type")) == COMP) & to_numpy(table.column("is_cpu_op"), True).astype(bool)
    marks = step_marks(names)
    if not marks.any():
        return STEP.empty()
    step, step_names = host_steps(table, host, names)
    gaps = to_numpy(on_names(names, _host_gaps), False).astype(bool)
    rows = np.flatnonzero(host & (step >= 0) & ~marks & ~gaps)
    step = step[rows]
    durations = to_numpy(table.column("duration_micros"), 0).astype(np.int64)[rows]
    count = len(step_names)
    extra = _one_time(pc.dictionary_encode(as_strings(names.take(pa.array(rows))).combine_chunks()), step, count)
    return STEP.from_rows([{
        "step": name, "operators": int(n), "host_us": int(us),
        "one_time_operators": sum(c for _, c in extra[k]), "one_time": [{"name": a, "count": c} for a, c in extra[k]]}
        for k, (name, n, us) in enumerate(zip(step_names, np.bincount(step, minlength=count),
                                               np.bincount(step, durations, minlength=count)))])


def _host_gaps(names: pa.Array) -> pa.Array:
    """Whether each name is one of a host gap's (nodetypes.HOST_GAP_PREFIXES), not an operator's."""
    return functools.reduce(pc.or_, [pc.starts_with(names, prefix) for prefix in HOST_GAP_PREFIXES])


def _one_time(names: pa.DictionaryArray, step: np.ndarray, steps: int) -> list[list[tuple[str, int]]]:
    """Per step, (name, count beyond every other step) of the operators it holds more often than
    any other step, the largest counts first. Per name only the step of its largest count can
    hold more than every other, so the two largest counts of each name decide."""
    extra: list[list[tuple[str, int]]] = [[] for _ in range(steps)]
    if steps < 2 or not len(step):
        return extra
    keys, counts = np.unique(names.indices.to_numpy().astype(np.int64) * steps + step, return_counts=True)
    code = keys // steps
    order = np.lexsort((-counts, code))  # by name, then the largest count first
    code, counts, at_step = code[order], counts[order], (keys % steps)[order]
    first = np.r_[True, code[1:] != code[:-1]]  # each name's largest count
    second = np.where(np.r_[~first[1:], False], np.r_[counts[1:], 0], 0)  # the next largest (0: no other step)
    beyond = np.flatnonzero(first & (counts > second))
    dictionary = names.dictionary
    for k in beyond[np.lexsort((code[beyond], second[beyond] - counts[beyond]))]:
        extra[int(at_step[k])].append((dictionary[int(code[k])].as_py(), int(counts[k] - second[k])))
    return extra


def note(path: str, steps: pa.Table) -> str | None:
    """A line when some step holds work the others do not (None when none does): each such step,
    what it holds beyond the others and its recorded host time against the others' median, and
    what that does to a predicted step."""
    host = steps.column("host_us").to_numpy()
    holding = np.flatnonzero(steps.column("one_time_operators").to_numpy())
    parts = []
    for k in holding[:STEPS_IN_NOTE]:
        row = steps.slice(int(k), 1).to_pylist()[0]
        held = ", ".join(f"{x['name']} ×{x['count']:,}" for x in row["one_time"][:NAMES_IN_NOTE])
        more = len(row["one_time"]) - NAMES_IN_NOTE
        held += f" and {more:,} other name(s)" if more > 0 else ""
        others = float(np.median(np.delete(host, k)))  # k is one of the 2 or more steps
        against = f"; {row['host_us'] / others - 1:+.0%} recorded host time against the others" if others else ""
        parts.append(f"{row['step']} holds {row['one_time_operators']:,} operator(s) beyond every other ({held}{against})")
    if not parts:
        return None
    if len(holding) > STEPS_IN_NOTE:
        parts.append(f"and {len(holding) - STEPS_IN_NOTE:,} other step(s)")
    return (f"{path}: the recorded steps are not one step repeated: {'; '.join(parts)}. One-time work (a warm-up, "
            "DDP's bucket rebuild in its second iteration), work every N steps or events missing from a sampled "
            "trace; a predicted step time counts it in every step")
