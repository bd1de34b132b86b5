"""Remote lazy shards over real servers: what opening costs, and that it reads right."""

from __future__ import annotations

from pathlib import Path

import pytest

from streamer import open_dataset
from streamer.dataset.dataset import Dataset
from streamer.shard.footer import PREFETCH_BYTES, TAIL_BYTES


def test_remote_dataset_matches_local(remote, storage_root: Path) -> None:  # type: ignore[no-untyped-def]
    open_remote, _ = remote
    local = open_dataset(storage_root / "packed")
    dataset = open_remote("packed")
    assert dataset.shard_names == local.shard_names
    assert list(dataset.column_dirs) == list(local.column_dirs)
    assert list(dataset.keys()) == list(local.keys())
    for key in local:
        assert bytes(dataset.blob(key).view()) == bytes(local.blob(key).view())
        assert dataset.info(key) == local.info(key)


def test_opening_a_shard_costs_two_small_requests_and_no_audio(remote, storage_root: Path) -> None:  # type: ignore[no-untyped-def]
    open_remote, server = remote
    dataset = open_remote("big")
    shard = dataset.shard("s")
    stats = dataset.store.stats
    assert stats.requests == len(server.ranged()) == 2
    assert stats.bytes_fetched <= TAIL_BYTES + PREFETCH_BYTES + 1024
    # Nothing but the tail touched the audio values: the second read stops
    # within the prefetch margin after the record batch metadata.
    size = (storage_root / "big" / "audio" / "s.wsds").stat().st_size
    blob = shard.blob("audio", 1)
    assert blob.offset + blob.length > size - TAIL_BYTES  # the blob runs into the tail
    head_end = max(int(r.range.split("-")[1]) for r in server.ranged() if "=-" not in r.range)
    assert head_end < shard.blob("audio", 0).offset + PREFETCH_BYTES
    assert stats.requests == 2  # handles read nothing


def test_each_record_batch_costs_one_metadata_request(remote) -> None:  # type: ignore[no-untyped-def]
    open_remote, _ = remote
    dataset = open_remote("batches")
    shard = dataset.shard("s")
    assert len(shard.layout.batches) == 4
    # The tail holds the last batch's metadata; the other three are fetched
    # concurrently, the first one together with the schema message.
    assert 2 <= dataset.store.stats.requests <= 1 + len(shard.layout.batches)
    assert shard.keys.to_pylist() == ["k0", "k1", "k2", "k3"]


def test_crop_bytes_come_from_the_blob_handle(remote, storage_root: Path) -> None:  # type: ignore[no-untyped-def]
    open_remote, server = remote
    local = open_dataset(storage_root / "big").blob("k1")
    dataset = open_remote("big")
    blob = dataset.blob("k1")
    server.reset()
    assert bytes(blob.read_range(700_000, 50_000)) == bytes(local.read_range(700_000, 50_000))
    assert len(server.ranged()) == 1
    blob.seek(700_010)
    assert blob.read(100) == bytes(local.read_range(700_010, 100))
    assert len(server.ranged()) == 1  # same cached block


def test_open_dataset_by_url(s3, s3_uploaded, storage_root: Path) -> None:  # type: ignore[no-untyped-def]
    from helpers import SECRET

    url = f"s3://{s3_uploaded}/packed"
    options = {"endpoint_url": s3.url, "key": "test-key-id", "secret": SECRET}
    dataset = open_dataset(url, **options, region_name="us-east-1")
    assert dataset.url == url
    assert repr(dataset) == f"Dataset('{url}', shards={len(dataset.shard_names)})"
    assert len(dataset) == len(open_dataset(storage_root / "packed"))
    again = open_dataset(url, **options, region_name="us-east-1")
    assert again.store is dataset.store  # one store (pool, cache, stats) per scheme + options


def test_compressed_remote_shards_still_read_right(http, storage_root, make_store) -> None:  # type: ignore[no-untyped-def]
    import pyarrow as pa

    from streamer.errors import CompressedShardWarning

    table = pa.table(
        {"__key__": ["a", "b"], "audio": pa.array([b"x" * 5000, b"yz" * 3000], pa.large_binary())}
    )
    folder = storage_root / "zstd" / "audio"
    folder.mkdir(parents=True, exist_ok=True)
    options = pa.ipc.IpcWriteOptions(compression="zstd")
    with pa.ipc.new_file(str(folder / "s.wsds"), table.schema, options=options) as writer:
        writer.write_table(table)
    dataset = Dataset(f"{http.url}/zstd", store=make_store("http"))
    with pytest.warns(CompressedShardWarning):
        blob = dataset.blob("b")
    assert bytes(blob.read_range(1, 4)) == b"zyzy"
