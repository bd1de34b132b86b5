"""The path that always works: FFmpeg decodes the blob from its first frame.

It needs no seek index, so it serves episodes that have none (or whose index
failed its checks). It is exact by construction: the crop is cut out of the
very decode that defines the reference (``docs/decoding.md``, "the full
decode"), FFmpeg's decoder output for the first audio stream counted sample
by sample from the first frame. It never seeks and never places a frame by
its timestamp: after a seek FFmpeg's timestamps can jump (Vorbis page
boundaries) and mp3, AAC and Opus get no decoder pre-roll, so a seeking
decode is neither exact nor reliable. The price is decoding everything
before the crop; those frames are only counted, not converted.

It runs FFmpeg on bytes nobody has checked, so anything FFmpeg or PyAV
raises on them (``FFMPEG_FAILURES``) is the episode's fault; the caller
turns it into a ``CropError`` naming the episode. A store's failure to
deliver the bytes comes through PyAV as the store's own ``StorageError``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import BinaryIO

import av
import numpy as np

from ..formats.ffmpeg import open_input
from ..formats.frames import frame_to_float32
from ..interrupts import interrupts_held
from ..timing import record
from .resample import crop_span, past_the_end

__all__ = ["FFMPEG_FAILURES", "Cut", "DecodeEnds", "PastTheEnd", "cut_windows", "decode_range"]

#: What FFmpeg and PyAV raise on bytes they cannot demux or decode: FFmpeg's
#: errors (``InvalidDataError``, ``PermissionError``, ``EOFError``,
#: ``PatchWelcomeError``, ...), undecodable metadata text, timestamps out of
#: range. (Not ``LookupError``: what a file object raises comes through PyAV
#: as itself, and a reader's ``KeyError`` is not the episode's fault.)
FFMPEG_FAILURES = (av.FFmpegError, ValueError, ArithmeticError)


class DecodeEnds(Exception):
    """FFmpeg's decoder rejects a packet before the range's last sample: its
    full decode ends there (docs/decoding.md), ``decoded`` samples in."""

    def __init__(self, decoded: int, rate: int, error: Exception) -> None:
        super().__init__(
            f"at {decoded / rate:.3f} s ({decoded} samples), where its decoder rejects a "
            f"packet ({type(error).__name__}: {error})"
        )
        self.decoded, self.rate, self.error = decoded, rate, error


class PastTheEnd(Exception):
    """The range starts where FFmpeg's decode of the stream has ended."""

    def __init__(self, decoded: int, rate: int) -> None:
        super().__init__(f"FFmpeg decodes {decoded / rate:.3f} s, {decoded} samples")
        #: Samples FFmpeg decoded up to the end of the stream, and their rate.
        self.decoded, self.rate = decoded, rate


@interrupts_held()  # FFmpeg's demuxer reads the blob through Python here
def decode_range(
    source: BinaryIO, start: float, end: float, target_rate: int | None = None
) -> tuple[np.ndarray, int, int]:
    """Samples ``[round(start*sr), round(end*sr))`` of the full decode, or
    with ``target_rate`` the resampler's window around them (``crop_span``).

    Returns float32 ``(channels, samples)``, the sample rate of the
    decoder's output and the resampled outputs to drop from the window's
    front (0 without resampling). Shorter than asked only when the stream
    ends first (empty only for a crop under half a sample), and
    ``PastTheEnd`` when it ends at or before ``start``, ``DecodeEnds`` when
    FFmpeg's decoder rejects a packet before the crop's last sample. Raises
    one of ``FFMPEG_FAILURES`` when FFmpeg cannot open the bytes or fails
    before its first frame.
    """
    source.seek(0)
    with record("decoder_open"):
        container = open_input(source)
    with container:
        if not container.streams.audio:
            raise ValueError("no audio stream")
        stream = container.streams.audio[0]
        if stream.codec_context is None:
            raise ValueError("FFmpeg has no decoder for the audio stream")
        with record("decode"):
            return _cut(container.decode(stream), start, end, target_rate)


def _cut(
    frames: Iterator[av.AudioFrame], start: float, end: float, target_rate: int | None
) -> tuple[np.ndarray, int, int]:
    """The span out of ``frames``, placed by counting their samples
    (``cut_windows``); stops at the frame that completes it."""

    def span(rate: int) -> tuple[list[tuple[int, int]], int]:
        first, last, _ = crop_span(start, end, rate, target_rate)
        return [(first, last)], max(last, first + 1)  # under half a sample: empty, not past the end

    cut = cut_windows(frames, span)
    if cut.error is not None and cut.decoded < round(end * cut.rate):
        raise DecodeEnds(cut.decoded, cut.rate, cut.error)  # the crop needs samples past it
    if not cut.rate or past_the_end(start, cut.decoded, cut.rate, target_rate):
        raise PastTheEnd(cut.decoded, cut.rate or 1)
    return cut.windows[0], cut.rate, crop_span(start, end, cut.rate, target_rate)[2]


@dataclass
class Cut:
    """What ``cut_windows`` kept of a decode."""

    #: Samples ``[first, last)`` of the full decode per window, float32
    #: ``(channels, samples)``, shorter where the decode ended first.
    windows: list[np.ndarray]
    #: Samples decoded (all of them when nothing stopped the decode early).
    decoded: int
    #: The decoder's output rate (the first frame's; 0 when it output nothing).
    rate: int
    #: What FFmpeg raised where the decode ended before the stream did (a
    #: packet its decoder rejects: the full decode ends there), else None.
    error: Exception | None = None


def cut_windows(
    frames: Iterable[av.AudioFrame],
    spans: Callable[[int], tuple[list[tuple[int, int]], int | None]],
) -> Cut:
    """Windows of the full decode out of ``frames``, placed by counting their
    samples: the one frame counter of the fallback and the index check.

    ``spans(rate)``, called at the first frame with the decoder's rate (the
    stream header's can be HE-AAC's core rate), gives the windows
    ``[first, last)`` and the sample count to stop at (``None``: decode to
    the end). Only frames that overlap a window are converted. A stream whose
    rate or channel count changes (an mp3 switching between mono and stereo
    frames) raises ``ValueError`` rather than mix them, as the full decode
    cannot be one array then. It stops at the frame that reaches the stop,
    not one frame more: that one might be the frame FFmpeg cannot decode.
    What FFmpeg raises once frames have come out ends the decode there (the
    full decode has no samples past a packet its decoder rejects: bytes
    after the audio, such as an mp3's APE tag, or damage), and is kept in
    ``Cut.error`` for the caller to judge; before the first frame it raises.
    """
    windows: list[tuple[int, int]] = []
    parts: list[list[np.ndarray]] = []
    rate = channels = 0
    stop: int | None = None
    at = 0  # the full decode's index of the frame's first sample
    error: Exception | None = None
    source = iter(frames)
    while True:
        try:
            frame = next(source)
        except StopIteration:
            break
        except FFMPEG_FAILURES as exc:
            if not rate:
                raise
            error = exc
            break
        if not rate:
            rate, channels = frame.sample_rate, frame.layout.nb_channels
            if not rate:
                raise ValueError("the decoder states no sample rate")
            windows, stop = spans(rate)
            parts = [[] for _ in windows]
        elif (frame.sample_rate, frame.layout.nb_channels) != (rate, channels):
            raise ValueError(
                f"the stream changes from {rate} Hz x {channels} to {frame.sample_rate} Hz x "
                f"{frame.layout.nb_channels} channels at sample {at} ({at / rate:.3f} s)"
            )
        end = at + frame.samples
        hits = [i for i, (first, last) in enumerate(windows) if first < end and last > at]
        if hits:
            data = frame_to_float32(frame)
            for i in hits:
                first, last = windows[i]
                parts[i].append(data[:, max(first - at, 0) : min(last, end) - at])
        at = end
        if stop is not None and at >= stop:
            break
    return Cut([_joined(p, channels) for p in parts], at, rate, error)


def _joined(pieces: list[np.ndarray], channels: int) -> np.ndarray:
    if not pieces:
        return np.zeros((channels, 0), dtype=np.float32)
    return np.concatenate(pieces, axis=1)
