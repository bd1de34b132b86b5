"""The path that always works: FFmpeg demuxes and seeks over a file-like blob.

It needs no seek index, so it serves episodes that have none. It is neither
cheap nor sample-exact: FFmpeg seeks by its own rules (scanning, and with no
decoder pre-roll after the seek for mp3, AAC and Opus), so the first samples
after a seek can differ slightly from a full decode.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import BinaryIO

import av
import numpy as np

from ..formats.frames import frame_to_float32
from ..timing import record

__all__ = ["decode_range"]

# How far before the crop to retry when FFmpeg's seek lands after it (seconds).
_SEEK_BACKOFFS = (0.0, 1.0, 10.0)


def decode_range(source: BinaryIO, start: float, end: float) -> tuple[np.ndarray, int]:
    """Samples ``[round(start*sr), round(end*sr))`` of the first audio stream.

    Returns float32 ``(channels, samples)`` and the native sample rate. The
    result is shorter than asked only when the episode ends first.
    """
    for backoff in _SEEK_BACKOFFS:
        target = start - backoff
        pieces, covered, rate, channels = _decode_from(source, target, start, end)
        if covered:
            break
    if not pieces:
        return np.zeros((channels, 0), dtype=np.float32), rate
    return np.concatenate(pieces, axis=1), rate


def _decode_from(
    source: BinaryIO, target: float, start: float, end: float
) -> tuple[list[np.ndarray], bool, int, int]:
    """Open, seek to ``target`` (or stay at the start), decode ``[start, end)``.

    The container is opened afresh each time: seeking back to 0 would lose
    the codec's start-up trimming (AAC priming), a fresh open does not.
    """
    source.seek(0)
    with record("decoder_open"):
        container = av.open(source, "r")
    with container:
        stream = container.streams.audio[0]
        rate = stream.codec_context.sample_rate
        # The full decode's sample 0 is the first frame's, at the stream's start time.
        origin = stream.start_time or 0
        if target > 0:
            container.seek(origin + int(target / stream.time_base), stream=stream, backward=True)
        first, last = round(start * rate), round(end * rate)
        with record("decode"):
            frames = container.decode(stream)
            pieces, covered = _collect(frames, origin, rate, first, last, retry=target > 0)
        return pieces, covered, rate, stream.codec_context.channels


def _collect(
    frames: Iterator[av.AudioFrame], origin: int, rate: int, first: int, last: int, *, retry: bool
) -> tuple[list[np.ndarray], bool]:
    """The parts of ``frames`` inside ``[first, last)``.

    With ``retry``, gives up (returns False) when the first frame starts after
    ``first``: the seek landed too late and the caller seeks further back.
    """
    pieces: list[np.ndarray] = []
    for frame in frames:
        if frame.pts is None:
            continue
        frame_first = round((frame.pts - origin) * frame.time_base * rate)
        if retry and not pieces and frame_first > first:
            return [], False
        if frame_first >= last:
            break
        data = frame_to_float32(frame)
        lo, hi = max(first - frame_first, 0), min(last - frame_first, data.shape[1])
        if hi > lo:
            pieces.append(data[:, lo:hi])
    return pieces, True
