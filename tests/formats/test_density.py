"""``density`` (seek points per second) as small as a float goes: every
format builds its index with a point at the start only. ``1e-300`` made
good mp4 files "malformed mp4 data" (an OverflowError in the interval of
10**304 ticks), and the smallest float did the same to mp3, ogg and flac."""

from __future__ import annotations

import io
import math

import pytest

from streamer.formats.reader import MAX_INTERVAL, interval
from streamer.formats.registry import extract
from streamer.synth import CODECS, encode, signal


@pytest.mark.parametrize("codec", sorted(CODECS))
def test_a_tiny_density_is_a_sparse_index_not_malformed_data(codec: str) -> None:
    rate = 48000 if codec == "opus" else 44100
    data = encode(signal(2.0, rate, 2), rate, codec)
    for density in (1e-300, 5e-324):
        index = extract(io.BytesIO(data), density=density)
        assert (index.status, index.reason) == ("ok", ""), (density, index.reason)
        assert 1 <= len(index.sample_pos) <= 2


def test_the_interval_is_bounded() -> None:
    assert interval(44100, 1.0) == 44100 and interval(44100, math.inf) == 1
    assert interval(44100, 1e-300) == interval(44100, 5e-324) == MAX_INTERVAL
    for bad in (0.0, -1.0, math.nan):
        with pytest.raises(ValueError, match="density must be positive"):
            interval(44100, bad)
