"""content_hashes: the sha256 of inputs taken from the bytes as the readers read them, so the
nightly job reads each input file once (chakra_core/inputs.py)."""

from __future__ import annotations

import gzip
import hashlib
import json

from chakra_core.documents import read_document
from chakra_core.format.etfile import read_table, write_table
from chakra_core.generate.workloads import generate
from chakra_core.inputs import content_hashes, open_input, read_bounded


def _sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_file_read_whole_is_hashed_without_being_opened_again(tmp_path):
    path = tmp_path / "doc.json.gz"
    path.write_bytes(gzip.compress(json.dumps({"rows": list(range(50_000))}).encode()))
    expected = _sha(path)
    with content_hashes([path.as_uri()]) as read:
        with open_input(str(path)) as f:
            f.read(10)  # a sniff, then the reader starts over
        assert read_document(str(path))[1]["rows"][-1] == 49_999
        path.unlink()  # every byte went by the digest: nothing is read again
        assert read.of(str(path)) == read.of(path.as_uri()) == expected


def test_what_the_readers_left_is_read_when_the_hash_is_asked_for(tmp_path):
    table = generate("mlp", 2).job().tables[0]
    et, unopened = tmp_path / "a.0.et", tmp_path / "notes.txt"
    write_table(table, str(et))
    unopened.write_bytes(b"x" * 3_000_001)
    with content_hashes([str(et), str(unopened)]) as read:
        assert read_table(str(et)).num_rows == table.num_rows  # streamed, not mapped, inside the block
        with open_input(str(unopened)) as f:
            f.seek(1_000)
            f.read(5)  # out of order: only what follows the hashed prefix counts
        assert read_bounded(str(et), "source_bytes", "a file")
        assert read.of(str(et)) == _sha(et)
        assert read.of(str(unopened)) == _sha(unopened)
        other = tmp_path / "b.0.et"
        write_table(table, str(other))
        with open_input(str(other)) as f, open_input(str(et)) as named:
            assert hasattr(f, "fileno") and not hasattr(named, "fileno")  # only the files named are streamed
    with content_hashes([str(et)]) as read:
        assert read.of(str(et)) == _sha(et)  # never opened: read whole
