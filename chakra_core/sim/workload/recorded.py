"""What a run records for its timeline, compactly: every completion (NPU, node index, end tick)
and every node's issue tick in flat arrays of machine ints, and the timeline made from them
when it is read. A million-node run keeps some 40 bytes a node, not a million objects.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Sequence

import numpy as np
import pyarrow as pa

from chakra_core.sim.decoded import DO_COMPUTE, TRACK_OF_SLOT, Node
from chakra_core.sim.results import TimelineEvent


class Completions:
    """The nodes run, in completion order: (npu, node index, end tick) each, kept in flat arrays."""

    def __init__(self):
        self.npu, self.index, self.end = array("i"), array("q"), array("q")

    def add(self, npu: int, index: int, end: int) -> None:
        self.npu.append(npu)
        self.index.append(index)
        self.end.append(end)

    def __len__(self) -> int:
        return len(self.end)

    def __iter__(self) -> Iterator[tuple[int, int, int]]:
        return zip(self.npu, self.index, self.end)

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(npu, node index, end tick) of every completion, as numpy arrays (views, no copy)."""
        if not len(self):
            return np.zeros(0, np.int32), np.zeros(0, np.int64), np.zeros(0, np.int64)
        return (np.frombuffer(self.npu, np.int32), np.frombuffer(self.index, np.int64),
                np.frombuffer(self.end, np.int64))


class RecordedTimeline(Sequence):
    """A run's timeline: one TimelineEvent per node run, in completion order, each made when it is
    read (iterating makes them one by one); `node_times(npu)` gives one NPU's as arrays."""

    def __init__(self, ran: Completions, issued_at: list[array], nodes: list[list[Node]],
                 ids: list[np.ndarray | None], tables: list[pa.Table | None]):
        self._ran, self._issued_at, self._nodes, self._ids = ran, issued_at, nodes, ids
        self._names = [_names(t) if t is not None and "name" in t.column_names else None for t in tables]

    def __len__(self) -> int:
        return len(self._ran)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError("timeline index out of range")
        return self._event(self._ran.npu[i], self._ran.index[i], self._ran.end[i])

    def __iter__(self) -> Iterator[TimelineEvent]:
        return (self._event(npu, index, end) for npu, index, end in self._ran)

    def _event(self, npu: int, index: int, end: int) -> TimelineEvent:
        node, names = self._nodes[npu][index], self._names[npu]
        kind = "compute" if node.action == DO_COMPUTE else (node.label or node.op or "instant")
        return TimelineEvent(npu, int(self._ids[npu][index]), names[0][names[1][index]] if names else "",
                             TRACK_OF_SLOT[node.slot], kind, self._issued_at[npu][index], end, node.size)

    def node_times(self, npu: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(node id, start ns, end ns) of every node NPU `npu` ran, in completion order."""
        npus, indices, ends = self._ran.arrays()
        mine = indices[npus == npu]
        issued = np.frombuffer(self._issued_at[npu], np.int64) if len(self._issued_at[npu]) else np.zeros(0, np.int64)
        return self._ids[npu][mine], issued[mine], ends[npus == npu]


def _names(table: pa.Table) -> tuple[list[str], array]:
    """A table's node names as (the distinct names, each row's position among them): a trace
    repeats a few names many times, and each event then shares its name's one string."""
    encoded = table.column("name").combine_chunks().dictionary_encode()
    positions = array("i")
    positions.frombytes(memoryview(encoded.indices.to_numpy(zero_copy_only=False).astype(np.int32)).cast("B"))
    return encoded.dictionary.to_pylist(), positions
