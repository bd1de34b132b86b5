"""The reference every exactness test and benchmark compares crops with.

"The full decode" (docs/decoding.md): every sample FFmpeg's decoder outputs
for the first audio stream, in order from its first frame, at the rate the
decoder outputs (frames are counted, never placed by timestamp). Tags that
are not UTF-8 are ignored, as streamer's own FFmpeg opens ignore them.
"""

from __future__ import annotations

import io

import av
import numpy as np

from streamer.formats.ffmpeg import open_input
from streamer.formats.frames import frame_to_float32

__all__ = [
    "NoSamples",
    "decode_first_stream",
    "decode_to_failure",
    "full_decode",
    "full_decode_to_failure",
]


class NoSamples(ValueError):
    """The stream decodes to no samples: there is no full decode."""


def full_decode(data: bytes) -> tuple[np.ndarray, int]:
    """The full decode of an encoded file, float32 ``(channels, samples)``,
    and its sample rate; raises what FFmpeg raises on bytes it cannot decode."""
    with open_input(io.BytesIO(data)) as container:
        return decode_first_stream(container)


def full_decode_to_failure(data: bytes) -> tuple[np.ndarray, int]:
    """``full_decode`` of a file whose decode ends early (``decode_to_failure``)."""
    with open_input(io.BytesIO(data)) as container:
        audio, rate, _ = decode_to_failure(container)
    return audio, rate


def decode_first_stream(container: av.container.InputContainer) -> tuple[np.ndarray, int]:
    """Every sample of an open container's first audio stream, in order, and
    the rate the decoder outputs (the first frame's: a stream header can
    state HE-AAC's core rate); ``NoSamples`` when it decodes to nothing, and
    what FFmpeg raises when it fails on the way."""
    audio, rate, failure = decode_to_failure(container)
    if failure is not None:
        raise failure
    return audio, rate


def decode_to_failure(
    container: av.container.InputContainer,
) -> tuple[np.ndarray, int, av.FFmpegError | None]:
    """``decode_first_stream`` of a stream whose decode may end early: the
    frames FFmpeg outputs before its decoder rejects a packet or its demuxer
    fails (a file cut short inside a packet, damaged bytes), where the full
    decode ends (docs/decoding.md), and that failure (None: none). A
    failure before the first frame raises."""
    frames: list[av.AudioFrame] = []
    failure = None
    try:
        for frame in container.decode(container.streams.audio[0]):
            frames.append(frame)
    except av.FFmpegError as exc:
        if not frames:
            raise
        failure = exc
    if not sum(f.samples for f in frames):
        raise NoSamples("decodes to no samples")
    audio = np.concatenate([frame_to_float32(f) for f in frames], axis=1)
    return audio, frames[0].sample_rate, failure
