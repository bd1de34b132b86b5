"""Shard metadata already read serves every later read: planning a crop of
an open shard asks its reader for nothing (for a remote shard each call is
a hop to the store loop and back, even when it reads nothing)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from stores import MappedStore

from streamer.dataset import Dataset
from streamer.decode.crop import CropRequest, prepare
from streamer.shard.footer import Pieces, read_layout
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


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 60), st.integers(0, 30)), max_size=25), st.data())
def test_a_range_inside_any_piece_added_is_served_from_it(
    added: list[tuple[int, int]], data: st.DataObject
) -> None:
    """Pieces nested, overlapping, repeated and in any order: a range is
    served, with the object's bytes, exactly when some piece added holds it."""
    whole = bytes(range(100))
    pieces = Pieces()
    for offset, length in added:
        pieces.add(offset, memoryview(whole)[offset : offset + length])
    for _ in range(20):
        offset, length = data.draw(st.integers(0, 95)), data.draw(st.integers(1, 40))
        held = any(o <= offset and offset + length <= o + n for o, n in added)
        view = pieces.get(offset, length)
        assert (view is not None) == held
        assert view is None or bytes(view) == whole[offset : offset + length]


@pytest.mark.timeout(120)
def test_a_shard_of_twenty_thousand_record_batches_opens(tmp_path: Path) -> None:
    """A writer that flushes a batch per row: opening the shard looked each
    batch's bytes up among all those read before (a hang: past 300 s)."""
    path = tmp_path / "many.arrow"
    schema = pa.schema([("__key__", pa.string()), ("audio", pa.binary())])
    with pa.ipc.new_file(str(path), schema) as writer:
        for row in range(20_000):
            writer.write_batch(
                pa.record_batch([pa.array([f"k{row}"]), pa.array([b"x"])], schema=schema)
            )
    layout, _ = read_layout(LocalFileReader(str(path)), "many.arrow")
    assert len(layout.batches) == 20_000
