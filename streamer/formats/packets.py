"""Feeding packets to a PyAV codec context, robustly.

A packet the decoder rejects is skipped and counted, never fatal; a decoder
that swallows packet after packet without output is stopped, not spun.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import av
import numpy as np

from .frames import frame_to_float32
from .job import DecodeContext

__all__ = ["MAX_SILENT_PACKETS", "decode_packets", "split_packets"]

#: Consecutive packets without output before the decoder is given up on.
MAX_SILENT_PACKETS = 64


def split_packets(context: av.CodecContext, data: memoryview) -> list[av.Packet]:
    """Cut raw codec data into packets with FFmpeg's parser.

    Parsers hold frames back until they see what follows; ``parse(None)``
    releases one held frame per call, so flush until it gives nothing (the
    bound only guards against a parser that never stops).
    """
    packets = list(context.parse(data))
    for _ in range(len(data) // 16 + 16):
        held = context.parse(None)
        if not held:
            break
        packets += held
    return packets


def decode_packets(
    decoder: av.CodecContext,
    packets: Iterable[av.Packet],
    context: DecodeContext,
    *,
    channels: int,
    on_bad: int = 0,
) -> Iterator[tuple[int, np.ndarray]]:
    """Yield ``(packet number, samples)`` per decoded frame.

    A rejected packet yields ``on_bad`` zero samples (its nominal length, so
    codecs positioned by frame count stay aligned) and is counted in
    ``context.stats``; a stalled decoder is a ``CropError`` naming the episode.
    """
    silent = 0
    for number, packet in enumerate(packets):
        try:
            frames = decoder.decode(packet)
        except (av.FFmpegError, ValueError):
            context.stats.bad_packets += 1
            if on_bad:
                yield number, np.zeros((channels, on_bad), dtype=np.float32)
            continue
        if not frames:
            silent += 1
            if silent > MAX_SILENT_PACKETS:
                raise context.error(f"decoder produced nothing for {silent} packets in a row")
            continue
        silent = 0
        for frame in frames:
            yield number, frame_to_float32(frame)
