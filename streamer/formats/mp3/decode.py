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

from ...index.table import SeekIndex
from ..frames import concat
from ..job import CropPlan, DecodeContext, Fetched, to_gapless
from ..packets import decode_packets, split_packets
from .parse import samples_per_frame

__all__ = ["DECODERS", "PREROLL_FRAMES", "decode", "frame_samples"]

PREROLL_FRAMES = 5
DECODERS = {"mp3": "mp3float", "mp2": "mp2float", "mp1": "mp1float"}


def frame_samples(index: SeekIndex) -> int:
    """Samples per frame of the indexed stream (MPEG-2/2.5 rates are below 32 kHz)."""
    return samples_per_frame(int(index.codec[2]), lsf=index.sample_rate < 32000)


def decode(
    index: SeekIndex, plan: CropPlan, fetched: Fetched, context: DecodeContext
) -> tuple[np.ndarray, int]:
    """Decoded samples and the gapless index of their first sample."""
    decoder = av.CodecContext.create(DECODERS[index.codec], "r")
    per_frame = frame_samples(index)
    packets = split_packets(decoder, fetched.data)
    wanted = (index.first_sample + plan.first - plan.start_native) // per_frame
    # The index's own pre-roll, when its check found the default too short.
    preroll = max(PREROLL_FRAMES, -(-index.preroll // per_frame))
    skip = max(wanted - preroll, 0)
    first_native = plan.start_native + skip * per_frame
    pieces = [
        samples
        for _, samples in decode_packets(
            decoder, packets[skip:], context, channels=index.channels, lengths=per_frame
        )
    ]
    return concat(pieces, index.channels), to_gapless(index, first_native)
