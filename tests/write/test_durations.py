"""``audio_info``'s durations are the full decode's wherever an index counts
it: the samplers plan crops over them, so a header's estimate within 1 % of
the real length (an M4A's leaves out the last AAC frame, an Opus file's
counts the pre-skip) kept the last crop from the real end, or planned one
past it."""

from __future__ import annotations

import io
import logging
from decimal import Decimal
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from helpers import pack_audio, write_wsds_info

from streamer import open_dataset
from streamer.formats.ffmpeg import open_input
from streamer.pipeline.episodes import Episodes
from streamer.pipeline.samplers import SequentialCrops
from streamer.synth import CODECS, encode, signal
from streamer.write.durations import corrected
from streamer.write.index import build_index
from streamer.write.pack import pack
from testkit.video import with_video

#: key -> (codec, rate, channels, seconds): headers off by 14-38 ms (AAC
#: short by its last frame) and +6.5 ms (Opus: the pre-skip), within 1 %.
FILES = {
    "aac-44k": ("aac", 44100, 2, 7.3),
    "aac-22k": ("aac", 22050, 1, 3.0),
    "opus": ("opus", 48000, 1, 3.0),
    "flac": ("flac", 44100, 1, 3.0),
}


def _full_decode(blob: bytes) -> tuple[np.ndarray, int]:
    with open_input(io.BytesIO(blob)) as container:
        stream = container.streams.audio[0]
        frames = [f.to_ndarray() for f in container.decode(stream)]
        return np.concatenate(frames, axis=1), stream.codec_context.sample_rate


@pytest.fixture(scope="module")
def src(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("durations-src")
    for key, (codec, rate, channels, seconds) in FILES.items():
        data = encode(signal(seconds, rate, channels, seed=3), rate, codec)
        (folder / f"{key}.{CODECS[codec].extension}").write_bytes(data)
    return folder


def _assert_exact(out: Path) -> None:
    dataset = open_dataset(out)
    episodes = Episodes.of(dataset)
    for key, duration in zip(episodes.keys, episodes.duration, strict=True):
        full, rate = _full_decode(bytes(dataset.blob(key).view()))
        assert round(duration * rate) == full.shape[1], key
        # The last window ends at the last sample, which it holds.
        crops = SequentialCrops(1.0).crops(episodes, np.random.default_rng(0))
        last = max(c for c in range(len(crops)) if episodes.keys[crops.episode[c]] == key)
        got = dataset.read_crop(key, crops.start[last], crops.end[last])
        want = full[:, round(crops.start[last] * rate) :]
        assert got.shape == want.shape, key
    assert dataset.decode_stats.past_end == 0


def test_pack_keeps_the_index_duration_where_the_header_is_within_one_percent(
    src: Path, tmp_path: Path
) -> None:
    pack(src, tmp_path / "out", progress=False)
    _assert_exact(tmp_path / "out")


def test_indexing_a_pack_without_index_makes_the_durations_exact(src: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    pack(src, out, progress=False, index=False)
    dataset = open_dataset(out)
    assert dataset.info("aac-44k")["duration"] == pytest.approx(7.3)  # the header's
    report = build_index(str(out), progress=False)
    assert report.durations == []  # made exact quietly: no header was far off
    _assert_exact(out)


def test_a_header_duration_counts_from_the_audio_tracks_start(tmp_path: Path) -> None:
    """A Matroska file whose audio starts 0.5 s after its video (a music
    video, a screen recording) states no duration of the audio track, only
    the file's, from the video's start: ``audio_info`` said 3.5 s for 3 s
    of audio, and without an index a sampler planned crops past the end."""
    (tmp_path / "src").mkdir()
    data = with_video(3.0, "matroska", "flac", 4608, audio_start=0.5)
    (tmp_path / "src" / "late.mkv").write_bytes(data)
    pack(tmp_path / "src", tmp_path / "out", progress=False, index=False)
    with open_input(io.BytesIO(data)) as container:
        assert container.duration / 1e6 == pytest.approx(3.5, abs=0.01)
    assert open_dataset(tmp_path / "out").info("late")["duration"] == pytest.approx(3.0)


def test_a_crop_past_the_end_is_counted(src: Path, tmp_path: Path) -> None:
    """Without an index, a duration is the header's: Opus's is 6.5 ms past
    the end, so a crop planned to it is cut short, and counted."""
    out = tmp_path / "out"
    pack(src, out, progress=False, index=False)
    dataset = open_dataset(out)
    planned = dataset.info("opus")["duration"]
    assert planned == pytest.approx(3.0065)
    crop = dataset.read_crop("opus", planned - 0.5, planned, pad=True)
    assert crop.shape[1] == round(0.5 * 48000)
    assert dataset.decode_stats.past_end == 1
    dataset.read_crop("opus", 2.0, 2.5)
    assert dataset.decode_stats.past_end == 1


# -- an audio_info another tool wrote (wsds: title, language, ... and its own types)

#: key -> (codec, rate, channels): 3 s each, headers within 1 % of the decode.
WSDS_FILES = {"flac": ("flac", 16000, 1), "aac": ("aac", 22050, 1), "opus": ("opus", 48000, 1)}


@pytest.fixture
def wsds(tmp_path: Path) -> Path:
    return Path(pack_audio(tmp_path, WSDS_FILES, 3.0, index=False).root)


@pytest.mark.parametrize(
    ("duration", "key_type"),
    [
        (pa.array([3.0, 3.0, 3.0], pa.float32()), pa.string()),
        (pa.array([3.0, 3.0, 3.0], pa.float16()), pa.string()),
        (pa.array([3, 3, None], pa.int64()), pa.string()),
        (pa.array([3, 3, 3], pa.int32()), pa.large_string()),
        (pa.array([Decimal("3.0")] * 3, pa.decimal128(5, 1)), pa.large_string()),
        (pa.array([3.0, 3.0, 3.0], pa.float64()), pa.large_string()),
    ],
    ids=["float32", "float16", "int64-null", "int32", "decimal", "float64"],
)
def test_indexing_rewrites_durations_of_any_numeric_type(
    wsds: Path, duration: pa.Array, key_type: pa.DataType, caplog: pytest.LogCaptureFixture
) -> None:
    """A float32 or int64 duration column ended ``streamer index`` with
    "Column data type float does not match field data type double", naming
    no shard, audio_info keeping the header's durations. It is rewritten as
    float64 seconds, the index's, every other column as it was."""
    write_wsds_info(wsds, duration, key_type)
    report = build_index(str(wsds), progress=False)
    assert report.failed == {} and report.ok == 3
    info = pa.ipc.open_file(wsds / "audio_info" / "shard-000000.wsds").read_all()
    assert info.schema.field("duration").type == pa.float64()
    assert info.schema.metadata == {b"batch_size": b"2"}
    assert info.column("title").to_pylist() == [f"Title {k}".encode() for k in sorted(WSDS_FILES)]
    assert info.column("tags").to_pylist() == [["a", "b"]] * 3
    assert info.schema.field("__key__").type == key_type
    assert [len(b) for b in info.to_batches()] == [2, 1]
    _assert_exact(wsds)
    dataset = open_dataset(wsds)
    for key in WSDS_FILES:
        dataset.read_crop(key, 0.5, 1.0)
    assert dict(dataset.decode_stats.paths) == {"index": 3}, dataset.decode_stats.fallback_reasons


def test_a_rounded_duration_still_crops_through_the_index(wsds: Path) -> None:
    """An integer or float32 duration (3 for 3.0186 s) is within the
    tolerance of the index's: a crop is not pushed to the fallback as "index
    disagrees with audio_info: duration", before or after indexing."""
    build_index(str(wsds), progress=False)
    write_wsds_info(wsds, pa.array([3, 3, 3], pa.int64()))
    dataset = open_dataset(wsds)
    for key in WSDS_FILES:
        dataset.read_crop(key, 0.5, 1.0)
    assert dict(dataset.decode_stats.paths) == {"index": 3}, dataset.decode_stats.fallback_reasons


def test_text_durations_are_left_alone_with_a_warning(
    wsds: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A duration column of text is no duration to rewrite: the index is
    built, audio_info left as it was, one warning naming its shard."""
    write_wsds_info(wsds, pa.array(["3.0", "n/a", None]))
    path = wsds / "audio_info" / "shard-000000.wsds"
    before = path.read_bytes()
    with caplog.at_level(logging.WARNING, logger="streamer.write"):
        report = build_index(str(wsds), progress=False)
    assert report.failed == {} and report.ok == 3
    assert path.read_bytes() == before
    [warning] = [r.getMessage() for r in caplog.records if "duration column" in r.getMessage()]
    assert str(path) in warning and "string" in warning and "left as it is" in warning
    dataset = open_dataset(wsds)
    for key in WSDS_FILES:
        dataset.read_crop(key, 0.5, 1.0)
    assert dict(dataset.decode_stats.paths) == {"index": 3}


def test_whole_seconds_are_no_disagreement(caplog: pytest.LogCaptureFixture) -> None:
    """An integer column holds 3 for 3.9 s: off by its type, not worth a
    warning per episode (a wsds dataset of them warned of nearly all);
    one off by more than a second still is."""
    info = pa.table({"__key__": ["a", "b", "c"], "duration": pa.array([3, 1, 3], pa.int64())})
    with caplog.at_level(logging.WARNING, logger="streamer.write"):
        durations, changed = corrected(info, [3.9, 3.0, None])
    assert durations == [3.9, 3.0, 3.0]
    assert changed == [("b", 1, 3.0)]
    assert len(caplog.records) == 1
