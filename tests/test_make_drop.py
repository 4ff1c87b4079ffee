"""tools/make_drop.py: one day's drop (real runs, generated Chakra jobs, files to reject)."""

from __future__ import annotations

import gzip
import hashlib
import json
import re
import zlib
from pathlib import Path

import pytest
from datapaths import REFERENCE_CONFIGS

from chakra_core.analysis.validate import validate_file
from chakra_core.format.etfile import read_table
from chakra_core.format.nodetypes import RECV, SEND
from chakra_core.generate.builder import check_send_recv
from tools import make_drop as md

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REFERENCE_CONFIGS
DATE = "2025-01-15"
FAMILIES = {"data_parallel", "tensor_parallel", "pipeline_parallel", "dlrm", "moe"}
BAD_JOBS = {"bad-truncated-gzip", "bad-malformed-json", "bad-truncated-et"}
# Per generated job of the default drop: sha256 over its files' names and sha256s (_job_digest),
# first 16 hex digits. Taken from the drop as tools/make_drop.py wrote it before its families
# moved to chakra_core.generate.families: a drop stays byte for byte what it was.
GENERATED_DIGESTS = {
    "bad-truncated-et": "42fe78e2e97b92fe",
    "bad-unknown-file": "3934b80511016679",
    "gen-dlrm-003-n8": "b660b7fb69264069",
    "gen-dp-000-n8": "c7600107045e1140",
    "gen-dp-005-n16": "15e125819e22cac5",
    "gen-moe-004-n8": "a68bc27276e8f626",
    "gen-pp-002-n4": "4fc08c4e6e249cd9",
    "gen-tp-001-n4": "c431b77cff5be807",
}


def _files(day: Path) -> dict[str, bytes]:
    return {p.relative_to(day).as_posix(): p.read_bytes() for p in sorted(day.rglob("*")) if p.is_file()}


def _jobs(day: Path) -> dict[str, dict]:
    return {p.name: json.loads((p / "job.json").read_text()) for p in sorted(day.iterdir())}


def _job_digest(folder: Path) -> str:
    digest = hashlib.sha256()
    for f in sorted(folder.iterdir()):
        digest.update(f.name.encode() + b"\0" + hashlib.sha256(f.read_bytes()).digest())
    return digest.hexdigest()[:16]


@pytest.fixture(scope="module")
def drop(tmp_path_factory):
    root = tmp_path_factory.mktemp("drop")
    summary = md.make_drop(str(root), DATE, drift=False)  # the drift has tests of its own (test_history.py)
    return root / DATE, summary


def test_layout_and_job_json(drop):
    day, summary = drop
    jobs = _jobs(day)
    real_runs = [p.name for p in (REPO / "datasets" / "pytorch-gloo").iterdir() if (p / "job.json").is_file()]
    gpu_runs = [p.name for p in (REPO / "datasets" / "gpu-h200").iterdir() if (p / "job.json").is_file()]
    assert summary["jobs"] == len(jobs) == len(real_runs) + len(gpu_runs) + 6 + 4
    assert summary["files"] == sum(1 for p in day.rglob("*") if p.is_file())
    assert summary["bytes"] == sum(p.stat().st_size for p in day.rglob("*") if p.is_file())
    for job_id, info in jobs.items():
        assert info["job_id"] == job_id
        for key in ("model", "family", "parallelism", "npus", "source", "expected"):
            assert info[key] not in (None, ""), (job_id, key)
        assert info["source"] in ("pytorch-gloo", "gpu-h200", "generated")
        names = sorted(p.name for p in (day / job_id).iterdir())
        if info["source"] == "gpu-h200":
            kinds = ("et.json.gz", "kineto.json.gz", "timing.json")
            assert names == sorted([f"rank{r}.{kind}" for r in range(info["npus"]) for kind in kinds] + ["job.json"])
        elif info["source"] == "pytorch-gloo":
            ranks = [f"rank{r}.{kind}.json.gz" for r in range(info["npus"]) for kind in ("et", "kineto")]
            assert names == sorted(ranks + ["job.json"])
        else:
            ets = [f"{job_id}.{r}.et" for r in range(info["npus"])]
            assert sorted(set(names) - {"notes.txt"}) == sorted(ets + ["job.json"])
    real = {j for j, i in jobs.items() if i["source"] == "pytorch-gloo" and i["expected"] == "accept"}
    assert real == {f"gloo-{run}" for run in real_runs}
    assert {j for j, i in jobs.items() if i["source"] == "gpu-h200"} == {f"gpu-{run}" for run in gpu_runs}
    generated = {j: i for j, i in jobs.items() if i["source"] == "generated" and i["expected"] == "accept"}
    assert {i["family"] for i in generated.values()} == FAMILIES
    assert {i["npus"] for i in generated.values()} == {4, 8, 16}
    assert {j for j, i in jobs.items() if i["expected"] == "reject"} == BAD_JOBS
    rank_files = [p for p in day.rglob("*") if re.match(r"^(rank\d+\.et\.json\.gz|.+\.\d+\.et)$", p.name)]
    assert summary["rank_traces"] == len(rank_files)


def test_generated_traces_validate(drop):
    day, _ = drop
    checked = 0
    for job_id, info in _jobs(day).items():
        if info["source"] != "generated" or job_id == "bad-truncated-et":
            continue
        for r in range(info["npus"]):
            findings = validate_file(str(day / job_id / f"{job_id}.{r}.et"))
            assert [str(f) for f in findings if f.severity == "error"] == []
            checked += 1
    assert checked == 8 + 4 + 4 + 8 + 8 + 16 + 4  # the six generated jobs and bad-unknown-file


def test_one_job_per_family_simulates(drop):
    from chakra_core.sim.files import simulate_files

    day, _ = drop
    chosen = {}
    for job_id, info in _jobs(day).items():
        if info["source"] == "generated" and info["expected"] == "accept" and info["npus"] in (4, 8):
            chosen.setdefault(info["family"], (job_id, info["npus"]))
    assert set(chosen) == FAMILIES
    for family, (job_id, npus) in chosen.items():
        result, assumptions = simulate_files(str(day / job_id / job_id), str(CONFIGS / f"Ring_{npus}npus.yml"),
                                             str(CONFIGS / "Ring_4chunks.json"))
        assert assumptions == []
        assert len(result.npus) == npus
        for npu, r in enumerate(result.npus):
            assert r.finish_ns > 0 and r.compute_ns > 0
            assert r.nodes == read_table(str(day / job_id / f"{job_id}.{npu}.et")).num_rows, (family, npu)


def test_pipeline_sends_match_receives(drop):
    day, _ = drop
    pipelines = [j for j, i in _jobs(day).items() if i["family"] == "pipeline_parallel" and i["expected"] == "accept"]
    assert pipelines
    for job_id in pipelines:
        npus = _jobs(day)[job_id]["npus"]
        tables = [read_table(str(day / job_id / f"{job_id}.{r}.et")) for r in range(npus)]
        assert check_send_recv(tables) == []
        sends = sum(t.column("type").to_pylist().count(SEND) for t in tables)
        recvs = sum(t.column("type").to_pylist().count(RECV) for t in tables)
        assert sends == recvs > 0


def test_corrupt_jobs(drop):
    day, _ = drop
    jobs = _jobs(day)
    for job_id in BAD_JOBS:
        info = jobs[job_id]
        assert info["expected"] == "reject" and info["reason"]
        assert all((day / job_id / name).is_file() for name in info["bad_files"])
    cut = (day / "bad-truncated-gzip" / "rank0.et.json.gz").read_bytes()
    whole = (REPO / "datasets" / "pytorch-gloo" / "mlp_ddp-w2" / "rank0.et.json.gz").read_bytes()
    assert whole.startswith(cut) and len(cut) == len(whole) // 2
    with pytest.raises((EOFError, zlib.error)):
        gzip.decompress(cut)
    text = gzip.decompress((day / "bad-malformed-json" / "rank1.et.json.gz").read_bytes())
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)
    findings = validate_file(str(day / "bad-truncated-et" / "bad-truncated-et.1.et"))
    assert [f.code for f in findings] == ["unreadable"] and "truncated" in findings[0].message
    stray = jobs["bad-unknown-file"]  # a good job with one file to reject
    assert stray["expected"] == "accept" and stray["bad_files"] == ["notes.txt"] and "notes.txt" in stray["reason"]
    assert (day / "bad-unknown-file" / "notes.txt").is_file()


def test_generated_jobs_are_the_bytes_they_always_were(drop):
    day, _ = drop
    assert {job: _job_digest(day / job) for job in GENERATED_DIGESTS} == GENERATED_DIGESTS
    generated = {p.name for p in day.iterdir() if json.loads((p / "job.json").read_text())["source"] == "generated"}
    assert generated == set(GENERATED_DIGESTS)


def test_same_seed_same_bytes(drop, tmp_path):
    day, _ = drop
    md.make_drop(str(tmp_path), DATE, drift=False)
    assert _files(tmp_path / DATE) == _files(day)
    md.make_drop(str(tmp_path / "other"), DATE, generated_jobs=2, copies_of_real=0, corrupt=False, seed=1,
                 drift=False)
    other = _files(tmp_path / "other" / DATE)
    assert sorted(other) == sorted(k for k in _files(day) if k.startswith(("gen-dp-000-", "gen-tp-001-")))
    assert all(other[k] != v for k, v in _files(day).items() if k in other and k.endswith(".et"))


def test_memory_url_and_copies(memfs, tmp_path):
    summary = md.make_drop("memory://drops", DATE, generated_jobs=1, copies_of_real=2, corrupt=False)
    local = md.make_drop(str(tmp_path), DATE, generated_jobs=1, copies_of_real=2, corrupt=False)
    assert summary["files"] == local["files"] and summary["bytes"] == local["bytes"]
    job = "gloo-mlp_ddp-w2-c1"
    original = memfs.cat(f"/drops/{DATE}/gloo-mlp_ddp-w2/rank0.et.json.gz")
    assert memfs.cat(f"/drops/{DATE}/{job}/rank0.et.json.gz") == original
    assert json.loads(memfs.cat(f"/drops/{DATE}/{job}/job.json"))["job_id"] == job
    assert memfs.cat(f"/drops/{DATE}/gen-dp-000-n8/gen-dp-000-n8.3.et") == \
        (tmp_path / DATE / "gen-dp-000-n8" / "gen-dp-000-n8.3.et").read_bytes()


def test_cli_min_rank_traces(tmp_path, capsys):
    assert md.main(["--root", str(tmp_path), "--date", DATE, "--copies-of-real", "0", "--no-corrupt",
                    "--min-rank-traces", "60", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["accepted_rank_traces"] >= 60
    jobs = md.generated_jobs_for(60, copies_of_real=0)
    assert summary["jobs"] == jobs
    assert sum(md.plan_generated(i)[1] for i in range(jobs - 1)) < 60
    assert md.main(["--root", str(tmp_path), "--date", "2025-13-01"]) == 2


def test_s3_root(s3, tmp_path):
    bucket = "make-drop-test"
    s3.mkdir(bucket)
    summary = md.make_drop(f"s3://{bucket}/fleet", DATE, generated_jobs=1, copies_of_real=0, corrupt=False)
    assert summary["path"] == f"s3://{bucket}/fleet/{DATE}"
    names = sorted(p.rsplit("/", 1)[1] for p in s3.find(f"{bucket}/fleet/{DATE}"))
    assert names == sorted([f"gen-dp-000-n8.{r}.et" for r in range(8)] + ["job.json"])
    assert summary["bytes"] == sum(s3.size(p) for p in s3.find(f"{bucket}/fleet/{DATE}"))
    findings = validate_file(f"s3://{bucket}/fleet/{DATE}/gen-dp-000-n8/gen-dp-000-n8.0.et")
    assert [f for f in findings if f.severity == "error"] == []
