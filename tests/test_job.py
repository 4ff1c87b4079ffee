"""chakra_core.format.job: a job's files (<prefix>.<rank>.et, <prefix>.comm_groups.json), read
and written in one place; chakra_core.format.nodetypes: the node-type numbers."""

from __future__ import annotations

import gzip
import json

import pytest

from chakra_core.errors import ChakraError
from chakra_core.format import nodetypes
from chakra_core.format.columns import NODE_TYPES
from chakra_core.format.etfile import read_metadata
from chakra_core.format.job import (
    Job,
    JobLayoutError,
    comm_groups_text,
    find_ranks,
    groups_url,
    rank_url,
    read_comm_groups,
    read_ranks,
    split_rank_url,
    write_comm_groups,
)
from chakra_core.generate.builder import JobBuilder


def _job(npus: int = 4, groups: bool = True) -> JobBuilder:
    job = JobBuilder(npus, flops_per_s=1e12)
    pairs = [job.group([0, 1]), job.group([2, 3])] if groups else ["0", "0"]
    for r in range(npus):
        g = job.rank(r)
        x = g.compute("fwd", num_ops=1e9 * (r + 1), tensor_size=1 << 16)
        g.collective("ar", "ALL_REDUCE", 1 << 16, [x], pg_name=pairs[r // 2])
    return job


def test_names():
    assert rank_url("s3://b/day/job", 3) == "s3://b/day/job.3.et"
    assert groups_url("out/job") == "out/job.comm_groups.json"
    assert split_rank_url("s3://b/day/job.3.et") == ("s3://b/day/job", 3)
    assert split_rank_url("a.b.12.et.gz") == ("a.b", 12)
    for outside in ("job.et", "job.x.et", "rank0.et.json", "job.3.et.json", ".3.et", "job.comm_groups.json"):
        assert split_rank_url(outside) is None, outside


def test_write_then_read_back(tmp_path):
    built = _job()
    files = built.write(str(tmp_path / "new" / "dir"), "toy")
    out = tmp_path / "new" / "dir"
    assert files == [f"{out}/toy.{r}.et" for r in range(4)] + [f"{out}/toy.comm_groups.json"]
    assert read_metadata(files[0]).version == "0.0.4"
    job = Job.read(str(out / "toy"))
    assert job.npus == 4 and job.name == "toy" and job.comm_groups == {1: (0, 1), 2: (2, 3)}
    assert [t.num_rows for t in job.tables] == [2] * 4
    assert find_ranks(str(out / "toy")) == 4
    with pytest.raises(JobLayoutError, match=r"toy\.2\.et\[\.gz\] beyond the 2 read"):  # not a silent subset
        read_ranks(str(out / "toy"), 2)
    # the groups file named explicitly wins over the one beside the ranks
    other = write_comm_groups({1: [3, 2]}, str(tmp_path / "other.json"))
    assert Job.read(str(out / "toy"), comm_groups=other).comm_groups == {1: (3, 2)}


def test_no_groups_no_file_and_any_fsspec_url(memfs):
    files = Job([_job(groups=False).rank(0).table()], name="x").write("memory://jobs/one")
    assert files == ["memory://jobs/one/x.0.et"]
    job = Job.read("memory://jobs/one/x")
    assert job.npus == 1 and job.comm_groups == {}


def test_shared_tables_are_encoded_once_and_copied(tmp_path):
    table = _job(groups=False).rank(0).table()
    Job([table] * 3, name="spmd").write(str(tmp_path))
    data = {(tmp_path / f"spmd.{r}.et").read_bytes() for r in range(3)}
    assert len(data) == 1
    Job([_job(groups=False).rank(0).table()], name="alone").write(str(tmp_path))
    assert (tmp_path / "alone.0.et").read_bytes() in data


def test_bad_jobs_are_refused_before_anything_is_written(tmp_path):
    table = _job().rank(0).table()
    with pytest.raises(ValueError, match="no tables"):
        Job([], name="x").write(str(tmp_path))
    with pytest.raises(ValueError, match="name"):
        Job([table], name="a/b").write(str(tmp_path))
    with pytest.raises(ValueError, match="group id 0"):
        Job([table], {0: (0,)}, "x").write(str(tmp_path / "never"))
    assert not (tmp_path / "never").exists()


def test_find_ranks_wants_exactly_0_to_n_minus_1(tmp_path):
    with pytest.raises(JobLayoutError, match="no rank files"):
        find_ranks(str(tmp_path / "job"))
    _job(groups=False).write(str(tmp_path), "job")
    (tmp_path / "job.2.et").unlink()
    with pytest.raises(JobLayoutError, match=r"missing \[2\]"):
        find_ranks(str(tmp_path / "job"))
    (tmp_path / "job.2.et.gz").write_bytes(gzip.compress((tmp_path / "job.1.et").read_bytes()))
    assert find_ranks(str(tmp_path / "job")) == 4  # a gzipped rank counts
    assert Job.read(str(tmp_path / "job")).tables[2].num_rows == 2
    (tmp_path / "job.1.et.gz").write_bytes(gzip.compress((tmp_path / "job.1.et").read_bytes()))
    with pytest.raises(JobLayoutError, match="both a .et and a .et.gz"):
        find_ranks(str(tmp_path / "job"))



def test_another_jobs_files_beside_are_not_this_jobs(tmp_path):
    _job(groups=False).write(str(tmp_path), "job")
    Job([_job(groups=False).rank(0).table()], name="job.x").write(str(tmp_path))  # job.x.0.et: prefix job.x
    assert find_ranks(str(tmp_path / "job")) == 4
    assert find_ranks(str(tmp_path / "job.x")) == 1


def test_a_bad_rank_file_is_named(tmp_path):
    _job(groups=False).write(str(tmp_path), "job")
    (tmp_path / "job.1.et").write_bytes((tmp_path / "job.1.et").read_bytes()[:-3])
    with pytest.raises(ChakraError, match=r"rank 1 of 4: .*job\.1\.et"):
        Job.read(str(tmp_path / "job"))


def test_one_groups_format_written_every_older_layout_read(tmp_path):
    groups = {2: (4, 5), 1: (0, 1, 2, 3)}
    text = comm_groups_text(groups)
    assert text == '{\n"1": [\n0,\n1,\n2,\n3\n],\n"2": [\n4,\n5\n]\n}\n'  # ids ascending, one rank per line
    assert comm_groups_text({"3": [1, 0]}) == comm_groups_text({3: (1, 0)})  # string ids (JSON keys) too
    want = {1: (0, 1, 2, 3), 2: (4, 5)}
    older = {
        "builder": '{\n "1": [0, 1, 2, 3],\n "2": [4, 5]\n}\n',  # generate.builder: one group per line
        "convert": json.dumps({"1": [0, 1, 2, 3], "2": [4, 5]}, indent=1),  # convert.job: indent=1
        "sample": json.dumps({"1": [0, 1, 2, 3], "2": [4, 5]}, indent=0),  # synth.sample: no final newline
        "now": text,
    }
    for name, content in older.items():
        path = tmp_path / f"{name}.comm_groups.json"
        path.write_text(content)
        assert read_comm_groups(str(path)) == want, name
    assert comm_groups_text({}) == "{}\n"  # convert writes an empty file for a job without sub-groups


def test_node_types_are_the_schemas():
    assert nodetypes.NODE_TYPES == NODE_TYPES
    assert (nodetypes.INVALID, nodetypes.METADATA, nodetypes.MEM_LOAD, nodetypes.MEM_STORE, nodetypes.COMP,
            nodetypes.SEND, nodetypes.RECV, nodetypes.COLL) == tuple(range(8))
    assert {nodetypes.NODE_TYPES[t] for t in nodetypes.COMM_NODE_TYPES} == {
        "COMM_SEND_NODE", "COMM_RECV_NODE", "COMM_COLL_NODE"}
    assert all(type(t) is int for t in (*nodetypes.COMM_NODE_TYPES, *nodetypes.MEM_NODE_TYPES, nodetypes.COMP))


def test_plain_local_rank_files_read_in_one_pass_as_file_by_file(tmp_path):
    # format/manyfiles.py: every rank's table and metadata as read_table gives them; a gzipped
    # rank or a damaged one reads file by file (whose error names the rank and the file)
    from chakra_core.format.etfile import read_table
    from chakra_core.format.manyfiles import read_local_tables
    from chakra_core.generate.workloads import generate

    generate("transformer", 16, tp=2, pp=2, layers=2, batch=16).write(str(tmp_path), "gpt")
    urls = [str(tmp_path / f"gpt.{rank}.et") for rank in range(16)]
    together = read_local_tables(urls)
    for url, table in zip(urls, together):
        alone = read_table(url)
        assert table.equals(alone) and table.schema.metadata == alone.schema.metadata
    assert read_local_tables(urls + [str(tmp_path / "missing.et")]) is None
    (tmp_path / "gpt.3.et").write_bytes((tmp_path / "gpt.3.et").read_bytes()[:-5])  # cut short
    assert read_local_tables(urls) is None
    with pytest.raises(JobLayoutError, match="rank 3 of 16"):
        read_ranks(str(tmp_path / "gpt"), 16)
