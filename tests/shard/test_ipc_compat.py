"""IPC files pyarrow reads that streamer must read too, as pyarrow reads them.

The schema comes from the footer (polars writes the head of the file in a
form of its own); both message framings (continuation marker and length,
and the legacy length alone); columns streamer does not need never make a
shard unreadable: a dictionary-encoded column (its record batch buffers are
its indices) and ``string_view`` / ``binary_view`` columns (their variadic
data buffers, counted per batch in ``variadicBufferCounts``) are skipped
over exactly, ``__key__`` as ``string_view`` is read, audio as
``binary_view`` (polars' default) is served by its views, and a needed column
of a type that cannot be served is a ``ShardError`` naming the column, its
type and the shard.

``data/polars-*.arrow`` were written by polars 2.1 ``DataFrame.write_ipc``
(uncompressed; ``compat_level=oldest``: ``large_string`` / ``large_binary``;
default: ``string_view`` / ``binary_view``), with a categorical ``lang``
column, from ``__key__`` ``["a", "b", "episode-with-a-key-longer-than-
twelve-bytes"]``, ``note`` ``["x", "a note longer than twelve bytes",
None]`` and ``audio`` ``[bytes(range(40)), b"", b"\\xff" * 100]``.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from helpers import pack_audio

from streamer import open_dataset
from streamer.cli import main
from streamer.errors import ShardError
from streamer.shard import Shard
from streamer.storage.local import MemoryReader

DATA = Path(__file__).parent / "data"
URL = "memory://compat/audio/s.wsds"
#: Keys past 12 bytes: a string_view keeps them in variadic data buffers.
KEYS = [f"episode-{n:03d}-with-a-long-key" for n in range(7)]
BLOBS = [bytes([n]) * (20 + 13 * n) for n in range(7)]


def ipc_file(table: pa.Table, rows_per_batch: int = 3, **options: object) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema, options=pa.ipc.IpcWriteOptions(**options)) as writer:
        writer.write_table(table, max_chunksize=rows_per_batch)
    return sink.getvalue().to_pybytes()


def check_reads_as_pyarrow(data: bytes, audio: str = "audio") -> Shard:
    """Keys and every blob as pyarrow reads them."""
    expected = pa.ipc.open_file(pa.py_buffer(data)).read_all()
    shard = Shard(MemoryReader(data, url=URL))
    assert shard.schema == expected.schema
    assert shard.num_rows == expected.num_rows
    assert shard.keys.to_pylist() == expected.column("__key__").to_pylist()
    cells = expected.column(audio).to_pylist()
    assert [bytes(shard.blob(audio, row).view()) for row in range(shard.num_rows)] == cells
    return shard


def long_strings(n: int) -> list[str | None]:
    """Short ones (inline in a view), long ones, a null."""
    return [None if i == 2 else ("x" * (3 + 9 * i)) for i in range(n)]


def chunked(values: list, kind: pa.DataType) -> pa.ChunkedArray:  # type: ignore[type-arg]
    """``values`` in chunks of 3 built apart, as ``ipc_file`` writes batches:
    a string_view chunk of short strings has no data buffer, the others one
    each, so the columns after it sit at other buffer numbers batch by batch."""
    return pa.chunked_array(
        [
            pa.array(
                values[i : i + 3], pa.string() if kind == pa.string_view() else pa.binary()
            ).cast(kind)
            for i in range(0, len(values), 3)
        ]
    )


def test_a_dictionary_column_beside_the_audio() -> None:
    lang = pa.array(["en", "fr", "en", "de", None, "fr", "en"]).dictionary_encode()
    table = pa.table({"__key__": KEYS, "lang": lang, "audio": pa.array(BLOBS, pa.binary())})
    shard = check_reads_as_pyarrow(ipc_file(table))
    with pytest.raises(
        ShardError, match=r"'lang' is dictionary<values=string.*dictionary"
    ) as caught:
        shard.column("lang")
    assert caught.value.shard == URL


def test_nested_dictionary_and_view_columns_before_the_audio() -> None:
    # The buffers of the columns before the audio decide where its buffers
    # are: a list of dictionaries and a struct holding a string_view.
    labels = pa.array([["a", "b"], [], None, ["c"], ["a"], ["bbbbbbbbbbbbbbbbbbbb"], ["c"]])
    labels = pa.ListArray.from_arrays(
        labels.offsets, labels.values.dictionary_encode(), mask=labels.is_null()
    )
    notes = pa.StructArray.from_arrays(
        [pa.array(long_strings(7), pa.string_view()), pa.array(range(7), pa.int16())],
        names=["text", "n"],
    )
    table = pa.table(
        {
            "labels": labels,
            "notes": notes,
            "__key__": KEYS,
            "audio": pa.array(BLOBS, pa.large_binary()),
        }
    )
    shard = check_reads_as_pyarrow(ipc_file(table))
    assert shard.column("notes").to_pylist() == table.column("notes").to_pylist()
    with pytest.raises(ShardError, match="'labels' is list<item: dictionary"):
        shard.column("labels")


@pytest.mark.parametrize("kind", [pa.string_view(), pa.binary_view()])
def test_a_view_column_beside_the_audio_is_read(kind: pa.DataType) -> None:
    values = long_strings(7)
    if kind == pa.binary_view():
        values = [None if s is None else s.encode() for s in values]
    table = pa.table({"__key__": KEYS, "lang": chunked(values, kind), "audio": BLOBS})
    data = ipc_file(table)
    shard = check_reads_as_pyarrow(data)
    counts = [batch.variadic_counts for batch in shard.layout.batches]
    assert len(set(map(tuple, counts))) > 1  # the slots differ from batch to batch
    assert shard.column("lang").to_pylist() == table.column("lang").to_pylist()


def test_a_string_view_key_is_read() -> None:
    table = pa.table(
        {
            "__key__": chunked([*KEYS[:3], "k3", "k4", "k5", KEYS[6]], pa.string_view()),
            "audio": BLOBS,
        }
    )
    shard = check_reads_as_pyarrow(ipc_file(table))
    assert shard.keys.type == pa.string()


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_binary_view_audio_is_read_as_pyarrow_reads_it(compression: str | None) -> None:
    """Cells inline in their views (up to 12 bytes: empty too), in several
    data buffers of a batch, a null one, each batch's views apart."""
    cells = [b"", b"abc", b"\x01" * 12, b"\x02" * 13, *BLOBS, bytes(range(256)) * 700, None]
    keys = [f"k{n}" for n in range(len(cells))]
    chunks = [pa.array(cells[i : i + 4], pa.binary_view()) for i in range(0, len(cells), 4)]
    data_buffers = [len(chunk.buffers()) - 2 for chunk in chunks]
    assert max(data_buffers) > 1 and min(data_buffers) == 0  # buffers vary per batch
    table = pa.table({"__key__": keys, "audio": pa.chunked_array(chunks)})
    data = ipc_file(table, rows_per_batch=4, compression=compression)
    expected = pa.ipc.open_file(pa.py_buffer(data)).read_all()
    shard = Shard(MemoryReader(data, url=URL))
    for row, cell in enumerate(expected.column("audio").to_pylist()):
        if cell is None:
            with pytest.raises(ShardError, match="'audio' is null"):
                shard.blob("audio", row)
        else:
            assert bytes(shard.blob("audio", row).view()) == cell, row


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("buffer", 7, "'audio' cell is in data buffer 7 of 1"),
        ("offset", 1 << 30, "'audio' cell \\[1073741824, .* lies outside its values"),
        ("length", -5, "'audio' cell has length -5"),
    ],
)
def test_a_corrupt_binary_view_names_shard_and_key(field: str, value: int, message: str) -> None:
    table = pa.table({"__key__": KEYS, "audio": pa.array(BLOBS, pa.binary_view())})
    data = bytearray(ipc_file(table, rows_per_batch=7))
    shard = Shard(MemoryReader(bytes(data), url=URL))
    views, _ = shard.layout.batches[0].buffers[shard._slots[0]["audio"].first_buffer + 1]
    at = views + 16 * 5 + {"length": 0, "buffer": 8, "offset": 12}[field]
    data[at : at + 4] = value.to_bytes(4, "little", signed=True)
    with pytest.raises(ShardError, match=message) as caught:
        Shard(MemoryReader(bytes(data), url=URL)).blob("audio", 5)
    assert (caught.value.shard, caught.value.key) == (URL, KEYS[5])


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_the_legacy_message_framing(compression: str | None) -> None:
    table = pa.table(
        {
            "__key__": pa.array(KEYS, pa.string_view()),
            "lang": pa.array(["en"] * 7).dictionary_encode(),
            "audio": pa.array(BLOBS, pa.large_binary()),
        }
    )
    data = ipc_file(table, use_legacy_format=True, compression=compression)
    # No continuation marker before the first message's length.
    assert data[8:12] != b"\xff\xff\xff\xff"
    check_reads_as_pyarrow(data)


@pytest.mark.parametrize("name", ["polars-oldest", "polars-default"])
def test_files_written_by_polars(name: str) -> None:
    data = (DATA / f"{name}.arrow").read_bytes()
    expected = pa.ipc.open_file(pa.py_buffer(data)).read_all()
    shard = Shard(MemoryReader(data, url=URL))
    assert shard.schema == expected.schema
    assert shard.keys.to_pylist() == ["a", "b", "episode-with-a-key-longer-than-twelve-bytes"]
    assert shard.column("note").to_pylist() == expected.column("note").to_pylist()
    with pytest.raises(ShardError, match="'lang' is dictionary"):
        shard.column("lang")
    blobs = [bytes(shard.blob("audio", row).view()) for row in range(3)]
    assert blobs == expected.column("audio").to_pylist()


def test_a_sibling_column_dir_with_dictionary_and_view_columns(tmp_path: Path) -> None:
    def write(path: Path, table: pa.Table) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(ipc_file(table))

    write(tmp_path / "audio" / "s.wsds", pa.table({"__key__": KEYS, "audio": BLOBS}))
    labels = {
        "__key__": KEYS,
        "lang": pa.array(["en", "fr"] * 3 + ["en"]).dictionary_encode(),
        "text": pa.array(long_strings(7), pa.string_view()),
        "speaker": [f"s{n}" for n in range(7)],
    }
    write(tmp_path / "labels" / "s.wsds", pa.table(labels))
    dataset = open_dataset(tmp_path)
    assert len(dataset) == 7 and not dataset.bad_shards
    shard = dataset.shard("s", "labels")
    assert shard.column("speaker").to_pylist() == labels["speaker"]
    assert shard.column("text").to_pylist() == long_strings(7)


@pytest.mark.parametrize("legacy", [False, True])
def test_an_ipc_stream_is_refused_as_a_stream(legacy: bool) -> None:
    """Hugging Face datasets' ``.arrow`` files are IPC streams: no footer
    locates a cell's bytes, and the error says what the file is."""
    table = pa.table({"__key__": ["a", "b"], "audio": pa.array([b"x", b"yy"], pa.binary())})
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(use_legacy_format=legacy)
    with pa.ipc.new_stream(sink, table.schema, options=options) as writer:
        writer.write_table(table)
    data = sink.getvalue().to_pybytes()
    expected = "not an IPC file" if not legacy else "no ARROW1 trailer"
    with pytest.raises(ShardError, match=expected):
        Shard(MemoryReader(data, url="mem://stream.arrow"))


@pytest.mark.filterwarnings("ignore::streamer.errors.CompressedShardWarning")
@pytest.mark.parametrize("compression", [None, "zstd"])
def test_a_dataset_of_binary_view_audio_serves_the_same_crops(
    tmp_path: Path, compression: str | None
) -> None:
    """The audio shard rewritten as polars writes it by default (a
    ``binary_view`` audio column), then indexed: the same exact crops.
    (Such a shard was skipped: "'audio' is binary_view, not binary or
    large_binary".)"""
    packed = pack_audio(tmp_path / "packed", {"a": ("flac", 44100, 2), "b": ("mp3", 44100, 1)}, 3.0)
    root = tmp_path / "views"
    (root / "audio").mkdir(parents=True)
    (name,) = os.listdir(Path(packed.root) / "audio")
    table = pa.ipc.open_file(Path(packed.root) / "audio" / name).read_all()
    views = table.set_column(1, "audio", table.column("audio").cast(pa.binary_view()))
    (root / "audio" / name).write_bytes(ipc_file(views, compression=compression))
    assert main(["index", str(root), "--workers", "1", "--no-progress"]) == 0
    dataset = open_dataset(root)
    assert not dataset.bad_shards and len(dataset) == 2
    for key in ("a", "b"):
        assert dataset.seek_index(key).verdict == "verified"
        for start in (0.0, 1.3, 2.5):
            got, want = (
                dataset.read_crop(key, start, start + 0.5),
                packed.read_crop(key, start, start + 0.5),
            )
            assert np.array_equal(got, want), (key, start)
