"""Long episodes, built cheaply by repeating frames/pages: one sequential pass,
bounded memory, extraction time linear in the length."""

from __future__ import annotations

import io
import time

import numpy as np
import pytest
from _index_support import long_mp3, long_ogg

from streamer.formats import extract
from streamer.formats.mp3 import parse as mp3
from streamer.formats.reader import CHUNK_SIZE


class _Watched(io.RawIOBase):
    """A forward-only stream that records what was asked of it."""

    def __init__(self, data: bytes) -> None:
        self._data, self._pos = data, 0
        self.read_bytes, self.largest = 0, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def readinto(self, buffer) -> int:  # type: ignore[no-untyped-def]
        n = min(len(buffer), len(self._data) - self._pos)
        buffer[:n] = self._data[self._pos : self._pos + n]
        self._pos += n
        self.read_bytes += n
        self.largest = max(self.largest, n)
        return n


def test_one_sequential_pass_with_bounded_reads() -> None:
    data = long_mp3(10)
    stream = _Watched(data)
    index = extract(stream)
    assert index.ok and stream.read_bytes == len(data)
    assert stream.largest <= CHUNK_SIZE
    assert 590 <= len(index.sample_pos) <= 610  # one point per second


def test_long_ogg_points() -> None:
    data = long_ogg(600)
    index = extract(io.BytesIO(data))
    assert index.ok and len(index.sample_pos) >= 300
    assert np.all(np.diff(index.sample_pos) > 0)


def _seconds(data: bytes) -> float:
    best = float("inf")
    for _ in range(2):
        start = time.perf_counter()
        assert extract(io.BytesIO(data)).ok
        best = min(best, time.perf_counter() - start)
    return best


@pytest.mark.slow
def test_extraction_time_is_linear() -> None:
    for short, long in ((long_mp3(15), long_mp3(120)), (long_ogg(900), long_ogg(7200))):
        ratio = _seconds(long) / _seconds(short)
        assert 4 < ratio < 14, ratio  # 8x the audio: about 8x the time
    assert mp3.DECODER_DELAY == 529
