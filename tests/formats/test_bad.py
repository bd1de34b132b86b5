"""Bad input never raises: truncation, garbage, empty and unknown blobs give a
"no index" record or an index of what is really there."""

from __future__ import annotations

import io

import numpy as np
import pytest
from _index_support import encoded

from streamer.formats import extract, sniff

CODECS = [("mp3", 1), ("vorbis", 2), ("opus", 1), ("flac", 2), ("aac", 1), ("alac", 1), ("wav", 2)]


@pytest.mark.parametrize(("codec", "channels"), CODECS)
def test_truncations_never_raise(codec: str, channels: int) -> None:
    data = encoded(codec, 48000, channels, seconds=1.0)
    whole = extract(io.BytesIO(data))
    assert whole.ok
    for cut in (1, 7, 16, 100, len(data) // 3, len(data) - 1):
        index = extract(io.BytesIO(data[:cut]))
        if index.ok:
            assert index.data_end <= cut
            assert np.all(index.byte_pos < cut)
            assert set(index.byte_pos.tolist()) <= set(whole.byte_pos.tolist()) | {index.data_start}
        else:
            assert index.reason


@pytest.mark.parametrize(("codec", "channels"), CODECS)
def test_random_damage_never_raises(codec: str, channels: int) -> None:
    data = bytearray(encoded(codec, 48000, channels, seconds=1.0))
    rng = np.random.default_rng(7)
    for _ in range(10):
        damaged = bytearray(data)
        at = rng.integers(0, len(data), 20)
        damaged[at.min() : at.min() + 200] = rng.integers(0, 256, 200, dtype=np.uint8).tobytes()
        index = extract(io.BytesIO(bytes(damaged)))
        assert index.ok or index.reason


def test_empty_and_unknown() -> None:
    assert extract(io.BytesIO(b"")).reason == "empty blob"
    assert extract(io.BytesIO(b"just some text, no audio here")).reason == "unknown container"
    assert sniff(b"\x1aE\xdf\xa3") is None  # matroska: not ours


def test_magic_decides_not_the_name() -> None:
    assert sniff(encoded("flac", 44100, 1)[:16]) == "flac"
    assert sniff(encoded("aac", 44100, 1)[:16]) == "mp4"
    assert sniff(encoded("opus", 48000, 1)[:16]) == "ogg"
    assert sniff(encoded("wav", 8000, 1)[:16]) == "wav"
    assert sniff(encoded("mp3", 44100, 1)[:16]) == "mp3"
