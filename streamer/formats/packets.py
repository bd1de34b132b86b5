"""Feeding packets to a PyAV codec context, robustly.

A packet the decoder rejects is skipped and counted, never fatal; a decoder
that swallows packet after packet without output is stopped, not spun.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

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
    packets: Sequence[av.Packet],
    context: DecodeContext,
    *,
    channels: int,
    lengths: int | Sequence[int] = 0,
    offsets: Sequence[int] = (),
    exact: bool = False,
) -> Iterator[tuple[int, np.ndarray]]:
    """Yield ``(packet number, samples)`` per decoded frame.

    ``lengths`` are the samples each packet decodes to (one number for all;
    0: unknown) and ``offsets`` their blob offsets (for the log line of a bad
    one). A rejected packet yields its length in zero samples, so codecs
    positioned by count stay aligned, and is counted (``context.bad_packet``).
    With ``exact``, a packet must decode to exactly its length: less is
    padded with zeros and more replaced by them, both counted (FLAC's decoder
    returns the valid frame at a packet's start and drops damaged bytes after
    it without a word). A stalled decoder is a ``CropError`` naming the episode.
    """
    silent = 0
    for number, packet in enumerate(packets):
        length = lengths if isinstance(lengths, int) else lengths[number]
        offset = offsets[number] if offsets else None
        try:
            frames = decoder.decode(packet)
        except (av.FFmpegError, ValueError) as exc:
            context.bad_packet(f"decoder rejected it ({exc})", offset)
            if length:
                yield number, np.zeros((channels, length), dtype=np.float32)
            continue
        silent = 0 if frames else silent + 1
        if silent > MAX_SILENT_PACKETS:
            raise context.error(f"decoder produced nothing for {silent} packets in a row")
        pieces = [frame_to_float32(frame) for frame in frames]
        if exact:
            pieces = _exactly(pieces, length, channels, context, offset)
        for samples in pieces:
            yield number, samples


def _exactly(
    pieces: list[np.ndarray], length: int, channels: int, context: DecodeContext, offset: int | None
) -> list[np.ndarray]:
    """One packet's output made ``length`` samples long (zeros for what is
    missing; all zeros when there is too much), counted when it was not."""
    got = sum(piece.shape[1] for piece in pieces)
    if got == length:
        return pieces
    context.bad_packet(f"decoded {got} samples where its frame has {length}", offset)
    if got > length:
        return [np.zeros((channels, length), dtype=np.float32)]
    return [*pieces, np.zeros((channels, length - got), dtype=np.float32)]
