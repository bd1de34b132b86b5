"""Crops over S3 (moto) and HTTP are the local crops, for a fraction of the bytes."""

from __future__ import annotations

from pathlib import Path

import anyio
import numpy as np
import pytest

from streamer import open_dataset


def test_remote_crops_equal_local_ones_and_fetch_only_their_plan(
    remote, storage_root: Path
) -> None:  # type: ignore[no-untyped-def]
    open_remote, _ = remote
    local = open_dataset(storage_root / "packed")
    block = 16384
    dataset = open_remote("packed", block_size=block, coalesce_gap=0)
    for key in local:
        dataset.seek_index(key), dataset.blob(key)  # open the shards: metadata only
        for start, end in [(0.0, 0.5), (1.7, 2.4)]:
            fetched_before = dataset.store.stats.bytes_fetched
            planned_before = dataset.decode_stats.planned_bytes
            got = dataset.read_crop(key, start, end)
            np.testing.assert_array_equal(got, local.read_crop(key, start, end))
            fetched = dataset.store.stats.bytes_fetched - fetched_before
            planned = dataset.decode_stats.planned_bytes - planned_before
            # The plan's ranges, rounded out to whole blocks (at most two
            # partial blocks per range, and header, probe and data ranges).
            assert fetched <= planned + 2 * block * 4, (key, fetched, planned)
    assert dataset.decode_stats.fallback == 0 and dataset.decode_stats.unplanned_reads == 0


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_async_remote_crop(remote, storage_root: Path, backend: str) -> None:  # type: ignore[no-untyped-def]
    open_remote, _ = remote
    local = open_dataset(storage_root / "packed")
    dataset = open_remote("packed")
    key = next(iter(local))

    async def main() -> np.ndarray:
        return await dataset.aread_crop(key, 1.0, 2.0, 16000, True)

    got = anyio.run(main, backend=backend)
    np.testing.assert_array_equal(got, local.read_crop(key, 1.0, 2.0, 16000, True))
