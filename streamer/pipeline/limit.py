"""The physical limit of a crop: decoding exactly its audio, and nothing else.

A crop cannot cost less CPU than decoding the packets that hold its samples.
``PureDecode`` demuxes an episode once, up front and untimed, and then
decodes the packets overlapping a crop with a fresh decoder: no pre-roll,
no I/O, no seeking, no trimming, resampling or process boundary; its
frames become one float32 array the way the formats' decoders make theirs
(``frames.SampleBuffer``), so a faster conversion lowers the limit too. ``limit``
times that on a list of crops with the CPU clock; ``streamer bench`` divides
the pipeline's CPU per crop by it (docs/performance.md).

It is a yardstick, not a decode path: without pre-roll the first frames of
mp3, AAC or Opus come out wrong, and a PCM episode goes through FFmpeg's PCM
decoder where streamer converts the bytes with numpy (so its ratio can be
under 1).
"""

from __future__ import annotations

import io
import time
from collections.abc import Iterable

import numpy as np

from ..formats.ffmpeg import new_decoder, open_input
from ..formats.frames import SampleBuffer
from ..formats.packets import padded_packet

__all__ = ["PureDecode", "limit_seconds"]

#: FFmpeg's float mp3 decoder, as the mp3 format uses (``mp3`` alone is the fixed-point one).
_DECODERS = {"mp3": "mp3float"}


class PureDecode:
    """An episode's packets, demuxed up front, each crop's through a fresh decoder."""

    def __init__(self, data: bytes) -> None:
        with open_input(io.BytesIO(data)) as container:
            stream = container.streams.audio[0]
            context = stream.codec_context
            self.codec = _DECODERS.get(context.name, context.name)
            self.extradata = context.extradata
            self.rate = context.sample_rate
            self.layout = context.layout.name
            self.channels = context.layout.nb_channels
            scale = stream.time_base * self.rate
            packets = [(p.pts, p.duration, bytes(p)) for p in container.demux(stream) if p.size]
        self.starts = np.array([int(pts * scale) for pts, _, _ in packets], dtype=np.int64)
        self.ends = np.array([int((pts + d) * scale) for pts, d, _ in packets], dtype=np.int64)
        self.packets = [raw for _, _, raw in packets]

    def __call__(self, start: float, end: float) -> np.ndarray:
        """Float32 ``(channels, n)``: the packets overlapping ``[start, end)`` s, decoded."""
        first = int(np.searchsorted(self.ends, start * self.rate, side="right"))
        last = int(np.searchsorted(self.starts, end * self.rate, side="left"))
        context = new_decoder(self.codec)
        if self.extradata:
            context.extradata = self.extradata
        if not context.sample_rate:  # raw PCM states nothing in extradata
            context.sample_rate = self.rate
            context.layout = self.layout
        out = SampleBuffer(
            self.channels, int(self.ends[last - 1] - self.starts[first]) if last > first else 0
        )
        for raw in self.packets[first:last]:
            for frame in context.decode(padded_packet(raw)):
                out.add_frame(frame)
        return out.samples()


def limit_seconds(episodes: Iterable[tuple[bytes, list[tuple[float, float]]]]) -> float:
    """CPU seconds of ``PureDecode`` over each episode's crops ``(start, end)``
    (the demux of each episode is not counted)."""
    seconds = 0.0
    for data, crops in episodes:
        pure = PureDecode(data)
        for start, end in crops:
            began = time.process_time()
            pure(start, end)
            seconds += time.process_time() - began
    return seconds
