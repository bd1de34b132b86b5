"""A QuickTime sound description: an audio sample entry (``stsd``) as
FFmpeg's MOV demuxer reads it, by its sound description version: the
channels and rate (a version 2 entry, which FFmpeg's ``mov`` muxer writes
above 65535 Hz, states them after the fixed fields, its 16.16 rate field
saying 1), and the child boxes after the fixed fields (a version 1 entry
has 16 bytes more, a version 2 one 36), those inside a QuickTime ``wave``
box too, where the ``mov`` muxer puts a codec's configuration (ALAC's magic
cookie, after a ``frma`` box whose payload is the fourcc again: a byte
search for the cookie found that first).

The layout only, shared: which codec and configuration those fields and
boxes give is ``entry``'s to say, and for PCM ``pcm``'s."""

from __future__ import annotations

import struct

__all__ = ["CHILDREN_AT", "audio_format", "children", "version"]

#: Where a sample entry's child boxes start, by its version.
CHILDREN_AT = {0: 36, 1: 52, 2: 72}


def version(entry: bytes) -> int:
    """The sound description version of ``entry`` (the whole entry, from its size field)."""
    return struct.unpack_from(">H", entry, 16)[0]


def audio_format(entry: bytes) -> tuple[int, int, int]:
    """(channels, bits per sample, sample rate) ``entry`` states; a version
    2 entry's rate is a double (rounded), its channels and bits 32-bit."""
    channels, bits = struct.unpack_from(">HH", entry, 24)
    rate = struct.unpack_from(">I", entry, 32)[0] >> 16
    if version(entry) == 2 and len(entry) >= CHILDREN_AT[2]:
        rate = round(struct.unpack_from(">d", entry, 40)[0])
        channels, _, bits = struct.unpack_from(">3I", entry, 48)
    return channels, bits, rate


def children(entry: bytes, start: int) -> list[tuple[bytes, bytes]]:
    """(kind, payload) of the boxes of ``entry`` from ``start`` on, those
    inside ``wave`` in its place; a box that does not fit ends the walk
    (FFmpeg skips what it cannot read)."""
    found: list[tuple[bytes, bytes]] = []
    at = start
    while at + 8 <= len(entry):
        size, kind = struct.unpack_from(">I4s", entry, at)
        if size < 8 or at + size > len(entry):
            break
        if kind == b"wave":
            found += children(entry[at + 8 : at + size], 0)
        else:
            found.append((kind, entry[at + 8 : at + size]))
        at += size
    return found
