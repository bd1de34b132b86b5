"""The IPC footer and record-batch metadata parser under hypothesis.

Real shards (an uncompressed audio shard, a zstd-compressed one with 32-bit
offsets, a ``seek_index/`` shard, one in the legacy framing with
``string_view`` keys and dictionary and ``string_view`` columns) have their
metadata and footer mutated: opening the shard, reading its keys and every
blob cell, and reading every index row raise nothing but ``DataError``
subclasses; the rows a shard
claims are bounded by its bytes (4 bytes of key offsets per row); every
blob lies inside the file; memory stays bounded. Plus the hostile cases the
issue names, one by one, with the error they must give.
"""

from __future__ import annotations

import functools
import io
import struct

import pyarrow as pa
import pytest
from _fuzz import CI, LONG, fuzz, mutated, peak_memory
from _index_support import encoded

from streamer.errors import DataError, ShardError
from streamer.formats import extract
from streamer.index import IndexReader
from streamer.index.checks import check_index
from streamer.index.table import CONTENT_TYPE, to_struct_array
from streamer.shard import Shard
from streamer.shard.footer import read_layout
from streamer.storage.local import MemoryReader
from streamer.write.index import SCHEMA as INDEX_SCHEMA

MEMORY_LIMIT = 16 << 20
URL = "memory://fuzz/audio/s.wsds"


def ipc_file(
    table: pa.Table, rows_per_batch: int, compression: str | None = None, legacy: bool = False
) -> bytes:
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(compression=compression, use_legacy_format=legacy)
    with pa.ipc.new_file(sink, table.schema, options=options) as writer:
        writer.write_table(table, max_chunksize=rows_per_batch)
    return sink.getvalue().to_pybytes()


@functools.cache
def seed(name: str) -> bytes:
    if name == "index":
        indexes = [extract(io.BytesIO(encoded(c, 44100, 1, seconds=0.5))) for c in ("mp3", "flac")]
        keys = pa.array(["a", "b", "c", "d"])
        batch = to_struct_array([*indexes, *indexes])
        lengths = pa.array([1000] * 4, pa.int64())
        crcs = pa.array([[1, 2, 3], [2**32 - 1], None, []], CONTENT_TYPE)
        sizes = pa.array([1, None, 1, 0], pa.int64())
        checksums = pa.array([1, None, 2**32 - 1, 0], pa.uint32())
        columns = [keys, batch, lengths, crcs, sizes, crcs, checksums]
        table = pa.Table.from_arrays(columns, schema=INDEX_SCHEMA)
        return ipc_file(table, 2)
    blobs = [bytes([n]) * (50 + 30 * n) for n in range(5)]
    if name == "views":  # string_view keys and a column, a dictionary column, legacy framing
        keys = pa.array([f"k{n}" + "-long" * n for n in range(5)], pa.string_view())
        lang = pa.array(["en", "fr", None, "en", "de"]).dictionary_encode()
        note = pa.array(["a", None, "a note past twelve bytes", "b", "c" * 20], pa.string_view())
        table = pa.table({"__key__": keys, "lang": lang, "note": note, "audio": blobs})
        return ipc_file(table, 2, legacy=True)
    kind, compression = {
        "audio": (pa.large_binary(), None),
        "zstd": (pa.binary(), "zstd"),
    }[name]
    table = pa.table({"__key__": [f"k{n}" for n in range(5)], "audio": pa.array(blobs, kind)})
    return ipc_file(table, 2, compression)


def metadata_positions(data: bytes) -> list[int]:
    """Every offset outside the record batches' buffers: the magic, schema,
    batch metadata and footer, where the counts, sizes and offsets are."""
    layout, _ = read_layout(MemoryReader(data, url=URL), URL)
    inside = bytearray(len(data))
    for batch in layout.batches:
        for offset, length in batch.buffers:
            inside[offset : offset + length] = b"\x01" * length
    return [at for at in range(len(data)) if not inside[at]]


def shards(name: str):  # type: ignore[no-untyped-def]
    data = seed(name)
    return mutated(data, metadata_positions(data), max_ops=3)


def check_shard(data: bytes) -> None:
    """Only ``DataError`` escapes; whatever opens is bounded by the bytes."""
    with peak_memory() as peak:
        try:
            use(Shard(MemoryReader(data, url=URL)), len(data))
        except DataError as error:
            assert "memory://fuzz/audio/s.wsds" in str(error)
        assert peak() < MEMORY_LIMIT


def use(shard: Shard, size: int) -> None:
    assert 4 * shard.num_rows <= size
    assert len(shard.keys) == shard.num_rows
    if "seek_index" in shard.schema.names:
        reader = IndexReader(shard)
        for row in range(shard.num_rows):
            index = reader.read(row)
            check_index(index, size)
            assert len(index.content_crc) <= size
        return
    for row in range(shard.num_rows):
        blob = shard.blob("audio", row)
        if blob.reader is shard.reader:
            assert blob.offset >= 0 and blob.offset + blob.length <= size
        blob.read_range(0, blob.length)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", ["audio", "zstd", "index", "views"])
def test_mutated_shards_fail_as_data_errors(name: str) -> None:
    fuzz(CI, shards(name), check_shard)


@pytest.mark.slow
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("name", ["audio", "zstd", "index", "views"])
def test_mutated_shards_fail_as_data_errors_long(name: str) -> None:
    fuzz(LONG, shards(name), check_shard)


def rewritten(data: bytes, old: int, new: int, width: int = 8) -> bytes:
    """``data`` with every little-endian ``old`` in the metadata replaced by ``new``."""
    out = bytearray(data)
    needle = old.to_bytes(width, "little")
    for at in metadata_positions(data):
        if out[at : at + width] == needle:
            out[at : at + width] = new.to_bytes(width, "little", signed=new < 0)
    return bytes(out)


def test_a_hostile_row_count_fails_at_open() -> None:
    # The batch's row count and its columns' lengths (7) made 2^40: the key
    # column cannot hold that many rows, so the shard does not open (it used
    # to, and claimed 2^40 rows).
    table = pa.table({"__key__": [f"k{n}" for n in range(7)], "audio": [b"xy"] * 7})
    data = rewritten(ipc_file(table, 7), 7, 1 << 40)
    with pytest.raises(ShardError, match="__key__") as caught:
        Shard(MemoryReader(data, url=URL))
    assert caught.value.shard == URL


def test_a_buffer_outside_its_batch_names_shard_and_offset() -> None:
    data = seed("audio")
    layout, _ = read_layout(MemoryReader(data, url=URL), URL)
    values_offset, _ = layout.batches[0].buffers[-1]
    body = layout.batches[0].buffers[0][0]
    start = values_offset - body
    hostile = rewritten(data, start, start + (1 << 30))
    with pytest.raises(ShardError, match="buffer outside its record batch") as caught:
        Shard(MemoryReader(hostile, url=URL))
    assert caught.value.shard == URL and caught.value.offset is not None


def test_a_cell_outside_its_values_names_its_key() -> None:
    data = bytearray(seed("audio"))
    layout, _ = read_layout(MemoryReader(bytes(data), url=URL), URL)
    offsets_at, _ = layout.batches[0].buffers[4]  # audio: validity, offsets, values
    struct.pack_into("<q", data, offsets_at + 8, 1 << 40)  # end of row 0
    shard = Shard(MemoryReader(bytes(data), url=URL))
    with pytest.raises(ShardError, match="lies outside its values") as caught:
        shard.blob("audio", 0)
    assert caught.value.key == "k0" and caught.value.offset is not None


def test_a_lying_decompressed_size_allocates_nothing() -> None:
    data = bytearray(seed("zstd"))
    layout, _ = read_layout(MemoryReader(bytes(data), url=URL), URL)
    values_at, _ = layout.batches[0].buffers[-1]
    struct.pack_into("<q", data, values_at, 1 << 40)  # the uncompressed length prefix
    shard = Shard(MemoryReader(bytes(data), url=URL))
    with peak_memory() as peak, pytest.raises(ShardError, match="cannot hold") as caught:
        shard.blob("audio", 0)
    assert peak() < 1 << 20
    assert caught.value.offset == values_at


def test_offsets_buffer_of_a_ragged_length() -> None:
    # Found by the fuzzer: an offsets buffer whose length is no multiple of
    # its offsets' width made numpy raise a bare ValueError.
    data = seed("audio")
    layout, _ = read_layout(MemoryReader(data, url=URL), URL)
    body = layout.batches[0].buffers[0][0]
    offsets_at, length = layout.batches[0].buffers[4]
    entry = struct.pack("<qq", offsets_at - body, length)
    assert data.count(entry) == 1
    hostile = data.replace(entry, struct.pack("<qq", offsets_at - body, length - 3))
    shard = Shard(MemoryReader(hostile, url=URL))
    with pytest.raises(ShardError, match="too short") as caught:
        shard.blob("audio", 1)
    assert caught.value.key == "k1"
