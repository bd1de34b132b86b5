"""``index.checks``: an index is trusted only when it is plausible on its own
and agrees with its blob and ``audio_info``; every rejection says why."""

from __future__ import annotations

import dataclasses
import decimal
import io
import itertools
import struct
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from _index_support import encoded
from helpers import write_audio

import streamer
from streamer.errors import ShardError
from streamer.formats import extract
from streamer.index import IndexReader, SeekIndex
from streamer.index.checks import ANOTHER_BLOB, check_against_blob, check_index
from streamer.index.table import CONTENT_TYPE, INDEX_TYPE, to_struct_array
from streamer.shard import Shard
from streamer.write.index import SCHEMA
from streamer.write.pack import pack


@pytest.fixture(scope="module")
def lengths(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Same codec and parameters, different lengths: what a cheap check finds hardest."""
    src = tmp_path_factory.mktemp("lengths")
    for n, (codec, seconds) in enumerate(
        [("mp3", 1.0), ("mp3", 3.0), ("flac", 1.0), ("flac", 3.0), ("opus", 1.0), ("opus", 3.0)]
    ):
        rate = 48000 if codec == "opus" else 44100
        write_audio(src, f"{codec}-{seconds:g}", codec, rate, 1, seconds, seed=n)
    out = tmp_path_factory.mktemp("lengths-ds") / "ds"
    pack(src, out, progress=False)
    return out


def every_episode(*roots: Path) -> list[tuple[SeekIndex, int, dict]]:
    found = []
    for root in roots:
        dataset = streamer.open_dataset(root)
        for key in dataset:
            found.append((dataset.seek_index(key), dataset.blob(key).length, dataset.info(key)))
    return found


def test_every_fresh_index_passes(packed: Path, lengths: Path) -> None:
    episodes = every_episode(packed, lengths)
    assert len(episodes) == 13
    for index, length, info in episodes:
        assert index.ok
        assert check_index(index, length) is None
        assert check_against_blob(index, length, info) is None


def test_every_rotated_row_is_caught(packed: Path, lengths: Path) -> None:
    # Another episode's index with this episode's blob and audio_info: a
    # different codec, rate, channel count, container, length or data range.
    episodes = every_episode(packed, lengths)
    for (index, _, _), (_, length, info) in itertools.permutations(episodes, 2):
        reason = check_against_blob(index, length, info)
        assert reason is not None and reason.startswith(("implausible index", "index disagrees"))


def test_without_audio_info_the_blob_length_still_tells(lengths: Path) -> None:
    dataset = streamer.open_dataset(lengths)
    for codec in ("mp3", "flac", "opus"):
        long_index, short_blob = dataset.seek_index(f"{codec}-3"), dataset.blob(f"{codec}-1")
        reason = check_against_blob(long_index, short_blob.length)
        assert reason == "implausible index: audio data range outside the blob"
    for codec in ("flac", "opus"):  # their audio ends where the file does
        short_index, long_blob = dataset.seek_index(f"{codec}-1"), dataset.blob(f"{codec}-3")
        reason = check_against_blob(short_index, long_blob.length)
        assert reason == "implausible index: audio data does not end where the blob does"
    # An mp3's frames may stop before its end (tags): audio_info tells this one.
    short_index, long_blob = dataset.seek_index("mp3-1"), dataset.blob("mp3-3")
    assert check_against_blob(short_index, long_blob.length, {}) is None
    reason = check_against_blob(short_index, long_blob.length, dataset.info("mp3-3"))
    assert reason == "index disagrees with audio_info: duration"


def test_audio_info_of_another_blob_is_not_believed(lengths: Path) -> None:
    dataset = streamer.open_dataset(lengths)
    index, blob = dataset.seek_index("flac-1"), dataset.blob("flac-1")
    assert check_against_blob(index, blob.length, {"codec": "mp3", "num_bytes": 1}) is None
    reason = check_against_blob(index, blob.length, {"codec": "mp3", "num_bytes": blob.length})
    assert reason == "index disagrees with audio_info: codec"
    # A length that is no integer (another tool's string) records nothing: as without one.
    reason = check_against_blob(index, blob.length, {"codec": "mp3", "num_bytes": "1"})
    assert reason == "index disagrees with audio_info: codec"


def test_an_index_built_from_a_blob_of_another_length_is_not_used(lengths: Path) -> None:
    dataset = streamer.open_dataset(lengths)
    index, length = dataset.seek_index("mp3-3"), dataset.blob("mp3-3").length
    assert check_against_blob(index, length, dataset.info("mp3-3"), length) is None
    reason = check_against_blob(index, length, dataset.info("mp3-3"), length - 3000)
    assert reason == ANOTHER_BLOB


def test_content_crcs_that_do_not_match_the_seek_points_make_the_row_unusable(
    lengths: Path,
) -> None:
    dataset = streamer.open_dataset(lengths)
    index, length = dataset.seek_index("mp3-3"), dataset.blob("mp3-3").length
    assert len(index.content_crc) == len(index.byte_pos)  # an mp3's header is empty
    assert check_against_blob(index, length) is None
    short = dataclasses.replace(index, content_crc=index.content_crc[:-1])
    reason = check_against_blob(short, length)
    assert reason == "implausible index: content CRCs do not match its seek points"


def test_blob_lengths_that_are_not_lengths_make_the_shard_unusable(tmp_path: Path) -> None:
    index = extract(io.BytesIO(encoded("flac", 22050, 1, seconds=0.5)))
    schema = pa.schema([*list(SCHEMA)[:2], pa.field("num_bytes", pa.string())])
    path = tmp_path / "s.wsds"
    with pa.ipc.new_file(str(path), schema) as writer:
        batch = [pa.array(["ep"]), to_struct_array([index]), pa.array(["12"])]
        writer.write_batch(pa.record_batch(batch, schema=schema))
    with pytest.raises(ShardError, match="'num_bytes' is not an int64 column"):
        IndexReader(Shard(path))


@pytest.fixture(scope="module")
def good() -> tuple[SeekIndex, int]:
    data = encoded("mp3", 44100, 1, seconds=2.0)
    return extract(io.BytesIO(data)), len(data)


def shifted(index: SeekIndex, by: int) -> dict[str, np.ndarray]:
    return {"byte_pos": index.byte_pos + by}


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda i, n: {"sample_rate": 0}, "sample rate out of range"),
        (lambda i, n: {"timescale": 0}, "timescale out of range"),
        (lambda i, n: {"channels": 0}, "channel count out of range"),
        (lambda i, n: {"channels": 256}, "channel count out of range"),
        (lambda i, n: {"encoder_delay": 1 << 31}, "encoder delay out of range"),
        (lambda i, n: {"codec": ""}, "no codec or container"),
        (lambda i, n: {"data_end": n + 1}, "audio data range outside the blob"),
        (lambda i, n: {"data_start": i.data_end}, "audio data range outside the blob"),
        (lambda i, n: {"header": ((0, n + 1),)}, "header range outside the blob"),
        (
            lambda i, n: {"sample_pos": i.sample_pos[:0], "byte_pos": i.byte_pos[:0]},
            "no seek points",
        ),
        (lambda i, n: {"byte_pos": i.byte_pos[:-1]}, "seek point arrays differ in length"),
        (lambda i, n: {"byte_pos": i.byte_pos[::-1].copy()}, "seek points not ascending"),
        (lambda i, n: {"sample_pos": i.sample_pos * 0}, "seek points not ascending"),
        (lambda i, n: shifted(i, -i.byte_pos[0] - 1), "seek point outside the audio data"),
        (
            lambda i, n: {"first_sample": int(i.sample_pos[0]) - 1},
            "first sample before the first seek point",
        ),
        (lambda i, n: {"num_samples": 1 << 60}, "more samples than the audio bytes can hold"),
        (lambda i, n: {"num_samples": -2}, "negative sample count"),
        (
            lambda i, n: {"sample_pos": i.sample_pos << 30},
            "positions past what the audio bytes can hold",
        ),
        (lambda i, n: {"first_sample": 1 << 62}, "positions out of range"),
    ],
)
def test_each_implausible_value_is_named(good, change, reason: str) -> None:  # type: ignore[no-untyped-def]
    index, size = good
    assert check_index(index, size) is None
    bad = dataclasses.replace(index, **change(index, size))
    assert check_index(bad, size) == f"implausible index: {reason}"


def test_pcm_is_held_to_its_block_align() -> None:
    data = encoded("wav", 16000, 2, seconds=1.0)
    index = extract(io.BytesIO(data))
    assert check_index(index, len(data)) is None
    longer = dataclasses.replace(index, num_samples=index.num_samples + 1)
    assert check_index(longer, len(data)) == (
        "implausible index: more samples than the audio bytes can hold"
    )
    narrow = dataclasses.replace(index, block_align=1)
    assert check_index(narrow, len(data)) == (
        "implausible index: block align smaller than a sample frame"
    )


def test_no_index_records_are_always_fine() -> None:
    assert check_index(SeekIndex.unavailable("unknown container"), 10) is None
    assert check_against_blob(SeekIndex.unavailable("x"), 10, {"codec": "mp3"}) is None
    weird = dataclasses.replace(SeekIndex.unavailable("x"), status="maybe")
    assert check_index(weird) == "unknown index status 'maybe'"


def test_he_aac_rate_and_channels_are_tolerated(good) -> None:  # type: ignore[no-untyped-def]
    index, size = good
    aac = dataclasses.replace(index, codec="aac", container="mp4", sample_rate=22050, channels=1)
    info = {"codec": "aac", "container": "mov,mp4,m4a", "sample_rate": 44100, "channels": 2}
    assert check_against_blob(aac, size, info) is None
    assert check_against_blob(aac, size, {**info, "sample_rate": 48000}) == (
        "index disagrees with audio_info: sample rate"
    )
    assert check_against_blob(index, size, {"container": "ogg"}) == (
        "index disagrees with audio_info: container"
    )


def test_a_corrupt_row_read_back_names_its_key(tmp_path: Path) -> None:
    # Found by the fuzzer: header offset and length lists of different
    # lengths in one row made IndexReader raise a bare ValueError.
    index = extract(io.BytesIO(encoded("flac", 22050, 1, seconds=0.5)))
    good = to_struct_array([index])
    children = {field.name: good.field(field.name) for field in INDEX_TYPE}
    children["header_length"] = pa.array([[]], pa.list_(pa.int64()))
    bad = pa.StructArray.from_arrays(list(children.values()), fields=list(INDEX_TYPE))
    path = tmp_path / "seek_index" / "s.wsds"
    path.parent.mkdir()
    with pa.ipc.new_file(str(path), SCHEMA) as writer:
        writer.write_batch(
            pa.record_batch(
                [
                    pa.array(["ep"]),
                    bad,
                    pa.array([1]),
                    pa.nulls(1, CONTENT_TYPE),
                    pa.nulls(1, pa.int64()),
                    pa.nulls(1, CONTENT_TYPE),
                    pa.nulls(1, pa.uint32()),
                ],
                schema=SCHEMA,
            )
        )
    with pytest.raises(ShardError, match="header offsets and lengths differ") as caught:
        IndexReader(Shard(path)).read(0)
    assert caught.value.key == "ep"


def test_a_ragged_buffer_in_a_row_read_back(tmp_path: Path) -> None:
    # Found by the fuzzer: a sample_rate buffer one byte longer than its
    # int32 values made numpy raise a bare ValueError.
    indexes = [extract(io.BytesIO(encoded("mp3", 44100, 1, seconds=0.5)))] * 3
    path = tmp_path / "seek_index" / "s.wsds"
    path.parent.mkdir()
    with pa.ipc.new_file(str(path), SCHEMA) as writer:
        writer.write_batch(
            pa.record_batch(
                [
                    pa.array(["a", "b", "c"]),
                    to_struct_array(indexes),
                    pa.array([1, 2, 3]),
                    pa.nulls(3, CONTENT_TYPE),
                    pa.nulls(3, pa.int64()),
                    pa.nulls(3, CONTENT_TYPE),
                    pa.nulls(3, pa.uint32()),
                ],
                schema=SCHEMA,
            )
        )
    data = path.read_bytes()
    layout = Shard(path).layout.batches[0]
    body = layout.buffers[0][0]
    # __key__: 3 buffers; the struct: 1; the strings before sample_rate: 3
    # each; then sample_rate's validity and values.
    strings = [INDEX_TYPE.field(i) for i in range(INDEX_TYPE.get_field_index("sample_rate"))]
    assert all(pa.types.is_string(f.type) for f in strings)
    offset, length = layout.buffers[3 + 1 + 3 * len(strings) + 1]
    entry = struct.pack("<qq", offset - body, length)
    assert length == 12 and data.count(entry) == 1
    path.write_bytes(data.replace(entry, struct.pack("<qq", offset - body, length + 1)))
    reader = IndexReader(Shard(path))
    assert [reader.read(row).sample_rate for row in range(3)] == [44100] * 3


def test_audio_info_cells_are_compared_as_numbers_of_any_type(lengths: Path) -> None:
    """A decimal duration is a duration (it was passed over: a truncated mp3
    whose audio_info of another tool says 3 s kept its index), and a boolean
    is no number (``True`` was compared as 1 s and 1 Hz, refusing a good index)."""
    dataset = streamer.open_dataset(lengths)
    short_index, long_blob = dataset.seek_index("mp3-1"), dataset.blob("mp3-3")
    long = dataset.info("mp3-3")["duration"]
    as_decimal = {"duration": decimal.Decimal(f"{long:.3f}")}
    reason = check_against_blob(short_index, long_blob.length, as_decimal)
    assert reason == "index disagrees with audio_info: duration"
    index, blob = dataset.seek_index("mp3-3"), dataset.blob("mp3-3")
    assert check_against_blob(index, blob.length, as_decimal) is None
    for cell in ("duration", "sample_rate", "channels"):
        assert check_against_blob(index, blob.length, {cell: True}) is None, cell
