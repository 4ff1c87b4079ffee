"""Ranks whose graphs are another rank's but for their communicator groups and peers.

In a generated job most ranks repeat a few graphs: every rank of one pipeline stage runs the
same nodes, only with its own tensor- and data-parallel groups (pg_name) and its own
neighbours (comm_src, comm_dst). Building each rank's graph node by node in Python costs
milliseconds a rank, and encoding each rank's table as much again; a 16,384-NPU job took over
a minute. Here such a rank is a `Relabel` of a template rank: its table is the template's with
those three columns mapped (numpy, no loop per node), and the files of all ranks of one
template are written together: the rows the ranks share are encoded once, the rows that
differ are encoded for every rank of the template in one codec call, and each file is its
rows' messages in order (the same bytes as writing its table alone).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from chakra_core.format import codec
from chakra_core.format.etfile import encode_varint
from chakra_core.format.normalize import normalize_table
from chakra_core.outputs import open_output

MOVED = ("pg_name", "comm_src", "comm_dst")


@dataclass(frozen=True)
class Relabel:
    """A rank that runs rank `template`'s graph with group names and peer ranks mapped."""

    template: int
    groups: Mapping[str, str]
    peers: Mapping[int, int]


class Template:
    """One template table and what its relabelled ranks change: each row's group name and
    peers as indices into per-rank value lists (0: kept as it is)."""

    def __init__(self, table: pa.Table, names: list[str], peers: list[int]):
        self.table = table
        self.names, self.peers = names, peers
        pg = self.table.column("pg_name").to_pylist()
        self.pg_role = np.array([names.index(v) + 1 if v in names else 0 for v in pg], np.int64)
        self.peer_role = {c: np.array([peers.index(v) + 1 if v in peers else 0 for v in
                                       self.table.column(c).to_pylist()], np.int64) for c in MOVED[1:]}
        self.moved_rows = np.flatnonzero((self.pg_role > 0) | (self.peer_role["comm_src"] > 0)
                                         | (self.peer_role["comm_dst"] > 0))

    def relabelled(self, labels: list[Relabel], rows: np.ndarray | None = None) -> pa.Table:
        """The template's `rows` (default all) for each of `labels` in turn, relabelled."""
        rows = np.arange(self.table.num_rows) if rows is None else rows
        table = self.table.take(pa.array(np.tile(rows, len(labels))))
        names = np.array([[None] + [label.groups[n] for n in self.names] for label in labels], object)
        each = np.repeat(np.arange(len(labels)), len(rows))
        kept = self.table.column("pg_name").to_numpy(zero_copy_only=False)[np.tile(rows, len(labels))]
        role = np.tile(self.pg_role[rows], len(labels))
        table = table.set_column(table.schema.get_field_index("pg_name"), "pg_name",
                                 pa.array(np.where(role > 0, names[each, role], kept), pa.string()))
        peers = np.array([[0] + [label.peers[p] for p in self.peers] for label in labels], np.int64)
        for column in MOVED[1:]:
            role = np.tile(self.peer_role[column][rows], len(labels))
            old = table.column(column)
            values = np.where(role > 0, peers[each, role], pc.fill_null(old, 0).to_numpy(zero_copy_only=False))
            table = table.set_column(table.schema.get_field_index(column), table.schema.field(column),
                                     pa.array(values, old.type, mask=old.is_null().to_numpy(zero_copy_only=False)))
        return table


def frames(blob: bytes) -> Iterator[bytes]:
    """The length-prefixed messages of an encoded batch, one by one (prefix included)."""
    pos, end = 0, len(blob)
    while pos < end:
        length, shift, start = 0, 0, pos
        while True:
            byte = blob[pos]
            pos += 1
            length |= (byte & 0x7F) << shift
            if byte < 0x80:
                break
            shift += 7
        pos += length
        yield blob[start:pos]


def write_relabelled(template: Template, labels: list[Relabel], urls: list[str], metadata: bytes) -> None:
    """The .et file of each relabelled rank (urls[i] for labels[i]), as write_table would write
    its table: the template's shared rows encoded once, the moved rows of all ranks at once."""
    shared = list(frames(_encoded(template.table)))
    moved = template.moved_rows
    mine = list(frames(_encoded(template.relabelled(labels, moved)))) if len(moved) and labels else []
    head = encode_varint(len(metadata)) + metadata
    k = len(moved)
    for i, url in enumerate(urls):
        parts = list(shared)
        for j, row in enumerate(moved.tolist()):
            parts[row] = mine[i * k + j]
        with open_output(url, "wb") as f:
            f.write(head + b"".join(parts))


def _encoded(table: pa.Table) -> bytes:
    """The node messages of a table, as ETWriter.write_table encodes them."""
    return b"".join(codec.encode_batch(batch) for batch in normalize_table(table).combine_chunks().to_batches())
