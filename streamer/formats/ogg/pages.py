"""Ogg pages, parsed once for indexing and decoding alike (RFC 3533).

A page is a 27-byte header (capture pattern, version, flags, granule
position, serial, sequence, CRC, segment count), the lacing values and the
body. Packets are cut from bodies by the lacing values: a value below 255
ends a packet, so a packet can continue over several pages.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Iterator
from typing import NamedTuple

from ..reader import Reader

__all__ = [
    "BOS",
    "CONTINUED",
    "EOS",
    "HEADER",
    "MAX_PAGE",
    "Damage",
    "Page",
    "checked_pages",
    "first_damaged_page",
    "ogg_crc",
    "page_at",
    "scan",
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
    return _reverse32(raw)


def _reverse32(value: int) -> int:
    return int(f"{value:032b}"[::-1], 2)


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


def scan(reader: Reader, on_damage: Callable[[Damage], None] | None = None) -> Iterator[Page]:
    """Every page with a valid CRC, in order; garbage between pages is skipped
    (the next page says so in ``after_gap``); a truncated last page ends it.
    ``on_damage`` hears of each whole page skipped because its CRC (or its
    version) fails, as it is skipped: among the bytes skipped, the ones
    that are certainly damage (``first_damaged_page``)."""
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
            if on_damage is not None:
                on_damage(Damage(base + i, base + i + _page_length(buf, i)))
        gap = True
        j = buf.find(b"OggS", i + 1)
        reader.seek(base + (j if j >= 0 else max(i + 1, len(buf) - 3)))


def _truncated(buf: bytes, i: int) -> bool:
    """True when the page at ``i`` runs past the end of the buffer (the stream)."""
    count = buf[i + 26]
    if i + 27 + count > len(buf):
        return True
    return i + _page_length(buf, i) > len(buf)


def _page_length(buf: bytes, i: int) -> int:
    """The length the page at ``i`` states (header, lacing values, body),
    its lacing values in ``buf``."""
    count = buf[i + 26]
    return 27 + count + sum(buf[i + 27 : i + 27 + count])


def first_damaged_page(reader: Reader) -> Damage | None:
    """The first whole page of an Ogg file (``reader`` at its first byte)
    whose CRC fails, or None. Read as the index reads it (``scan``), a page
    at a time: other bytes that are no page (garbage between pages, a last
    page cut short by the end of the file) are not damage, the index and
    FFmpeg pass over them alike."""
    damage: list[Damage] = []
    for _ in scan(reader, damage.append):
        if damage:
            break
    return damage[0] if damage else None


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


class Damage(NamedTuple):
    """Bytes ``[offset, end)`` that are not a whole page with a valid CRC."""

    offset: int
    end: int


def checked_pages(data: bytes | memoryview) -> Iterator[Page | Damage]:
    """The pages of ``data``, bytes that start on a page (a crop's planned
    ranges), each checked against its CRC. Bytes that are not a whole page
    with a valid CRC come out as one ``Damage`` reaching to the next page
    that is (or the end), so a decoder can drop them and know it did.

    The bytes are bit-reversed once, not page by page, and CRCs run over
    views of them: about 2 µs per KiB (``page_at`` copies each page thrice).
    """
    buf = bytes(data)
    reversed_bits = memoryview(buf.translate(_REVERSED_BITS))
    i = 0
    while i < len(buf):
        page = _checked_page(buf, reversed_bits, i)
        if page is not None:
            yield page
            i = page.end
            continue
        j = buf.find(b"OggS", i + 1)
        while j >= 0 and _checked_page(buf, reversed_bits, j) is None:
            j = buf.find(b"OggS", j + 1)
        end = j if j >= 0 else len(buf)
        yield Damage(i, end)
        i = end


def _checked_page(buf: bytes, reversed_bits: memoryview, i: int) -> Page | None:
    """The page at ``buf[i]`` if it is whole and its CRC holds, else None."""
    if len(buf) - i < 27 or not buf.startswith(b"OggS", i):
        return None
    _, version, flags, granule, serial, sequence, crc, count = HEADER.unpack_from(buf, i)
    body_start = i + 27 + count
    lacing = buf[i + 27 : body_start]
    end = body_start + sum(lacing)
    if version != 0 or end > len(buf):
        return None
    # Ogg's CRC of the page with its CRC field zeroed (zeros reverse to zeros).
    raw = zlib.crc32(reversed_bits[i : i + 22], 0xFFFFFFFF)
    raw = zlib.crc32(reversed_bits[i + 26 : end], zlib.crc32(b"\0\0\0\0", raw))
    if _reverse32(raw ^ 0xFFFFFFFF) != crc:
        return None
    return Page(i, flags, granule, serial, sequence, lacing, buf[body_start:end], False)
