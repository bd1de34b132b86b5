"""``audio_info``'s durations are the full decode's wherever an index counts
it: the samplers plan crops over them, so a header's estimate within 1 % of
the real length (an M4A's leaves out the last AAC frame, an Opus file's
counts the pre-skip) kept the last crop from the real end, or planned one
past it."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest

from streamer import open_dataset
from streamer.formats.ffmpeg import open_input
from streamer.pipeline.episodes import Episodes
from streamer.pipeline.samplers import SequentialCrops
from streamer.synth import CODECS, encode, signal
from streamer.write.index import build_index
from streamer.write.pack import pack

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
