"""FLAC: frames decoded straight from the planned bytes, exact from any frame.

FLAC frames are independent, so there is no pre-roll, and only the frames
that hold samples of the crop are decoded (the planned bytes run from the
seek point before it to the one after it). The decoder needs STREAMINFO as
its extradata.

Every frame carries two checksums: a CRC-8 over its header and a CRC-16
over the whole frame. Both are checked on the bytes a crop decodes, so a
damaged frame is counted and decoded as silence instead of as whatever the
flipped bits say. The frames are cut here, not by FFmpeg's parser, which
silently joins a frame whose header is damaged to the frame before it (its
samples vanish and everything after moves): a header is believed when it
passes its CRC-8, agrees with STREAMINFO and continues the frame before it
(or skips lost frames and is confirmed by its own successor), so every
packet's position and length are known before decoding. The CRC-16 is
checked by FFmpeg's decoder (``err_detect``), in C: about 0.2 µs per KiB,
where a table-driven CRC in Python costs 160 µs per KiB (docs/decoding.md).
"""

from __future__ import annotations

import re
from itertools import pairwise
from typing import BinaryIO, NamedTuple

import av
import numpy as np

from ...index.table import SeekIndex
from ..ffmpeg import new_decoder
from ..job import CropPlan, DecodeContext, Fetched, to_gapless, to_native
from ..packets import decode_into, padded_packet
from ..reader import NoIndex, Reader
from .parse import (
    CHECK_CRC,
    STREAMINFO_SIZE,
    FrameHeader,
    StreamInfo,
    frame_header,
    metadata,
    streaminfo,
)

__all__ = ["Frame", "decode", "first_damaged_frame", "frames"]

#: A frame's first two bytes (fixed or variable block size). A regular
#: expression finds them twice as fast as ``bytes.find`` (0xff is common).
_SYNC = re.compile(rb"\xff[\xf8\xf9]")
#: Bytes of frames ``first_damaged_frame`` checks at a time, and the most it
#: reads for one frame: a FLAC frame is at most about 2 MiB (65535 samples
#: of 8 channels of 32 bits, stored verbatim).
_SCAN_BYTES = 1 << 20
_MAX_SCAN_BYTES = 1 << 23


class Frame(NamedTuple):
    """A frame header found in the planned bytes: where it starts in them,
    its first sample (native) and its block size, and what it must agree with."""

    offset: int
    position: int
    block: int
    kind: tuple[bool, tuple[int, int, int]]  # (variable block size, header shape)


def decode(
    index: SeekIndex, plan: CropPlan, fetched: Fetched, context: DecodeContext
) -> tuple[np.ndarray, int]:
    """Decoded samples and the gapless index of their first sample."""
    try:
        decoder, info = _checking_decoder(fetched.header)
    except NoIndex:
        raise context.error("FLAC header range does not start with STREAMINFO") from None
    data = bytes(fetched.data)  # a memory map's view may index as signed bytes
    found = frames(data, info, plan.start_native)
    lo, hi = to_native(index, plan.first), to_native(index, plan.last)
    spans = [b.position - a.position for a, b in pairwise(found)] + [f.block for f in found[-1:]]
    wanted = [
        (frame, span)
        for frame, span in zip(found, spans, strict=True)
        if frame.position < hi and frame.position + span > lo
    ]
    if not wanted:
        raise context.error(
            f"no FLAC frame holds samples [{lo}, {hi}) in the {len(data)} planned bytes",
            plan.data[0],
        )
    start = wanted[0][0].position
    # What a frame and any damaged bytes after it stand for, as far as the
    # crop needs: the silence that replaces them is bounded.
    lengths = [max(frame.block, min(span, hi - frame.position)) for frame, span in wanted]
    out = context.buffer(index.channels, max(start - lo, 0) + sum(lengths))
    if start > lo:  # the first frame's header is damaged
        context.bad_packet("no FLAC frame header where the planned bytes start", plan.data[0])
        out.add_silence(start - lo)
    view = memoryview(data)
    ends = {a.offset: b.offset for a, b in pairwise(found)}
    packets = [padded_packet(view[frame.offset : ends.get(frame.offset)]) for frame, _ in wanted]
    offsets = [plan.data[0] + frame.offset for frame, _ in wanted]
    decode_into(decoder, packets, context, out, lengths=lengths, offsets=offsets, exact=True)
    return out.samples(), to_gapless(index, min(start, lo))


def _checking_decoder(header: bytes) -> tuple[av.CodecContext, StreamInfo]:
    """A decoder that checks each frame's CRC-16, set up from the file's
    first bytes (``fLaC`` and the STREAMINFO block, with its 4-byte block
    header), and the STREAMINFO; ``NoIndex`` when they are not those."""
    body = header[8 : 8 + STREAMINFO_SIZE]
    if header[:4] != b"fLaC" or len(header) < 5 or header[4] & 0x7F:
        raise NoIndex("no STREAMINFO")
    info = streaminfo(body)
    decoder = new_decoder("flac")
    decoder.extradata = body
    decoder.options = CHECK_CRC
    return decoder, info


def first_damaged_frame(stream: BinaryIO) -> tuple[int, int] | None:
    """The first frame of a FLAC file (``stream`` at its first byte) that a
    crop would count as damaged, as ``(offset, length)``; None when none is
    (or the metadata cannot be read: nothing to tell frames by). Frames are
    cut as a crop cuts them (``frames``: a header failing its CRC-8 leaves
    its bytes to the frame before) and decoded with the CRC-16 check on, a
    chunk at a time: a frame is damaged when the decoder rejects it or it
    does not decode to the samples up to the next frame. Decoding is how
    the CRC-16 is checked in C (``CHECK_CRC``); it costs about one FFmpeg
    decode of the file, which only an index check that failed pays."""
    reader = Reader(stream)
    buf, i = reader.window(8 + STREAMINFO_SIZE)
    try:
        decoder, _ = _checking_decoder(buf[i : i + 8 + STREAMINFO_SIZE])
        info, offset = metadata(reader)
    except NoIndex:
        return None
    position: int | None = None  # the native position of the frame at ``offset``
    size = _SCAN_BYTES
    while True:
        reader.seek(offset)
        buf, i = reader.window(size)
        data = buf[i:]
        end = reader.ends_at(offset + len(data))
        if position is None:
            position = _position(frame_header(data, 0), info)
        found = frames(data, info, position)
        if not found or found[0].offset:  # no frame header where the frames start
            return offset, found[0].offset if found else len(data)
        # No frame after the last one within any frame's length: what follows is no frames.
        last = end or (len(found) == 1 and size >= _MAX_SCAN_BYTES)
        whole = found if last else found[:-1]
        if not whole:
            size *= 2  # one frame larger than the chunk: read on to its end
            continue
        bounds = [f.offset for f in found[1:]] + [len(data)]
        spans = [b.position - a.position for a, b in pairwise(found)] + [found[-1].block]
        for frame, stop, span in zip(whole, bounds, spans, strict=False):
            if not _decodes_to(decoder, data[frame.offset : stop], span):
                return offset + frame.offset, stop - frame.offset
        if last:
            return None
        offset, position, size = offset + found[-1].offset, found[-1].position, _SCAN_BYTES


def _position(header: FrameHeader | None, info: StreamInfo) -> int:
    """The native position a frame header states, as ``frames`` counts it
    (0 for a header that does not hold: the next frame is then taken as
    frames lost, confirmed by its successor)."""
    if header is None:
        return 0
    return header.number if header.variable else header.number * info.max_block


def _decodes_to(decoder: av.CodecContext, frame: bytes, samples: int) -> bool:
    """Whether ``frame`` passes the decoder's checks and decodes to ``samples``
    (FFmpeg's decoder drops damaged bytes after a valid frame without a word)."""
    try:
        return sum(f.samples for f in decoder.decode(padded_packet(frame))) == samples
    except (av.FFmpegError, ValueError):
        return False


def frames(data: bytes, info: StreamInfo, start: int) -> list[Frame]:
    """The frames of ``data``, bytes that start with the frame at native
    position ``start``. A header counts when its CRC-8 holds, its channels
    are STREAMINFO's, it is of the kind of the first frame, and it starts
    where the frame before it ends, or later (the headers in between were
    damaged) when the next header confirms it. Bytes up to the next header
    that counts belong to the frame before it."""
    candidates = []
    for match in _SYNC.finditer(data):
        offset = match.start()
        header = frame_header(data, offset)
        if header is None or header.shape[1] != info.channels:
            continue
        kind = (header.variable, header.shape)
        candidates.append(Frame(offset, _position(header, info), header.block, kind))
    starts = {(frame.kind, frame.position) for frame in candidates}
    found: list[Frame] = []
    expected = start
    for frame in candidates:
        if found and frame.kind != found[0].kind:
            continue
        confirmed = (frame.kind, frame.position + frame.block) in starts
        if frame.position == expected or (frame.position > expected and confirmed):
            found.append(frame)
            expected = frame.position + frame.block
    return found
