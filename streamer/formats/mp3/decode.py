"""MPEG audio (mp3, mp2, mp1): frames decoded straight from the planned bytes.

No demuxer: FFmpeg's parser splits the data range into frames and a bare
decoder, the one a demuxed decode uses (``DECODERS``), decodes them. Every
frame yields ``samples_per_frame`` samples, so a frame's native position is
the seek point's plus a count. The bit reservoir lets a frame borrow up to
511 bytes of the frames before it; the indexer counts how many frames back
that reaches (``SeekIndex.preroll``, when more than ``PREROLL_FRAMES``), so
decoding starts ``preroll_frames`` before the crop (``CropPlan.decode_from``),
where the output equals a full decode exactly; the frames before those and
after the crop's last are parsed but not decoded.
"""

from __future__ import annotations

import numpy as np

from ...index.table import SeekIndex
from ..ffmpeg import new_decoder
from ..job import CropPlan, DecodeContext, Fetched, to_gapless, to_native
from ..packets import decode_into, split_packets
from .parse import PREROLL_FRAMES, samples_per_frame

__all__ = ["DECODERS", "decode", "frame_samples", "preroll_frames"]

#: The decoder FFmpeg picks for each codec in a demuxed decode (the first it
#: registers): the float one for layer III, the fixed-point ones for I and II.
DECODERS = {"mp3": "mp3float", "mp2": "mp2", "mp1": "mp1"}


def frame_samples(index: SeekIndex) -> int:
    """Samples per frame of the indexed stream (MPEG-2/2.5 rates are below 32 kHz)."""
    return samples_per_frame(int(index.codec[2]), lsf=index.sample_rate < 32000)


def preroll_frames(index: SeekIndex) -> int:
    """Frames decoded before the crop's first: the default, or what the
    indexer found the bit reservoir needs."""
    return max(PREROLL_FRAMES, -(-index.preroll // frame_samples(index)))


def decode(
    index: SeekIndex, plan: CropPlan, fetched: Fetched, context: DecodeContext
) -> tuple[np.ndarray, int]:
    """Decoded samples and the gapless index of their first sample."""
    decoder = new_decoder(DECODERS[index.codec])
    per_frame = frame_samples(index)
    packets = split_packets(decoder, fetched.data)
    skip = (plan.decode_from - plan.start_native) // per_frame
    first_native = plan.start_native + skip * per_frame
    # The frames up to the one holding the crop's last sample: the data runs
    # on to the next seek point, whose frames would only be thrown away.
    count = -(-(to_native(index, plan.last) - first_native) // per_frame)
    out = context.buffer(index.channels, count * per_frame)
    decode_into(decoder, packets[skip : skip + count], context, out, lengths=per_frame)
    return out.samples(), to_gapless(index, first_native)
