"""Feeding packets to a PyAV codec context, robustly.

A packet the decoder rejects is skipped and counted, never fatal; a decoder
that swallows packet after packet without output is stopped, not spun.
Packets cut from a blob's bytes are copied into FFmpeg's own padded buffers
(``padded_packet``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import av

from .frames import SampleBuffer
from .job import DecodeContext

__all__ = ["MAX_SILENT_PACKETS", "decode_into", "decode_packets", "padded_packet", "split_packets"]

#: Consecutive packets without output before the decoder is given up on.
MAX_SILENT_PACKETS = 64


def padded_packet(data: bytes | memoryview) -> av.Packet:
    """A packet of a copy of ``data`` followed by the zeroed padding FFmpeg's
    decoders may read past a packet's end.

    ``av.Packet(data)`` points at ``data`` itself, unpadded: a decoder then
    reads whatever memory follows (the next Python object, or past the end
    of a shard's memory map). Opus's range decoder does, and its output
    changed from run to run: narrowband SILK crops up to 0.1 off the full
    decode in about one run in five, where FFmpeg's demuxer pads its packets.
    """
    packet = av.Packet(len(data))
    if len(data):
        memoryview(packet)[:] = data
    return packet


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
    out: SampleBuffer,
    *,
    lengths: int | Sequence[int] = 0,
    offsets: Sequence[int] = (),
    exact: bool = False,
) -> Iterator[tuple[int, int]]:
    """Decode each packet into ``out`` and yield ``(packet number, samples
    it added)``.

    ``lengths`` are the samples each packet decodes to (one number for all;
    0: unknown) and ``offsets`` their blob offsets (for the log line of a bad
    one). A rejected packet adds its length in silence, so codecs positioned
    by count stay aligned, and is counted (``context.bad_packet``). With
    ``exact``, a packet must decode to exactly its length: less is padded
    with silence and more replaced by it, both counted (FLAC's decoder
    returns the valid frame at a packet's start and drops damaged bytes after
    it without a word). A stalled decoder is a ``CropError`` naming the episode.
    """
    silent = 0
    for number, packet in enumerate(packets):
        length = lengths if isinstance(lengths, int) else lengths[number]
        offset = offsets[number] if offsets else None
        before = out.length
        try:
            frames = decoder.decode(packet)
        except (av.FFmpegError, ValueError) as exc:
            context.bad_packet(f"decoder rejected it ({exc})", offset)
            out.add_silence(length)
            yield number, length
            continue
        silent = 0 if frames else silent + 1
        if silent > MAX_SILENT_PACKETS:
            raise context.error(f"decoder produced nothing for {silent} packets in a row")
        for frame in frames:
            out.add_frame(frame)
        got = out.length - before
        if exact and got != length:
            context.bad_packet(f"decoded {got} samples where its frame has {length}", offset)
            if got > length:
                out.truncate(before)
            out.add_silence(length - (out.length - before))
            got = length
        yield number, got


def decode_into(
    decoder: av.CodecContext,
    packets: Sequence[av.Packet],
    context: DecodeContext,
    out: SampleBuffer,
    **options: Any,
) -> None:
    """``decode_packets`` run to the end, for a caller that needs no
    per-packet counts."""
    for _ in decode_packets(decoder, packets, context, out, **options):
        pass
