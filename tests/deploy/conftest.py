"""Fixtures of the deploy tests: a dataset without seek indexes on the S3 test
server (moto behind the request-logging proxy, on loopback), reached as a
cloud job reaches it: through the standard AWS environment variables alone."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from helpers import SECRET

from streamer.dataset.manifest import MANIFEST_NAME
from streamer.storage import open_url
from streamer.write.pack import pack


@pytest.fixture(scope="package")
def unindexed(index_sources: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``index_sources`` packed into four shards without ``seek_index/``."""
    out = tmp_path_factory.mktemp("unindexed") / "ds"
    pack(index_sources, out, shard_size=20_000, batch_size=2, progress=False, index=False)
    return out


@pytest.fixture
def aws_env(s3, monkeypatch) -> str:  # type: ignore[no-untyped-def]
    """The variables a ``modal.Secret`` or a Kubernetes Secret would set, pointing
    at the S3 test server; returns its endpoint."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test-key-id")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3.url)
    return s3.url


@pytest.fixture
def remote_unindexed(s3, s3_uploaded, unindexed, aws_env) -> str:  # type: ignore[no-untyped-def]
    """``unindexed`` uploaded under a fresh prefix of the test bucket: its URL."""
    url = f"s3://{s3_uploaded}/jobs-{uuid.uuid4().hex[:8]}"
    store, root = open_url(url)
    for path in sorted(unindexed.rglob("*")):
        if path.is_file():
            store.put_sync(store.join(root, path.relative_to(unindexed).as_posix()), path)
    s3.reset()
    return url


@pytest.fixture
def remote_incomplete(s3, s3_uploaded, unindexed, aws_env) -> str:  # type: ignore[no-untyped-def]
    """``unindexed`` uploaded without its shard ``shard-000001`` and without
    its manifest (as a pack job leaves it when the part that packs that
    shard never ran): its URL."""
    url = f"s3://{s3_uploaded}/incomplete-{uuid.uuid4().hex[:8]}"
    store, root = open_url(url)
    for path in sorted(unindexed.rglob("*")):
        if path.is_file() and path.stem != "shard-000001" and path.name != MANIFEST_NAME:
            store.put_sync(store.join(root, path.relative_to(unindexed).as_posix()), path)
    s3.reset()
    return url
