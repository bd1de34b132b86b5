"""FLAC: frames decoded straight from the planned bytes, exact from any frame.

FLAC frames are independent, so there is no pre-roll. The decoder needs
STREAMINFO as its extradata; FFmpeg's parser splits frames and holds the
last one back until it is flushed with ``parse(None)``.
"""

from __future__ import annotations

import av
import numpy as np

from ...index.table import SeekIndex
from ..frames import concat
from ..job import CropPlan, DecodeContext, Fetched, to_gapless
from ..packets import decode_packets, split_packets
from ..reader import NoIndex
from .parse import STREAMINFO_SIZE, streaminfo

__all__ = ["decode"]


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
    # A fixed block size (min == max) lets a rejected frame become silence of
    # the right length, keeping later frames in place.
    fixed = info.min_block if info.min_block == info.max_block else 0
    packets = split_packets(decoder, fetched.data)
    pieces = [
        samples
        for _, samples in decode_packets(
            decoder, packets, context, channels=index.channels, on_bad=fixed
        )
    ]
    return concat(pieces, index.channels), to_gapless(index, plan.start_native)
