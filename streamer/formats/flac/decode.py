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
from typing import NamedTuple

import av
import numpy as np

from ...index.table import SeekIndex
from ..job import CropPlan, DecodeContext, Fetched, to_gapless, to_native
from ..packets import decode_into, padded_packet
from ..reader import NoIndex
from .parse import STREAMINFO_SIZE, StreamInfo, frame_header, streaminfo

__all__ = ["Frame", "decode", "frames"]

#: A frame's first two bytes (fixed or variable block size). A regular
#: expression finds them twice as fast as ``bytes.find`` (0xff is common).
_SYNC = re.compile(rb"\xff[\xf8\xf9]")
#: FFmpeg's decoder checks each frame's CRC-16 and rejects a frame that fails.
_CHECK_CRC = {"err_detect": "crccheck+explode"}


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
    decoder = av.CodecContext.create("flac", "r")
    # The header range starts with ``fLaC`` and the STREAMINFO block's 4-byte header.
    header = fetched.header
    body = header[8 : 8 + STREAMINFO_SIZE]
    try:
        if header[:4] != b"fLaC" or header[4] & 0x7F:
            raise NoIndex("no STREAMINFO")
        info = streaminfo(body)
    except NoIndex:
        raise context.error("FLAC header range does not start with STREAMINFO") from None
    decoder.extradata = body
    decoder.options = _CHECK_CRC
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


def frames(data: bytes, info: StreamInfo, start: int) -> list[Frame]:
    """The frames of ``data``, bytes that start with the frame at native
    position ``start``. A header counts when its CRC-8 holds, its channels
    are STREAMINFO's, it is of the kind of the first frame, and it starts
    where the frame before it ends, or later (the headers in between were
    damaged) when the next header confirms it. Bytes up to the next header
    that counts belong to the frame before it."""
    nominal = info.max_block  # a fixed-block-size stream's frame number counts these
    candidates = []
    for match in _SYNC.finditer(data):
        offset = match.start()
        header = frame_header(data, offset)
        if header is None or header.shape[1] != info.channels:
            continue
        position = header.number if header.variable else header.number * nominal
        kind = (header.variable, header.shape)
        candidates.append(Frame(offset, position, header.block, kind))
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
