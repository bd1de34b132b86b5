"""seek_index/ on disk: Arrow round-trip, zero-copy reads, the build and the CLI."""

from __future__ import annotations

import dataclasses
import io
import os

import numpy as np
import pyarrow as pa
import pytest
from _index_support import assert_same_index, encoded

import streamer
from streamer.cli import main
from streamer.decode.verify import choose_index
from streamer.errors import ShardError
from streamer.formats import extract
from streamer.index import INDEX_DIR, IndexReader, SeekIndex
from streamer.index.table import CONTENT_TYPE, row_checksum, to_struct_array
from streamer.shard import Shard
from streamer.write.index import SCHEMA, build_index, select_shards
from streamer.write.pack import pack


def test_round_trip_and_zero_copy(tmp_path) -> None:
    indexes = [
        extract(io.BytesIO(encoded("mp3", 44100, 1))),
        SeekIndex.unavailable("unknown container"),
        extract(io.BytesIO(encoded("aac", 48000, 2))),
    ]
    path = str(tmp_path / "seek_index" / "s.wsds")
    os.makedirs(os.path.dirname(path))
    keys = pa.array(["a", "b", "c"])
    with pa.ipc.new_file(path, SCHEMA) as writer:
        lengths = pa.array([100, 200, 300])
        crcs = pa.array([[7, 2**32 - 1], None, []], CONTENT_TYPE)
        sizes = pa.array([3, None, 1], pa.int64())
        spans = pa.array([[5, 2**32 - 2], [1], None], CONTENT_TYPE)
        # row CRCs as the builder computes them
        read_back = [
            dataclasses.replace(
                index,
                content_crc=np.asarray(crc or [], np.uint32),
                span_size=size if size and span else 0,
                span_crc=np.asarray(span if size and span else [], np.uint32),
            )
            for index, crc, size, span in zip(
                indexes, crcs.to_pylist(), sizes.to_pylist(), spans.to_pylist(), strict=True
            )
        ]
        checksums = [
            row_checksum(key, index, length)
            for key, index, length in zip(
                keys.to_pylist(), read_back, lengths.to_pylist(), strict=True
            )
        ]
        columns = [
            keys,
            to_struct_array(indexes),
            lengths,
            crcs,
            sizes,
            spans,
            pa.array(checksums, pa.uint32()),
        ]
        writer.write_batch(pa.record_batch(columns, schema=SCHEMA))
    shard = Shard(path)
    reader = IndexReader(shard)
    assert [reader.built_for(row) for row in range(3)] == [100, 200, 300]
    assert [reader.read(row).content_crc.tolist() for row in range(3)] == [[7, 2**32 - 1], [], []]
    # span CRCs only where a row records both its span size and its CRCs
    assert [reader.read(row).span_crc.tolist() for row in range(3)] == [[5, 2**32 - 2], [], []]
    assert [reader.read(row).span_size for row in range(3)] == [3, 0, 0]
    for row, expected in enumerate(indexes):
        got = reader.read(row)
        assert_same_index(got, expected)
    points = reader.read(2).sample_pos
    assert not points.flags.writeable and not points.flags.owndata
    start = points.__array_interface__["data"][0] - shard.reader.base_address
    assert 0 <= start < os.path.getsize(path)  # a view onto the memory map

    # The last row's CRC one bit off: that row fails (each time), the others read.
    wrong = str(tmp_path / "seek_index" / "t.wsds")
    checksums[2] ^= 1
    with pa.ipc.new_file(wrong, SCHEMA) as writer:
        columns[-1] = pa.array(checksums, pa.uint32())
        writer.write_batch(pa.record_batch(columns, schema=SCHEMA))
    reader = IndexReader(Shard(wrong))
    for _ in range(2):
        with pytest.raises(ShardError, match="does not match its 'row_crc'") as caught:
            reader.read(2)
        assert caught.value.key == "c"
    assert_same_index(reader.read(0), indexes[0])


def test_pack_builds_the_index(index_sources, tmp_path) -> None:
    report = pack(index_sources, tmp_path / "ds", shard_size=20_000, batch_size=2, progress=False)
    assert report.index is not None and report.index.reasons == {
        "chained ogg streams of different formats; generic: FFmpeg cannot read it": 1
    }
    dataset = streamer.open_dataset(tmp_path / "ds")
    assert sorted(os.listdir(tmp_path / "ds" / INDEX_DIR)) == sorted(
        os.listdir(tmp_path / "ds" / "audio")
    )
    for key in list(dataset.keys()):
        stored = dataset.seek_index(key)
        # What the indexer stores: the first candidate that passes its check.
        assert_same_index(stored, choose_index(dataset.blob(key)).index)
    assert dataset.seek_index("chained").reason.startswith(
        "chained ogg streams of different formats; generic: FFmpeg cannot read it"
    )
    assert dataset.seek_index("flac1").codec == "flac"


def test_pack_without_index(index_sources, tmp_path) -> None:
    pack(index_sources, tmp_path / "ds", progress=False, index=False)
    assert not (tmp_path / "ds" / INDEX_DIR).exists()


def test_cli_skips_indexed_shards_and_splits_work(index_sources, tmp_path, capsys) -> None:
    out = tmp_path / "ds"
    assert (
        main(
            [
                "pack",
                str(index_sources),
                str(out),
                "--shard-size",
                "20000",
                "--batch-size",
                "2",
                "--no-progress",
                "--no-index",
            ]
        )
        == 0
    )
    names = streamer.open_dataset(out).shard_names
    assert len(names) >= 3
    capsys.readouterr()
    assert main(["index", str(out), "--shards", "0/2", "--no-progress", "--workers", "2"]) == 0
    first = sorted(os.listdir(out / INDEX_DIR))
    assert first == sorted(n + ".wsds" for n in names[0::2])
    assert main(["index", str(out), "--no-progress", "--workers", "1"]) == 0
    text = capsys.readouterr().out
    assert f"({len(names[0::2])} already indexed)" in text
    # The counts are this run's; the shards left alone are counted apart.
    dataset = streamer.open_dataset(out)
    done, left = names[1::2], names[0::2]
    this_run = sum(dataset.shard(n).num_rows for n in done)
    assert f"indexed {len(done)} shards ({len(left)} already indexed), {this_run} episodes" in text
    episodes_left = sum(dataset.shard(n).num_rows for n in left)
    assert f"left as they are: {len(left)} shards already indexed, {episodes_left} episodes" in text
    assert ("no index (1): chained ogg streams" in text) == (dataset.locate("chained")[0] in done)
    before = os.path.getmtime(out / INDEX_DIR / (names[1] + ".wsds"))
    assert main(["index", str(out), "--shards", names[1], "--force", "--no-progress"]) == 0
    assert os.path.getmtime(out / INDEX_DIR / (names[1] + ".wsds")) >= before
    assert not [n for n in os.listdir(out / INDEX_DIR) if n.startswith(".")]


def test_select_shards() -> None:
    names = ["a", "b", "c", "d", "e"]
    assert select_shards(names, "1/2") == ["b", "d"]
    assert select_shards(names, "e,a") == ["e", "a"]
    assert select_shards(names, None) == names
    with pytest.raises(streamer.StreamerError):
        select_shards(names, "2/2")
    with pytest.raises(streamer.StreamerError):
        select_shards(names, "a,zz")
    for empty in ("", ",", " , "):  # names no shard: not every one, nor none
        with pytest.raises(streamer.StreamerError, match="a comma list of shard names"):
            select_shards(names, empty)


def test_build_index_report(index_sources, tmp_path) -> None:
    pack(index_sources, tmp_path / "ds", progress=False, index=False)
    report = build_index(tmp_path / "ds", progress=False)
    assert (report.episodes, report.ok) == (11, 10)
