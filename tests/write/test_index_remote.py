"""``streamer index`` on remote datasets: S3 (moto) gets the same index a local
run builds, skips and splits work the same way; HTTP is refused up front."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

import fsspec
import pytest
from _index_support import assert_same_index
from helpers import SECRET

import streamer
from streamer.cli import main
from streamer.dataset.dataset import INFO_DIR
from streamer.dataset.manifest import MANIFEST_NAME
from streamer.index import INDEX_DIR
from streamer.storage import open_url
from streamer.write.index import build_index
from streamer.write.pack import pack


@pytest.fixture(scope="module")
def unindexed(index_sources: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``index_sources`` packed into four shards without ``seek_index/``."""
    out = tmp_path_factory.mktemp("unindexed") / "ds"
    pack(index_sources, out, shard_size=20_000, batch_size=2, progress=False, index=False)
    return out


@pytest.fixture(scope="module")
def reference(unindexed: Path, tmp_path_factory: pytest.TempPathFactory) -> streamer.Dataset:
    """The same dataset indexed locally: what every remote build must equal."""
    copy = tmp_path_factory.mktemp("reference") / "ds"
    shutil.copytree(unindexed, copy)
    build_index(copy, progress=False)
    return streamer.open_dataset(copy)


@pytest.fixture
def s3_dataset(s3, s3_uploaded, unindexed, monkeypatch) -> str:  # type: ignore[no-untyped-def]
    """``unindexed`` uploaded under a fresh prefix; AWS credentials in the environment."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test-key-id")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    url = f"s3://{s3_uploaded}/unindexed-{uuid.uuid4().hex[:8]}"
    store, root = open_url(url, endpoint_url=s3.url)
    for path in sorted(unindexed.rglob("*")):
        if path.is_file():
            store.put_sync(store.join(root, path.relative_to(unindexed).as_posix()), path)
    s3.reset()
    return url


def info_rewrites(unindexed: Path, reference: streamer.Dataset, bucket_path: str) -> dict[str, str]:
    """Shard name -> the ``audio_info`` PUT indexing makes: the shards whose
    durations the index makes exact (the AAC and Opus files' headers are
    off by a frame and the pre-skip), as the local run rewrote them."""
    local = Path(reference.url)
    return {
        name: f"/{bucket_path}/{INFO_DIR}/{name}.wsds"
        for name in reference.shard_names
        if (local / INFO_DIR / f"{name}.wsds").read_bytes()
        != (unindexed / INFO_DIR / f"{name}.wsds").read_bytes()
    }


def index_cli(url: str, endpoint: str, *extra: str) -> int:
    return main(["index", url, "--endpoint-url", endpoint, "--no-progress", *extra])


def puts(server) -> list[str]:  # type: ignore[no-untyped-def]
    return sorted(r.path for r in server.requests if r.method == "PUT")


def assert_indexed_like(dataset: streamer.Dataset, reference: streamer.Dataset) -> None:
    assert len(dataset) == len(reference)
    for key in reference:
        assert_same_index(dataset.seek_index(key), reference.seek_index(key))


def test_s3_index_equals_the_local_one(s3, s3_dataset, unindexed, reference, capsys) -> None:  # type: ignore[no-untyped-def]
    assert index_cli(s3_dataset, s3.url, "--workers", "2") == 0
    assert "no index (1): chained ogg streams" in capsys.readouterr().out
    names = reference.shard_names
    bucket_path = s3_dataset.removeprefix("s3://")
    stored = [f"/{bucket_path}/{INDEX_DIR}/{n}.wsds" for n in names]
    info = info_rewrites(unindexed, reference, bucket_path)
    assert info  # the durations of some shards change
    expected = sorted([*info.values(), *stored, f"/{bucket_path}/{MANIFEST_NAME}"])
    assert puts(s3) == expected  # the manifest last
    assert s3.requests[-1].method == "PUT" and s3.requests[-1].path.endswith(MANIFEST_NAME)
    dataset = streamer.open_dataset(s3_dataset, endpoint_url=s3.url)
    assert dataset.manifest is not None
    listed = [e.name for e in dataset.store.list_sync(f"{bucket_path}/{INDEX_DIR}")]
    assert listed == [f"{n}.wsds" for n in names]  # no temporary objects
    assert_indexed_like(dataset, reference)


def test_s3_reruns_skip_split_and_force(s3, s3_dataset, unindexed, reference, capsys) -> None:  # type: ignore[no-untyped-def]
    names = reference.shard_names
    assert len(names) >= 3
    bucket_path = s3_dataset.removeprefix("s3://")
    stored = [f"/{bucket_path}/{INDEX_DIR}/{n}.wsds" for n in names]
    info = info_rewrites(unindexed, reference, bucket_path)
    manifest = f"/{bucket_path}/{MANIFEST_NAME}"

    def written(part: list[str], *, last: bool = True) -> list[str]:
        ours = [info[n] for n in part if n in info]
        index = [f"/{bucket_path}/{INDEX_DIR}/{n}.wsds" for n in part]
        return sorted([*ours, *index, *([manifest] if last else [])])

    # A part that leaves shards unindexed leaves the manifest to the last one.
    assert index_cli(s3_dataset, s3.url, "--shards", "0/2", "--workers", "1") == 0
    assert puts(s3) == written(names[0::2], last=False)
    s3.reset()
    assert index_cli(s3_dataset, s3.url, "--shards", "1/2", "--workers", "1") == 0
    assert puts(s3) == written(names[1::2])
    dataset = streamer.open_dataset(s3_dataset, endpoint_url=s3.url)
    assert set(dataset.manifest.column_dirs[INDEX_DIR]) == set(names)  # type: ignore[union-attr]
    s3.reset()
    s3.reset()
    assert index_cli(s3_dataset, s3.url, "--workers", "1") == 0
    assert f"indexed 0 shards ({len(names)} already indexed)" in capsys.readouterr().out
    assert puts(s3) == []  # nothing new: the manifest already says it all
    assert index_cli(s3_dataset, s3.url, "--force", "--workers", "1") == 0
    assert puts(s3) == stored
    dataset = streamer.open_dataset(s3_dataset, endpoint_url=s3.url)
    assert_indexed_like(dataset, reference)


def test_http_dataset_is_refused_before_any_work(http, capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["index", f"{http.url}/packed", "--no-progress"]) == 2
    error = capsys.readouterr().err
    assert (
        "HTTP stores are read-only (pack into a local or S3 OUT; index a local or S3 copy)" in error
    )
    assert http.requests == []  # refused before listing or reading anything


def test_fsspec_memory_dataset(unindexed, reference) -> None:  # type: ignore[no-untyped-def]
    root = f"/unindexed-{uuid.uuid4().hex[:8]}"
    memory = fsspec.filesystem("memory")
    for path in unindexed.rglob("*"):
        if path.is_file():
            memory.pipe_file(root + "/" + path.relative_to(unindexed).as_posix(), path.read_bytes())
    report = build_index(f"memory://{root}", progress=False)
    assert (report.episodes, report.ok) == (11, 10)
    dataset = streamer.open_dataset(f"memory://{root}")
    assert_indexed_like(dataset, reference)
