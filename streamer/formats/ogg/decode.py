"""Ogg Vorbis and Opus: packets cut out of the planned pages, decoded bare.

The data range starts on a page whose first packet starts there; packets are
cut by the pages' lacing values (``pages.py``) and fed to a bare decoder
whose extradata comes from the header pages. Decoders drop what they cannot
output yet (Vorbis primes with the first packet, Opus skips its pre-skip), so
the output is placed by a page's granule instead of by counting: after the
packets that end on a page with granule ``G`` have been decoded, the output
so far ends at native position ``G``. The last page is never the anchor,
because its granule may cut the stream short of what was decoded.
"""

from __future__ import annotations

from collections.abc import Iterator

import av
import numpy as np

from ...index.table import SeekIndex
from ..frames import concat
from ..job import CropPlan, DecodeContext, Fetched, to_gapless
from ..packets import decode_packets
from .pages import EOS, Page, unchecked_page

__all__ = ["PREROLL_SECONDS", "decode"]

#: Seconds decoded before a crop and thrown away. Vorbis needs one block's
#: overlap; Opus's decoder converges slowly after a cold start (measured
#: here: max error 2e-8 against the full decode after 0.5 s).
PREROLL_SECONDS = {"vorbis": 0.05, "opus": 0.5}


def packets_by_page(data: memoryview | bytes) -> Iterator[tuple[Page, list[bytes]]]:
    """Each page of ``data`` with the packets completed on it; a packet
    continued past the end of ``data`` is dropped. ``ValueError`` when the
    bytes are not pages."""
    offset, partial = 0, b""
    while offset + 27 <= len(data):
        page = unchecked_page(data, offset)
        done = []
        for piece, complete in page.packets():
            partial += bytes(piece)
            if complete:
                done.append(partial)
                partial = b""
        offset = page.end
        yield page, done


def _xiph_extradata(headers: list[bytes]) -> bytes:
    """Vorbis's three header packets in FFmpeg's Xiph-laced extradata form."""
    lacing = b"".join(b"\xff" * (len(h) // 255) + bytes([len(h) % 255]) for h in headers[:2])
    return b"\x02" + lacing + b"".join(headers)


def decode(
    index: SeekIndex, plan: CropPlan, fetched: Fetched, context: DecodeContext
) -> tuple[np.ndarray, int]:
    """Decoded samples and the gapless index of their first sample."""
    headers = [p for _, done in packets_by_page(fetched.header) for p in done]
    decoder = av.CodecContext.create(index.codec, "r")
    if index.codec == "vorbis":
        decoder.extradata = _xiph_extradata(headers[:3])
    else:
        decoder.extradata = headers[0]
    packets: list[av.Packet] = []
    #: The page whose granule marks the end of packet ``i``, if it is the last
    #: packet completed on that page (None for the others).
    closes: list[Page | None] = []
    for page, done in packets_by_page(fetched.data):
        if done:
            packets += [av.Packet(p) for p in done]
            closes += [None] * (len(done) - 1) + [page]
    pieces: list[np.ndarray] = []
    produced, anchor = 0, None
    for number, samples in decode_packets(decoder, packets, context, channels=index.channels):
        pieces.append(samples)
        produced += samples.shape[1]
        page = closes[number]
        if anchor is None and page is not None and not page.flags & EOS and page.granule >= 0:
            anchor = page.granule - produced
    if anchor is None:
        raise context.error("no Ogg page to place the decoded samples by")
    return concat(pieces, index.channels), to_gapless(index, anchor)
