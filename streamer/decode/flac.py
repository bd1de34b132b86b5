"""FLAC: frames decoded straight from the planned bytes, exact from any frame.

FLAC frames are independent, so there is no pre-roll. The decoder needs
STREAMINFO as its extradata; FFmpeg's parser splits frames and holds the
last one back until it is flushed with ``parse(None)``.
"""

from __future__ import annotations

import av
import numpy as np

from ..errors import CropError
from ..index.table import SeekIndex
from .frames import concat
from .packets import decode_packets, split_packets
from .plan import CropPlan, Fetched, to_gapless
from .stats import DecodeStats

__all__ = ["decode", "preroll"]

_STREAMINFO = 34


def streaminfo(header: bytes, where: dict[str, object]) -> bytes:
    """The STREAMINFO block body, which follows ``fLaC`` and its 4-byte block header."""
    if header[:4] != b"fLaC" or (header[4] & 0x7F) != 0 or len(header) < 8 + _STREAMINFO:
        raise CropError("FLAC header range does not start with STREAMINFO", **where)
    return bytes(header[8 : 8 + _STREAMINFO])


def preroll(index: SeekIndex) -> int:
    """FLAC frames are independent: none."""
    return 0


def decode(
    index: SeekIndex,
    plan: CropPlan,
    fetched: Fetched,
    stats: DecodeStats,
    where: dict[str, object],
) -> tuple[np.ndarray, int]:
    """Decoded samples and the gapless index of their first sample."""
    context = av.CodecContext.create("flac", "r")
    context.extradata = info = streaminfo(fetched.header, where)
    # A fixed block size (min == max) lets a rejected frame become silence of
    # the right length, keeping later frames in place.
    fixed = int.from_bytes(info[0:2], "big") if info[0:2] == info[2:4] else 0
    packets = split_packets(context, fetched.data)
    pieces = [
        samples
        for _, samples in decode_packets(
            context, packets, stats, channels=index.channels, where=where, on_bad=fixed
        )
    ]
    return concat(pieces, index.channels), to_gapless(index, plan.start_native)
