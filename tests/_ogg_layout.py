"""Ogg files laid out the way files from the wild are: packets re-paged
byte for byte (same packets, same granule positions at packet ends), with
the headers over several pages, audio on the header page, big or tiny
pages, a starting granule offset; and links chained one after another.

The packets and their end granules come from a real encoder's file; each
packet's end granule is derived from the page granules and the packet
durations FFmpeg's parsers use (Opus TOC, Vorbis block sizes).
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass

from streamer.formats.ogg import pages as ogg
from streamer.formats.ogg import parse as ogg_parse
from streamer.formats.reader import Reader


@dataclass
class Stream:
    """One logical stream: its header packets, audio packets and each audio
    packet's end granule."""

    serial: int
    headers: list[bytes]
    audio: list[bytes]
    granules: list[int]


def _packets(data: bytes) -> tuple[list[tuple[bytes, int]], int]:
    """Every packet of a single-stream file with the granule of the page it
    ends on if it is the last to end there (else -1), and the serial."""
    out: list[tuple[bytes, int]] = []
    partial = b""
    pages = list(ogg.scan(Reader(io.BytesIO(data))))
    for page in pages:
        ended = []
        for piece, complete in page.packets():
            partial += piece
            if complete:
                ended.append(partial)
                partial = b""
        out += [(p, -1) for p in ended[:-1]] + [(p, page.granule) for p in ended[-1:]]
    return out, pages[0].serial


def split(data: bytes, header_packets: int) -> Stream:
    """The packets of an encoded file and each audio packet's end granule."""
    packets, serial = _packets(data)
    headers = [p for p, _ in packets[:header_packets]]
    audio = packets[header_packets:]
    durations = ogg_parse.packet_durations(headers)
    lengths = [durations.next(p) for p, _ in audio]
    granules = [0] * len(audio)
    anchor = next(n for n in range(len(audio)) if audio[n][1] >= 0)
    granules[anchor] = audio[anchor][1]
    for n in range(anchor - 1, -1, -1):
        granules[n] = granules[n + 1] - lengths[n + 1]
    for n in range(anchor + 1, len(audio)):
        granules[n] = audio[n][1] if audio[n][1] >= 0 else granules[n - 1] + lengths[n]
    # The last page's granule trims the stream: keep it.
    return Stream(serial, headers, [p for p, _ in audio], granules)


def joined(files: list[bytes], header_packets: int = 2) -> Stream:
    """The audio packets of several single-stream files of one codec as one
    stream, under the first file's headers, granules running on: a stream
    whose packets change mode midway (Opus CELT, then SILK), as an encoder
    whose bit rate drops makes."""
    streams = [split(data, header_packets) for data in files]
    durations = ogg_parse.packet_durations(streams[0].headers)
    audio, granules, granule = [], [], 0
    for stream in streams:
        for packet in stream.audio:
            granule += durations.next(packet)
            audio.append(packet)
            granules.append(granule)
    return Stream(streams[0].serial, streams[0].headers, audio, granules)


def page(
    flags: int, granule: int, serial: int, sequence: int, segments: bytes, body: bytes
) -> bytes:
    """One page with its CRC."""
    head = struct.pack("<4sBBqIIIB", b"OggS", 0, flags, granule, serial, sequence, 0, len(segments))
    raw = head + segments + body
    return raw[:22] + struct.pack("<I", ogg.ogg_crc(raw)) + raw[26:]


def lacing(size: int) -> bytes:
    """The lacing values of one packet of ``size`` bytes."""
    return b"\xff" * (size // 255) + bytes([size % 255])


def paginate(
    stream: Stream,
    *,
    body: int = 4096,
    audio_on_header_page: int = 0,
    header_body: int | None = None,
    offset: int = 0,
    sequence: int = 0,
    ended: bool = True,
) -> bytes:
    """The stream as pages of at most ``body`` bytes (and 255 segments),
    packets spanning pages where they do not fit. The first header packet
    has a page of its own (as the spec asks); the others go on pages of at
    most ``header_body`` bytes, followed on the last of them by the first
    ``audio_on_header_page`` audio packets. ``offset`` is added to every
    granule (a stream cut from a live recording). ``ended``: whether the last
    page says it ends the stream (a recorder that cuts a stream may not)."""
    items = [(stream.headers[0], 0)]
    pages = [_pages([items[0]], 1 << 30, 0)]
    rest = [(h, 0) for h in stream.headers[1:]]
    rest += [(p, g + offset) for p, g in zip(stream.audio, stream.granules, strict=True)][
        :audio_on_header_page
    ]
    pages.append(_pages(rest, header_body or body, len(stream.headers) - 1))
    audio = [(p, g + offset) for p, g in zip(stream.audio, stream.granules, strict=True)]
    pages.append(_pages(audio[audio_on_header_page:], body, 0))
    out = []
    flat = [p for group in pages for p in group]
    for n, (flags, granule, segments, data) in enumerate(flat):
        flags |= ogg.BOS if n == 0 else 0
        flags |= ogg.EOS if ended and n == len(flat) - 1 else 0
        out.append(page(flags, granule, stream.serial, sequence + n, segments, data))
    return b"".join(out)


def _pages(
    packets: list[tuple[bytes, int]], body: int, headers: int
) -> list[tuple[int, int, bytes, bytes]]:
    """(flags, granule, lacing, body) of pages holding ``packets`` in order;
    the first ``headers`` of them are header packets (granule 0 ends them)."""
    out = []
    segments, data, granule, continued = [], b"", -1, False
    for number, (packet, end) in enumerate(packets):
        laced = lacing(len(packet))
        at = 0
        for k, value in enumerate(laced):
            if len(segments) == 255 or (len(data) + value > body and segments):
                out.append((ogg.CONTINUED if continued else 0, granule, bytes(segments), data))
                continued = k > 0
                segments, data, granule = [], b"", -1
            segments.append(value)
            data += packet[at : at + value]
            at += value
        granule = 0 if number < headers else end
    if segments:
        out.append((ogg.CONTINUED if continued else 0, granule, bytes(segments), data))
    return out


def interleave(first: bytes, second: bytes) -> bytes:
    """Two single-stream files multiplexed page by page, as a muxer grouping
    streams does: both beginning-of-stream pages first, then the other pages
    alternately."""
    a, b = (list(ogg.scan(Reader(io.BytesIO(data)))) for data in (first, second))
    raw = [
        data[page.offset : page.end] for data, pages in ((first, a), (second, b)) for page in pages
    ]
    ours, theirs = raw[: len(a)], raw[len(a) :]
    out = [ours[0], theirs[0]]
    for n in range(1, max(len(ours), len(theirs))):
        out += ours[n : n + 1] + theirs[n : n + 1]
    return b"".join(out)
