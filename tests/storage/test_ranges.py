"""Every store returns exactly the asked bytes: sync, async, batched, suffix."""

from __future__ import annotations

import asyncio
from pathlib import Path

import fsspec
import numpy as np
import pytest
from helpers import S3_KINDS, servers

from streamer.errors import StorageError
from streamer.storage import LocalFileReader, RangeReader

BLOCK = 64 * 1024


@pytest.fixture(params=servers("local", *S3_KINDS, "http", "memory"))
def reader(request, storage_root: Path, http, s3_servers, s3_uploaded, make_store) -> RangeReader:  # type: ignore[no-untyped-def]
    """A reader of ``random.bin`` through each kind of store (small blocks),
    S3 through each implementation."""
    kind = request.param
    if kind == "local":
        return LocalFileReader(storage_root / "random.bin")
    if kind in S3_KINDS:
        store = make_store("s3", s3_servers(kind).url, block_size=BLOCK)
        return store.reader(f"{s3_uploaded}/random.bin")
    if kind == "http":
        return make_store("http", block_size=BLOCK).reader(f"{http.url}/random.bin")
    fsspec.filesystem("memory").pipe(
        "/ranges/random.bin", (storage_root / "random.bin").read_bytes()
    )
    return make_store("memory", block_size=BLOCK).reader("/ranges/random.bin")


def ranges(size: int) -> list[tuple[int, int]]:
    rng = np.random.default_rng(3)
    edges = [
        (0, 1),
        (0, 0),
        (BLOCK - 1, 2),
        (BLOCK, BLOCK),
        (size - 1, 1),
        (size - 5000, 5000),
        (3 * BLOCK - 10, 2 * BLOCK + 20),
        (0, size),
    ]
    randoms = [
        (int(o), int(rng.integers(0, min(300_000, size - o)))) for o in rng.integers(0, size, 12)
    ]
    return edges + randoms


def test_ranges_are_byte_identical(reader: RangeReader, storage_root: Path) -> None:
    data = (storage_root / "random.bin").read_bytes()
    assert reader.size_sync() == len(data)
    for offset, length in ranges(len(data)):
        assert bytes(reader.read_sync(offset, length)) == data[offset : offset + length]


def test_async_and_batched_reads(reader: RangeReader, storage_root: Path) -> None:
    data = (storage_root / "random.bin").read_bytes()
    wanted = ranges(len(data))

    async def main() -> tuple[list[memoryview], list[memoryview], int]:
        singles = await asyncio.gather(*(reader.read(o, n) for o, n in wanted))
        return list(singles), await reader.read_many(wanted), await reader.size()

    singles, batched, size = asyncio.run(main())
    expected = [data[o : o + n] for o, n in wanted]
    assert size == len(data)
    assert [bytes(v) for v in singles] == expected == [bytes(v) for v in batched]
    assert [bytes(v) for v in reader.fetch_many_sync(wanted[:6])] == expected[:6]


def test_tail_reads(reader: RangeReader, storage_root: Path) -> None:
    data = (storage_root / "random.bin").read_bytes()
    start, tail = reader.read_tail_sync(1000)
    assert (start, bytes(tail)) == (len(data) - 1000, data[-1000:])
    start, tail = reader.read_tail_sync(10 * len(data))
    assert (start, bytes(tail)) == (0, data)


def test_out_of_range_reads_fail_clearly(reader: RangeReader) -> None:
    size = reader.size_sync()
    for offset, length in ((size, 1), (-1, 2), (size - 2, 3)):
        with pytest.raises(StorageError, match=r"outside .*random\.bin"):
            reader.read_sync(offset, length)
