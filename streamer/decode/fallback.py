"""The path that always works: FFmpeg demuxes and seeks over a file-like blob.

It needs no seek index, so it serves episodes that have none. It is neither
cheap nor sample-exact: FFmpeg seeks by its own rules (scanning, and with no
decoder pre-roll after the seek for mp3, AAC and Opus), so the first samples
after a seek can differ slightly from a full decode.

It runs FFmpeg on bytes nobody has checked, so anything FFmpeg or PyAV
raises on them (``FFMPEG_FAILURES``) is the episode's fault; the caller
turns it into a ``CropError`` naming the episode. A store's failure to
deliver the bytes comes through PyAV as the store's own ``StorageError``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import BinaryIO

import av
import numpy as np

from ..formats.frames import frame_to_float32
from ..timing import record

__all__ = ["FFMPEG_FAILURES", "PastTheEnd", "decode_range"]

#: What FFmpeg and PyAV raise on bytes they cannot demux or decode: FFmpeg's
#: errors (``InvalidDataError``, ``PermissionError``, ``EOFError``,
#: ``PatchWelcomeError``, ...), undecodable metadata text, timestamps out of
#: range. (Not ``LookupError``: what a file object raises comes through PyAV
#: as itself, and a reader's ``KeyError`` is not the episode's fault.)
FFMPEG_FAILURES = (av.FFmpegError, ValueError, ArithmeticError)

# How far before the crop to seek (seconds) while FFmpeg's seek lands after
# it or fails; then decode from the start without seeking.
_SEEK_BACKOFFS = (0.0, 1.0, 10.0, None)


class PastTheEnd(Exception):
    """The range starts where FFmpeg's decode of the stream has ended."""

    def __init__(self, decoded: float) -> None:
        super().__init__(f"FFmpeg decodes {decoded:.3f} s")
        #: Seconds FFmpeg decoded up to the end of the stream.
        self.decoded = decoded


def decode_range(source: BinaryIO, start: float, end: float) -> tuple[np.ndarray, int]:
    """Samples ``[round(start*sr), round(end*sr))`` of the first audio stream.

    Returns float32 ``(channels, samples)`` and the native sample rate, never
    empty: the result is shorter than asked only when the episode ends
    first, and ``PastTheEnd`` when it ends before ``start``. Raises one of
    ``FFMPEG_FAILURES`` when FFmpeg cannot read the bytes (or its
    timestamps jump over the range).
    """
    for backoff in _SEEK_BACKOFFS:
        target = None if backoff is None else start - backoff
        pieces, covered, rate, reached = _decode_from(source, target, start, end)
        if covered:
            break
    if pieces:
        return np.concatenate(pieces, axis=1), rate
    if reached <= round(start * rate):
        raise PastTheEnd(reached / rate)
    raise ValueError(f"the stream's timestamps skip [{start}, {end}) s")


def _decode_from(
    source: BinaryIO, target: float | None, start: float, end: float
) -> tuple[list[np.ndarray], bool, int, int]:
    """Open, seek to ``target`` (``None`` or not past 0: stay at the start),
    decode ``[start, end)``: (pieces, covered, rate, the sample decoding
    reached). Not covered when the seek failed or landed after ``start``.

    The container is opened afresh each time: seeking back to 0 would lose
    the codec's start-up trimming (AAC priming), a fresh open does not. Tags
    that are not UTF-8 are ignored (PyAV would refuse the file over them).
    """
    source.seek(0)
    with record("decoder_open"):
        container = av.open(source, "r", metadata_errors="ignore")
    with container:
        if not container.streams.audio:
            raise ValueError("no audio stream")
        stream = container.streams.audio[0]
        if stream.codec_context is None:
            raise ValueError("FFmpeg has no decoder for the audio stream")
        rate = stream.codec_context.sample_rate
        if not rate or not stream.time_base:
            raise ValueError("the audio stream states no sample rate or time base")
        # The full decode's sample 0 is the first frame's, at the stream's start time.
        origin = stream.start_time or 0
        seek = target is not None and target > 0
        if seek:
            try:
                container.seek(
                    origin + int(target / stream.time_base), stream=stream, backward=True
                )
            except av.FFmpegError:
                return [], False, rate, 0
        first, last = round(start * rate), round(end * rate)
        with record("decode"):
            frames = container.decode(stream)
            pieces, covered, reached = _collect(frames, origin, rate, first, last, retry=seek)
        return pieces, covered, rate, reached


def _collect(
    frames: Iterator[av.AudioFrame], origin: int, rate: int, first: int, last: int, *, retry: bool
) -> tuple[list[np.ndarray], bool, int]:
    """The parts of ``frames`` inside ``[first, last)``, and the furthest
    sample the frames reached. A frame without a timestamp (FFmpeg gives
    none to some frames of damaged streams) follows the frame before it.

    With ``retry``, gives up (not covered) when the first frame starts after
    ``first``: the seek landed too late and the caller seeks further back.
    """
    pieces: list[np.ndarray] = []
    reached = 0
    following = None  # where a frame without a timestamp starts
    for frame in frames:
        if frame.pts is not None:
            frame_first = round((frame.pts - origin) * frame.time_base * rate)
        elif following is not None:
            frame_first = following
        else:
            continue
        following = frame_first + frame.samples
        reached = max(reached, following)
        if retry and not pieces and frame_first > first:
            return [], False, reached
        if frame_first >= last:
            break
        data = frame_to_float32(frame)
        lo, hi = max(first - frame_first, 0), min(last - frame_first, data.shape[1])
        if hi > lo:
            pieces.append(data[:, lo:hi])
    return pieces, True, reached
