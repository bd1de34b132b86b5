"""Ogg Vorbis and Opus: packets cut out of the planned pages, decoded bare.

The data range starts on a page whose first packet starts there; this module
splits pages into packets itself (lacing values) and feeds a bare decoder
whose extradata comes from the header pages. Decoders drop what they cannot
output yet (Vorbis primes with the first packet, Opus skips its pre-skip), so
the output is placed by a page's granule instead of by counting: after the
packets that end on a page with granule ``G`` have been decoded, the output
so far ends at native position ``G``. The last page is never the anchor,
because its granule may cut the stream short of what was decoded.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

import av
import numpy as np

from ..errors import CropError
from ..index.table import SeekIndex
from .frames import concat
from .packets import decode_packets
from .plan import CropPlan, Episode, Fetched, to_gapless
from .stats import DecodeStats

__all__ = ["decode", "preroll", "refine_plan"]

_PAGE = struct.Struct("<4sBBqIIIB")
_EOS = 0x04


@dataclass(frozen=True)
class _Page:
    granule: int
    last: bool  # end-of-stream flag
    packets: tuple[bytes, ...]  # packets that end on this page


def pages(data: memoryview) -> Iterator[_Page]:
    """Pages of ``data`` with the packets completed on each; a trailing
    packet continued past the data is dropped."""
    offset, partial = 0, b""
    while offset + _PAGE.size <= len(data):
        capture, _, flags, granule, _, _, _, count = _PAGE.unpack_from(data, offset)
        if capture != b"OggS":
            raise ValueError(f"no Ogg page at data offset {offset}")
        lacing = bytes(data[offset + _PAGE.size : offset + _PAGE.size + count])
        position = offset + _PAGE.size + count
        packets, start = [], position
        for value in lacing:
            position += value
            if value < 255:  # a packet ends here
                packets.append(partial + bytes(data[start:position]))
                partial, start = b"", position
        partial += bytes(data[start:position])
        offset = position
        yield _Page(granule, bool(flags & _EOS), tuple(packets))


def _xiph_extradata(headers: list[bytes]) -> bytes:
    """Vorbis's three header packets in FFmpeg's Xiph-laced extradata form."""
    lacing = b"".join(b"\xff" * (len(h) // 255) + bytes([len(h) % 255]) for h in headers[:2])
    return b"\x02" + lacing + b"".join(headers)


def _header_packets(header: bytes) -> list[bytes]:
    return [p for page in pages(memoryview(header)) for p in page.packets]


#: Seconds decoded before a crop and thrown away. Vorbis needs one block's
#: overlap; Opus's decoder converges slowly after a cold start (measured
#: here: max error 2e-8 against the full decode after 0.5 s).
PREROLL_SECONDS = {"vorbis": 0.05, "opus": 0.5}


def preroll(index: SeekIndex) -> int:
    return round(PREROLL_SECONDS[index.codec] * index.timescale)


def refine_plan(index: SeekIndex, plan: CropPlan, episode: Episode | None) -> CropPlan:
    """Never start on the last seek point: output is placed by the granule of
    a page other than the last (whose granule may trim the stream), so an
    earlier page must be decoded too."""
    if 0 < plan.point == len(index.sample_pos) - 1:
        return plan.starting_at(index, plan.point - 1)
    return plan


def decode(
    index: SeekIndex,
    plan: CropPlan,
    fetched: Fetched,
    stats: DecodeStats,
    where: dict[str, object],
) -> tuple[np.ndarray, int]:
    """Decoded samples and the gapless index of their first sample."""
    headers = _header_packets(fetched.header)
    context = av.CodecContext.create(index.codec, "r")
    if index.codec == "vorbis":
        context.extradata = _xiph_extradata(headers[:3])
    else:
        context.extradata = headers[0]
    packets: list[av.Packet] = []
    #: The page whose granule marks the end of packet ``i``, if it is the last
    #: packet completed on that page (None for the others).
    closes: list[_Page | None] = []
    for page in pages(fetched.data):
        if page.packets:
            packets += [av.Packet(p) for p in page.packets]
            closes += [None] * (len(page.packets) - 1) + [page]
    pieces: list[np.ndarray] = []
    produced, anchor = 0, None
    for number, samples in decode_packets(
        context, packets, stats, channels=index.channels, where=where
    ):
        pieces.append(samples)
        produced += samples.shape[1]
        page = closes[number]
        if anchor is None and page is not None and not page.last and page.granule >= 0:
            anchor = page.granule - produced
    if anchor is None:
        raise CropError("no Ogg page to place the decoded samples by", **where)
    return concat(pieces, index.channels), to_gapless(index, anchor)
