"""Node names held as a dictionary: a big trace repeats a few thousand distinct names over
millions of nodes, so its `name` column read for analysis (analysis/facade.read_trace) is one
dictionary of the distinct names and an int32 index per node, not a string per node (1.2 M
names of a converted GPU run: 73 MB as strings, 5 MB as indices).

- `NameDictionary`: encodes a trace's name column batch by batch into one dictionary shared by
  every chunk, in first-seen order.
- `on_names(column, function)`: a function of strings (pyarrow.compute's starts_with, an
  operator's class, ...) of a name column, plain or dictionary-encoded; on a dictionary,
  computed once per distinct name.
- `as_strings(array)`: the names as plain strings (what tables and results hold).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa

NAMES = pa.dictionary(pa.int32(), pa.string())  # the encoded column's type


class NameDictionary:
    """One dictionary for the name column of every batch of a trace: encode() each batch's
    column, then column() gives them as one ChunkedArray sharing the final dictionary."""

    def __init__(self):
        self._position: dict[str, int] = {}
        self._indices: list[pa.Array] = []

    def encode(self, names: pa.Array) -> None:
        """Adds one batch's names (a string array)."""
        local = names.dictionary_encode()
        codes = np.fromiter((self._position.setdefault(name, len(self._position))
                             for name in local.dictionary.to_pylist()), np.int32, len(local.dictionary))
        self._indices.append(pa.array(codes).take(local.indices))  # (a null name stays null)

    def column(self) -> pa.ChunkedArray:
        dictionary = pa.array(list(self._position), pa.string())
        return pa.chunked_array([pa.DictionaryArray.from_arrays(indices, dictionary) for indices in self._indices],
                                NAMES)


def on_names(column: pa.Array | pa.ChunkedArray, function: Callable[[pa.Array], pa.Array]
             ) -> pa.Array | pa.ChunkedArray:
    """function(column) for a string column; for a dictionary-encoded one, function of its
    dictionary taken by its indices: the same values, computed once per distinct name (the
    chunks joined first, their dictionaries unified: cheap, and one dictionary to compute on)."""
    if not pa.types.is_dictionary(column.type):
        return function(column)
    encoded = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    values = function(encoded.dictionary).take(encoded.indices)
    return pa.chunked_array([values]) if isinstance(column, pa.ChunkedArray) else values


def as_strings(names: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """The names as plain strings (a dictionary-encoded column decoded; a string one as it is)."""
    return names.cast(pa.string()) if pa.types.is_dictionary(names.type) else names
