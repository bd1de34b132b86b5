"""Shard metadata already read serves every later read: planning a crop of
an open shard asks its reader for nothing (for a remote shard each call is
a hop to the store loop and back, even when it reads nothing)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from stores import MappedStore

from streamer.dataset import Dataset
from streamer.decode.crop import CropRequest, prepare
from streamer.storage.base import RangeReader
from streamer.storage.local import LocalFileReader


class CountingReader(RangeReader):
    """A local file whose every call for bytes is counted."""

    def __init__(self, path: str, calls: list[str]) -> None:
        self._file = LocalFileReader(path)
        self.url = path
        self.calls = calls

    async def size(self) -> int:
        return self._file.size_sync()

    async def read(self, offset: int, length: int) -> memoryview:
        self.calls.append("read")
        return self._file.read_sync(offset, length)

    def size_sync(self) -> int:
        return self._file.size_sync()

    def read_sync(self, offset: int, length: int) -> memoryview:
        self.calls.append("read_sync")
        return self._file.read_sync(offset, length)

    def fetch_many_sync(self, ranges: Sequence[tuple[int, int]]) -> list[memoryview]:
        self.calls.append("fetch_many_sync")
        return [self._file.read_sync(offset, length) for offset, length in ranges]


class CountingStore(MappedStore):
    url = "counting://"

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def reader(self, path: str, size: int | None = None) -> RangeReader:
        return CountingReader(path, self.calls)


def test_planning_crops_of_an_open_shard_reads_nothing(packed: Path) -> None:
    store = CountingStore()
    dataset = Dataset(packed, store=store)
    keys = sorted(dataset.keys())
    for key in keys:  # opens every shard and reads each episode's index row once
        prepare(dataset.episode(key), CropRequest(key, 0.1, 0.4))
    assert store.calls  # the shards were read through the counting readers
    store.calls.clear()
    for key in keys * 3:
        job = prepare(dataset.episode(key), CropRequest(key, 0.2, 0.5))
        assert job.plan is not None
    assert store.calls == []
