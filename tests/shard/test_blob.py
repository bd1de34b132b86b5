"""Blob handles: zero-copy over the memory map, sub-range reads, file-like behaviour."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from helpers import rss_kib

from streamer import open_dataset
from streamer.errors import DataError

BIG = 200 * 1024 * 1024


@pytest.fixture(scope="module")
def big_blob_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One 200 MB episode (the bytes are a counter pattern, not audio)."""
    root = tmp_path_factory.mktemp("big")
    (root / "audio").mkdir()
    values = np.arange(BIG // 4, dtype=np.uint32).view(np.uint8)
    offsets = np.array([0, 1000, 1000 + BIG - 2000], dtype=np.int64)
    audio = pa.LargeBinaryArray.from_buffers(
        pa.large_binary(), 2, [None, pa.py_buffer(offsets), pa.py_buffer(values)]
    )
    table = pa.table({"__key__": ["small", "big"], "audio": audio})
    schema = table.schema.with_metadata({"batch_size": "2"})
    with pa.ipc.new_file(str(root / "audio" / "s.wsds"), schema) as writer:
        writer.write_table(table)
    del values, audio, table
    return root


def test_blob_views_point_into_the_mapping(big_blob_dataset: Path) -> None:
    shard = open_dataset(big_blob_dataset).shard("s")
    blob = shard.blob("audio", 1)
    view = blob.read_range(12_345, 4096)
    address = np.frombuffer(view, dtype=np.uint8).ctypes.data
    base, size = shard.reader.base_address, shard.reader.size_sync()
    assert base <= address and address + 4096 <= base + size
    assert address == base + blob.offset + 12_345
    expected = np.arange(BIG // 4, dtype=np.uint32).view(np.uint8)[1000 + 12_345 :][:4096]
    assert bytes(view) == expected.tobytes()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_reading_64k_of_a_200mb_blob_touches_about_64k(big_blob_dataset: Path) -> None:
    dataset = open_dataset(big_blob_dataset)
    before = rss_kib()
    blob = dataset.blob("big")
    chunk = bytes(blob.read_range(BIG // 2, 64 * 1024))
    grown_kib = rss_kib() - before
    assert len(chunk) == 64 * 1024 and blob.length == BIG - 2000
    # Opening the shard, mapping the file and reading 64 KiB: well under 4 MiB.
    # Materialising the cell (column[j].as_py()) would cost the whole 200 MB.
    assert grown_kib < 4 * 1024, f"resident memory grew by {grown_kib} KiB"


def test_file_like_reads_seeks_and_tells(packed: Path) -> None:
    dataset = open_dataset(packed)
    key = next(dataset.keys())
    blob = dataset.blob(key)
    data = bytes(blob.view())
    assert blob.read(10) == data[:10] and blob.tell() == 10
    assert blob.seek(-4, io.SEEK_END) == len(data) - 4
    assert blob.read() == data[-4:] and blob.read(5) == b""
    blob.seek(100)
    assert blob.seek(20, io.SEEK_CUR) == 120
    buffer = bytearray(8)
    assert blob.readinto(buffer) == 8 and bytes(buffer) == data[120:128]
    blob.seek(len(data) + 10)
    assert blob.read(3) == b""
    assert isinstance(blob.read(1), bytes)  # PyAV needs bytes, not views
    assert blob.seekable() and blob.readable()


def test_sub_range_outside_the_blob_names_shard_key_and_offset(packed: Path) -> None:
    dataset = open_dataset(packed)
    key = next(dataset.keys())
    blob = dataset.blob(key)
    with pytest.raises(DataError) as caught:
        blob.read_range(blob.length - 2, 10)
    assert caught.value.key == key
    assert caught.value.offset == blob.length - 2
    assert caught.value.shard.endswith(".wsds")


async def _aread(blob, start, length):
    return bytes(await blob.aread_range(start, length))


def test_async_sub_range_matches_sync(packed: Path) -> None:
    import anyio

    dataset = open_dataset(packed)
    blob = dataset.blob(next(dataset.keys()))
    assert anyio.run(_aread, blob, 5, 50) == bytes(blob.read_range(5, 50))
