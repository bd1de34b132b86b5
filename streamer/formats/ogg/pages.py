"""Ogg pages, parsed once for indexing and decoding alike (RFC 3533).

A page is a 27-byte header (capture pattern, version, flags, granule
position, serial, sequence, CRC, segment count), the lacing values and the
body. Packets are cut from bodies by the lacing values: a value below 255
ends a packet, so a packet can continue over several pages.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from typing import NamedTuple

from ..reader import Reader

__all__ = [
    "BOS",
    "CONTINUED",
    "EOS",
    "HEADER",
    "MAX_PAGE",
    "Page",
    "ogg_crc",
    "page_at",
    "scan",
    "unchecked_page",
]

MAX_PAGE = 27 + 255 + 255 * 255
HEADER = struct.Struct("<4sBBqIIIB")
#: Header flags: continued packet, beginning of stream, end of stream.
CONTINUED, BOS, EOS = 1, 2, 4
_REVERSED_BITS = bytes(int(f"{b:08b}"[::-1], 2) for b in range(256))


def ogg_crc(page: bytes) -> int:
    """Ogg's CRC-32 (polynomial 0x04C11DB7, not reflected, no final xor).

    zlib computes the reflected form of the same polynomial, so the page is
    bit-reversed byte by byte and the result reversed back: C speed, no table
    loop in Python.
    """
    raw = zlib.crc32(page.translate(_REVERSED_BITS), 0xFFFFFFFF) ^ 0xFFFFFFFF
    return int(f"{raw:032b}"[::-1], 2)


class Page(NamedTuple):
    offset: int
    flags: int
    granule: int
    serial: int
    sequence: int
    lacing: bytes
    body: bytes
    after_gap: bool  # garbage was skipped right before this page

    @property
    def end(self) -> int:
        return self.offset + 27 + len(self.lacing) + len(self.body)

    def packets(self) -> Iterator[tuple[bytes, bool]]:
        """(data, complete) for each packet piece on the page, in order."""
        start = length = 0
        for value in self.lacing:
            length += value
            if value < 255:
                yield self.body[start : start + length], True
                start, length = start + length, 0
        if length:
            yield self.body[start : start + length], False


def scan(reader: Reader) -> Iterator[Page]:
    """Every page with a valid CRC, in order; garbage between pages is skipped
    (the next page says so in ``after_gap``); a truncated last page ends it."""
    gap = False
    while True:
        buf, i = reader.window(MAX_PAGE)
        base = reader.pos - i
        if len(buf) - i < 27:
            return
        if buf.startswith(b"OggS", i):
            page = page_at(buf, i, base, gap)
            if page is not None:
                yield page
                reader.seek(page.end)
                gap = False
                continue
            if len(buf) - i < MAX_PAGE and _truncated(buf, i):
                return
        gap = True
        j = buf.find(b"OggS", i + 1)
        reader.seek(base + (j if j >= 0 else max(i + 1, len(buf) - 3)))


def _truncated(buf: bytes, i: int) -> bool:
    """True when the page at ``i`` runs past the end of the buffer (the stream)."""
    count = buf[i + 26]
    if i + 27 + count > len(buf):
        return True
    return i + 27 + count + sum(buf[i + 27 : i + 27 + count]) > len(buf)


def page_at(buf: bytes, i: int, base: int = 0, gap: bool = False) -> Page | None:
    """The page at ``buf[i]`` (``base``: the buffer's offset in the stream),
    or None when it is not a whole, well-formed page with a valid CRC."""
    if len(buf) - i < 27:
        return None
    _, version, flags, granule, serial, sequence, crc, count = HEADER.unpack_from(buf, i)
    body_start = i + 27 + count
    if version != 0 or body_start > len(buf):
        return None
    lacing = buf[i + 27 : body_start]
    end = body_start + sum(lacing)
    if end > len(buf):
        return None
    page = buf[i:end]
    if ogg_crc(page[:22] + b"\0\0\0\0" + page[26:]) != crc:
        return None
    return Page(base + i, flags, granule, serial, sequence, lacing, buf[body_start:end], gap)


def unchecked_page(data: bytes | memoryview, offset: int) -> Page:
    """The page at ``data[offset]`` as it stands, for bytes whose CRCs were
    checked when indexing: a body running past the end of ``data`` is cut
    there. ``ValueError`` when no page starts at ``offset``."""
    capture, _, flags, granule, serial, sequence, _, count = HEADER.unpack_from(data, offset)
    if capture != b"OggS":
        raise ValueError(f"no Ogg page at data offset {offset}")
    lacing = bytes(data[offset + 27 : offset + 27 + count])
    body = data[offset + 27 + count : offset + 27 + count + sum(lacing)]
    return Page(offset, flags, granule, serial, sequence, lacing, body, False)
