"""Shared fixtures: reference traces, a clean memory:// filesystem, a local S3 endpoint (moto)."""

from __future__ import annotations

import copy
import os
import socket
import sys
import tempfile
from pathlib import Path

import fsspec
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # for `import et_builders`
# Prefect in tests: no telemetry, and no INFO lines from its ephemeral server's shutdown after
# pytest has closed the captured streams.
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
# Ray in tests: every cluster is on 127.0.0.1 and started by the test itself. Ray 2.60 turns token
# auth on when ~/.ray/auth_token exists, and caches the mode a driver first used: after a test that
# ran with it off (test_ray_cluster), a later local cluster with it on refused that driver. One mode
# for the whole session.
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

from datapaths import MICROBENCHMARKS  # noqa: E402

S3_KEY = "chakra-test-key"
S3_SECRET = "chakra-test-secret"


@pytest.fixture(scope="session")
def microbenchmark_files() -> list[Path]:
    files = sorted(MICROBENCHMARKS.rglob("*.et"))
    assert files, f"no reference traces under {MICROBENCHMARKS}"
    return files


@pytest.fixture
def memfs():
    """fsspec's memory:// filesystem, emptied before and after the test."""
    fs = fsspec.filesystem("memory")
    fs.store.clear()
    fs.pseudo_dirs.clear()
    fs.pseudo_dirs.append("")
    yield fs
    fs.store.clear()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def s3_server():
    """A moto S3 server on 127.0.0.1 (a random free port) for the whole session; yields its endpoint URL."""
    from moto import server as server_mod
    import s3fs  # noqa: F401  (needed: a missing dependency fails, not skips)
    port = _free_port()
    server = server_mod.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


# the Iceberg catalog of the warehouses the tests put on S3 (one database, a catalog per warehouse URL)
S3_CATALOG = f"sqlite:///{tempfile.mkdtemp(prefix='chakra-test-catalog-')}/catalog.sqlite"


def s3_env(endpoint: str) -> dict[str, str]:
    """Environment that points fsspec's s3:// at the endpoint, with fake credentials.

    FSSPEC_S3_<KWARG> become default storage options of s3fs (fsspec reads them when it is
    imported); the AWS_* ones keep botocore from looking for real credentials.
    """
    return {
        "FSSPEC_S3_ENDPOINT_URL": endpoint,
        "CHAKRA_CATALOG_URI": S3_CATALOG,
        "FSSPEC_S3_KEY": S3_KEY,
        "FSSPEC_S3_SECRET": S3_SECRET,
        "AWS_ACCESS_KEY_ID": S3_KEY,
        "AWS_SECRET_ACCESS_KEY": S3_SECRET,
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    }


@pytest.fixture(scope="module")
def s3(s3_server):
    """s3:// URLs reach the moto server in this module's tests; yields the s3fs filesystem.

    Module-scoped, as creating an s3fs client takes about half a second.
    """
    import s3fs

    saved = copy.deepcopy(fsspec.config.conf)
    with pytest.MonkeyPatch.context() as mp:
        for key, value in s3_env(s3_server).items():
            mp.setenv(key, value)
        # fsspec read FSSPEC_* when it was imported (before this fixture ran): re-read them into its
        # config, and restore the config afterwards.
        fsspec.config.set_conf_env(fsspec.config.conf)
        s3fs.S3FileSystem.clear_instance_cache()
        try:
            yield fsspec.filesystem("s3")
        finally:
            s3fs.S3FileSystem.clear_instance_cache()
            fsspec.config.conf.clear()
            fsspec.config.conf.update(saved)
