"""s3:// URLs against a real S3 endpoint (moto's server on 127.0.0.1), configured the fsspec way.

The endpoint and credentials reach s3fs through fsspec's FSSPEC_S3_<KWARG> environment
variables (FSSPEC_S3_ENDPOINT_URL, FSSPEC_S3_KEY, FSSPEC_S3_SECRET); see the `s3` fixture in
conftest.py. fsspec reads them when it is imported, which a subprocess test checks as well.
"""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
import uuid

import et_builders as eb
import pytest
from conftest import s3_env

from chakra_core import ChakraFormatError
from chakra_core.format import etfile
from chakra_core.format.etfile import (
    ETReader,
    ETWriter,
    iter_nodes,
    read_metadata,
    read_table,
    write_messages,
    write_table,
)

META = eb.metadata("0.0.4", [eb.attr("schema", "string_val", "1.1.1-chakra.1.0.0")])


def _nodes(n: int = 50):
    return [eb.node(i, f"n{i}", 7, [eb.attr("comm_type", "int64_val", i % 8), eb.attr("comm_size", "int64_val", i << 10)],
                    data_deps=[i - 1] if i else []) for i in range(n)] + eb.coverage_nodes()


@pytest.fixture
def bucket(s3) -> str:
    name = f"chakra-test-{uuid.uuid4().hex[:12]}"  # a valid S3 bucket name: lowercase, digits, hyphens
    s3.mkdir(name)
    return name


def test_fsspec_env_config_reaches_s3fs(s3, s3_server):
    assert s3.client_kwargs.get("endpoint_url") == s3_server or s3.endpoint_url == s3_server


def test_write_and_read_back_byte_identical(s3, bucket, tmp_path):
    nodes = _nodes()
    original = eb.write_et(tmp_path / "local.et", META, nodes)
    table = read_table(str(tmp_path / "local.et"))
    url = f"s3://{bucket}/traces/job.0.et"
    write_table(table, url)
    assert s3.cat(url) == original
    back = read_table(url)
    assert back.num_rows == len(nodes)
    assert etfile.table_metadata(back) == META
    write_table(back, str(tmp_path / "again.et"))
    assert (tmp_path / "again.et").read_bytes() == original
    assert read_metadata(url) == META
    assert list(iter_nodes(url)) == nodes


def test_gzip_on_s3(s3, bucket):
    nodes = _nodes()
    original = eb.write_et(f"s3://{bucket}/in.et.gz", META, nodes)  # write_messages gzips *.gz
    stored = s3.cat(f"s3://{bucket}/in.et.gz")
    assert stored[:2] == b"\x1f\x8b" and gzip.decompress(stored) == original
    table = read_table(f"s3://{bucket}/in.et.gz")
    write_table(table, f"s3://{bucket}/out.et.gz")
    assert gzip.decompress(s3.cat(f"s3://{bucket}/out.et.gz")) == original
    write_table(table, f"s3://{bucket}/out.et")
    assert s3.cat(f"s3://{bucket}/out.et") == original


def test_streaming_batches_from_s3(s3, bucket, monkeypatch):
    nodes = _nodes(400)
    original = eb.write_et(f"s3://{bucket}/big.et", META, nodes)
    monkeypatch.setattr(etfile, "READ_CHUNK_BYTES", 1000)  # many ranged reads, messages across chunks
    with ETReader(f"s3://{bucket}/big.et") as reader:
        assert reader.metadata == META
        with ETWriter(f"s3://{bucket}/copy.et", reader.metadata) as writer:
            sizes = []
            for batch in reader.iter_batches(batch_nodes=64):
                sizes.append(batch.num_rows)
                writer.write_batch(batch)
    assert sum(sizes) == len(nodes) and max(sizes) <= 64 and len(sizes) > 5
    assert s3.cat(f"s3://{bucket}/copy.et") == original


def test_missing_key(s3, bucket):
    for url in (f"s3://{bucket}/no/such/key.et", f"s3://{bucket}/nothing.et.gz"):
        for read in (read_table, read_metadata, lambda u: list(iter_nodes(u))):
            err = pytest.raises(ChakraFormatError, read, url).value
            assert "no such file" in str(err) and url in str(err)


def test_missing_bucket(s3):
    url = "s3://chakra-no-such-bucket-0123/x.et"
    err = pytest.raises(ChakraFormatError, read_table, url).value
    assert url in str(err)


def test_damaged_object(s3, bucket):
    data = eb.et_bytes(META, _nodes(5))
    s3.pipe(f"s3://{bucket}/cut.et", data[:-3])
    err = pytest.raises(ChakraFormatError, read_table, f"s3://{bucket}/cut.et").value
    assert "truncated" in str(err) and err.offset is not None


@pytest.mark.slow
def test_env_vars_set_before_import(s3, bucket, s3_server, tmp_path):
    """The deployment path: FSSPEC_S3_* in the environment of a fresh process, nothing else."""
    url = f"s3://{bucket}/sub.et"
    original = write_messages(url, META, _nodes(3)) and s3.cat(url)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FSSPEC_", "AWS_"))}
    env.update(s3_env(s3_server))
    code = (
        "import sys, chakra_core\n"
        f"t = chakra_core.read_table({url!r})\n"
        f"chakra_core.write_table(t, {url + '.copy'!r})\n"
        "print(t.num_rows)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(3 + len(eb.coverage_nodes()))
    assert s3.cat(url + ".copy") == original
