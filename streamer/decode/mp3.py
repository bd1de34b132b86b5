"""MPEG audio (mp3, mp2, mp1): frames decoded straight from the planned bytes.

No demuxer: FFmpeg's parser splits the data range into frames and a bare
``mp3float`` decoder (the float one a demuxed decode uses, not the s16
``mp3``) decodes them. Every frame yields ``samples_per_frame`` samples, so a
frame's native position is the seek point's plus a count. The bit reservoir
lets a frame borrow bytes from up to a few frames before it; after
``PREROLL_FRAMES`` decoded frames the output equals a full decode exactly,
so decoding starts that many frames before the crop and frames before those
are parsed but not decoded.
"""

from __future__ import annotations

import av
import numpy as np

from ..index.table import SeekIndex
from .frames import concat
from .packets import decode_packets, split_packets
from .plan import CropPlan, Fetched, to_gapless
from .stats import DecodeStats

__all__ = ["DECODERS", "PREROLL_FRAMES", "decode", "preroll"]

PREROLL_FRAMES = 5
DECODERS = {"mp3": "mp3float", "mp2": "mp2float", "mp1": "mp1float"}


def samples_per_frame(index: SeekIndex) -> int:
    """Layer I: 384; Layer II: 1152; Layer III: 1152 (MPEG-1) or 576 (MPEG-2/2.5)."""
    if index.codec == "mp1":
        return 384
    if index.codec == "mp2" or index.sample_rate >= 32000:
        return 1152
    return 576


def preroll(index: SeekIndex) -> int:
    """``PREROLL_FRAMES`` frames, in native units."""
    return PREROLL_FRAMES * samples_per_frame(index)


def decode(
    index: SeekIndex,
    plan: CropPlan,
    fetched: Fetched,
    stats: DecodeStats,
    where: dict[str, object],
) -> tuple[np.ndarray, int]:
    """Decoded samples and the gapless index of their first sample."""
    context = av.CodecContext.create(DECODERS[index.codec], "r")
    per_frame = samples_per_frame(index)
    packets = split_packets(context, fetched.data)
    wanted = to_native_frame(index, plan, per_frame)
    skip = max(wanted - PREROLL_FRAMES, 0)
    first_native = plan.start_native + skip * per_frame
    pieces = [
        samples
        for _, samples in decode_packets(
            context,
            packets[skip:],
            stats,
            channels=index.channels,
            where=where,
            on_bad=per_frame,
        )
    ]
    return concat(pieces, index.channels), to_gapless(index, first_native)


def to_native_frame(index: SeekIndex, plan: CropPlan, per_frame: int) -> int:
    """How many frames after the seek point the crop's first sample lies."""
    native_first = index.first_sample + plan.first
    return (native_first - plan.start_native) // per_frame
