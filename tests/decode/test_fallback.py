"""The seek-index-free decode path: FFmpeg seeking over a file-like blob handle."""

from __future__ import annotations

import io
from pathlib import Path

import av
import numpy as np
import pytest
from helpers import FIXTURE_FILES

from streamer import open_dataset
from streamer.decode.fallback import decode_range
from streamer.formats.frames import frame_to_float32

LOSSLESS = {"flac", "alac", "wav"}


def _full_decode(data: bytes) -> np.ndarray:
    with av.open(io.BytesIO(data)) as container:
        frames = [frame_to_float32(f) for f in container.decode(audio=0)]
    return np.concatenate(frames, axis=1)


@pytest.mark.parametrize(("codec", "rate", "channels"), FIXTURE_FILES)
def test_crops_cover_the_asked_samples(packed: Path, codec: str, rate: int, channels: int) -> None:
    dataset = open_dataset(packed)
    key = next(k for k in dataset if k.endswith(codec))
    blob = dataset.blob(key)
    full = _full_decode(bytes(blob.view()))
    for start, end in [(0.0, 0.5), (1.234, 2.0), (2.5, 3.5)]:
        audio, got_rate = decode_range(blob, start, end)
        assert got_rate == rate and audio.dtype == np.float32
        expected = full[:, round(start * rate) : round(end * rate)]
        assert audio.shape == expected.shape  # clipped at the end, never shifted
        if codec in LOSSLESS:
            np.testing.assert_array_equal(audio, expected)
        elif start == 0.0:
            np.testing.assert_allclose(audio, expected, atol=1e-6)


def test_int_sample_formats_scale_to_unit_range() -> None:
    frame = av.AudioFrame.from_ndarray(
        np.array([[-32768, 0, 16384, 32767]], dtype=np.int16), format="s16p", layout="mono"
    )
    np.testing.assert_allclose(frame_to_float32(frame), [[-1.0, 0.0, 0.5, 32767 / 32768]])
    packed = av.AudioFrame.from_ndarray(
        np.array([[1, 2, 3, 4]], dtype=np.float32), format="flt", layout="stereo"
    )
    np.testing.assert_array_equal(frame_to_float32(packed), [[1, 3], [2, 4]])
