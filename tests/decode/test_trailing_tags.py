"""Bytes after the audio that FFmpeg's decoder rejects: an APEv2 tag with a
binary item (cover art) after an mp3's frames. FFmpeg's mp3 demuxer hands
the tag to its parser, which makes a packet of it, and the decoder rejects
that packet after every audio sample is out. The full decode ends there
(docs/decoding.md): the native index, which counts the frames only, is
right and passes its check, and the fallback serves every crop up to the
end, resampled ones included (their resampler window reaches past the last
sample, into the tag)."""

from __future__ import annotations

import io
import random
import struct
from pathlib import Path

import numpy as np
import pytest
import soxr

from streamer import open_dataset
from streamer.errors import CropError
from streamer.formats.ffmpeg import open_input
from streamer.formats.frames import frame_to_float32
from streamer.synth import encode, signal
from streamer.write.pack import pack

RATE = 44100
TARGET = 16000
TOLERANCE = 1e-4  # mp3 at zero lag
WITHIN = TOLERANCE + 1e-6  # and the resampler's float rounding


def _ape_tag(value: bytes) -> bytes:
    """An APEv2 tag: header, one binary item, footer."""
    item = struct.pack("<II", len(value), 2) + b"Cover Art (Front)\0" + value
    size = len(item) + 32

    def frame(flags: int) -> bytes:
        return b"APETAGEX" + struct.pack("<IIII", 2000, size, 1, flags) + bytes(8)

    return frame(0xA0000000) + item + frame(0)


#: 3 s of mp3 (PyAV's: a LAME tag) and a 2 kB binary APE item whose packet
#: FFmpeg's decoder rejects.
MP3_WITH_APE = encode(signal(3.0, RATE, 2, seed=1), RATE, "mp3") + _ape_tag(
    random.Random(7).randbytes(2000)
)


def _reference() -> np.ndarray:
    """The full decode: up to the packet FFmpeg's decoder rejects (the tag)."""
    pieces = []
    # pytest.raises: the fixture is what it claims.
    with (
        open_input(io.BytesIO(MP3_WITH_APE)) as container,
        pytest.raises(Exception, match="Invalid data"),
    ):
        for packet in container.demux(audio=0):
            pieces.extend(frame_to_float32(f) for f in packet.decode())
    return np.concatenate(pieces, axis=1)


@pytest.fixture(scope="module")
def datasets(tmp_path_factory: pytest.TempPathFactory) -> dict[bool, Path]:
    src = tmp_path_factory.mktemp("tagged-src")
    (src / "ape.mp3").write_bytes(MP3_WITH_APE)
    root = tmp_path_factory.mktemp("tagged")
    for index in (True, False):
        assert not pack(src, root / str(index), progress=False, index=index).skipped
    return {index: root / str(index) for index in (True, False)}


def test_an_mp3_index_is_verified_despite_a_tag_ffmpeg_rejects(datasets: dict[bool, Path]) -> None:
    full = _reference()
    dataset = open_dataset(datasets[True])
    index = dataset.episode("ape").index
    assert index.ok and index.container == "mp3", index.reason
    assert round(dataset.info("ape")["duration"] * RATE) == full.shape[1]


@pytest.mark.parametrize("index", [True, False], ids=["index", "no-index"])
def test_crops_to_the_end_are_exact_resampled_too(datasets: dict[bool, Path], index: bool) -> None:
    full = _reference()
    n = full.shape[1]
    length = n / RATE
    whole = np.stack([soxr.resample(channel, RATE, TARGET, "HQ") for channel in full])
    dataset = open_dataset(datasets[index])
    for start, end in ((0.0, 0.2), (length - 0.3, length), ((n - 1) / RATE, length)):
        got = dataset.read_crop("ape", start, end)
        want = full[:, round(start * RATE) : round(end * RATE)]
        assert got.shape == want.shape and float(np.abs(got - want).max()) <= TOLERANCE
        if end - start < 1 / TARGET:
            continue  # under one output sample: nothing to resample
        got = dataset.read_crop("ape", start, end, sample_rate=TARGET)
        first = round(start * TARGET)
        want = whole[:, first : round(end * TARGET)]
        assert got.shape == want.shape, (start, end)
        assert float(np.abs(got - want).max()) <= WITHIN, (start, end)
    with pytest.raises(CropError):  # past the end: one line naming the episode
        dataset.read_crop("ape", length + 0.01, length + 0.02)
    assert dataset.decode_stats.unplanned_reads == 0
