"""Ogg (Vorbis, Opus): page scan with CRC check and resync, granule positions.

Native timeline: the stream's granule positions, i.e. PCM samples at the
stream's rate for Vorbis and at 48 kHz for Opus, pre-skip included. Seek
points are pages whose first packet starts on that page (not continued from
the previous page); ``sample_pos`` is the granule position of the last page
before it that completes a packet, which is the timestamp FFmpeg gives that
first packet: the native position where the output of that packet begins once
the packets before it have been decoded. For the first audio page it is
derived from the page's granule minus the durations of the packets it
completes, as FFmpeg does.

Gapless: Opus output starts ``pre_skip`` after the first packet's position
(``encoder_delay`` = pre-skip); Vorbis output starts at the first packet's
position, clamped at 0 (a negative start means the encoder asked for leading
samples to be dropped). With an end-of-stream page, ``num_samples`` follows
its granule (FFmpeg trims the last packet to it); without one it is -1.

Decoding from a seek point needs pre-roll: Vorbis's first packet only primes
the overlap (it outputs nothing), Opus wants 80 ms to converge.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import BinaryIO, NamedTuple

from ...index.table import OK, SeekIndex
from ..reader import NoIndex, Points, Reader, interval
from .pages import BOS, CONTINUED, EOS, Page
from .pages import scan as scan_pages

__all__ = ["matches", "parse"]

#: Largest identification or setup header packet kept (libvorbis writes setup
#: headers of a few KiB); the comment packet, which may carry pictures, is skipped.
MAX_HEADER_PACKET = 1 << 24
#: The tail of a Vorbis setup header that holds its modes: at most 64 modes
#: of 41 bits, their count and the framing bit.
_SETUP_TAIL = 512

_UNSUPPORTED = {
    b"\x7fFLAC": "flac",
    b"Speex": "speex",
    b"\x80theora": "theora",
    b"OVP80": "vp8",
    b"fishead": "skeleton",
}


def matches(head: bytes) -> bool:
    return head.startswith(b"OggS")


class _Codec(NamedTuple):
    name: str
    sample_rate: int
    channels: int
    timescale: int
    pre_skip: int
    header_packets: int


def _identify(packet: bytes) -> _Codec:
    if packet.startswith(b"\x01vorbis") and len(packet) >= 30:
        channels, rate = packet[11], int.from_bytes(packet[12:16], "little")
        if not channels or not rate:
            raise NoIndex("invalid vorbis identification header")
        return _Codec("vorbis", rate, channels, rate, 0, 3)
    if packet.startswith(b"OpusHead") and len(packet) >= 19:
        pre_skip = int.from_bytes(packet[10:12], "little")
        return _Codec("opus", 48000, packet[9], 48000, pre_skip, 2)
    for magic, name in _UNSUPPORTED.items():
        if packet.startswith(magic):
            raise NoIndex(f"unsupported codec in ogg: {name}")
    raise NoIndex("unknown codec in ogg")


def parse(stream: BinaryIO | Reader, *, density: float = 1.0) -> SeekIndex:
    """Index a single-stream Ogg Vorbis or Opus file; raises ``NoIndex`` otherwise."""
    reader = stream if isinstance(stream, Reader) else Reader(stream)
    scan = iter(scan_pages(reader))
    first = next(scan, None)
    if first is None:
        raise NoIndex("no ogg pages")
    if not first.flags & BOS or first.after_gap:
        raise NoIndex("ogg stream does not start with a beginning-of-stream page")
    packets = list(first.packets())
    if not packets:
        raise NoIndex("empty first ogg page")
    codec = _identify(packets[0][0])
    headers, header_end = _headers(first, scan, codec)
    points = Points(interval(codec.timescale, density))
    state = _AudioScan(codec, _Durations(codec, headers), points)
    for page in scan:
        if page.serial != first.serial or page.flags & BOS:
            chained = page.flags & BOS and state.ended
            raise NoIndex("chained ogg streams" if chained else "multiplexed ogg streams")
        if state.ended:
            break
        state.add(page)
    if state.start is None:
        raise NoIndex("no ogg audio pages")
    if codec.name == "opus":
        first_sample = state.start + codec.pre_skip
    else:
        first_sample = state.start + state.first_duration
    num_samples = state.granule - first_sample if state.ended else -1
    sample_pos, byte_pos = points.arrays()
    return SeekIndex(
        status=OK,
        codec=codec.name,
        container="ogg",
        sample_rate=codec.sample_rate,
        channels=codec.channels,
        timescale=codec.timescale,
        first_sample=first_sample,
        num_samples=max(num_samples, -1),
        encoder_delay=codec.pre_skip,
        header=((first.offset, header_end - first.offset),),
        data_start=header_end,
        data_end=state.data_end,
        sample_pos=sample_pos,
        byte_pos=byte_pos,
    )


def _headers(first: Page, scan: Iterator[Page], codec: _Codec) -> tuple[list[bytes], int]:
    """The header packets (the comment packet, the second, as ``b""``: nothing
    needs it) and the end of the page that completes the last one (which must
    end there: audio starts on a fresh page)."""
    done: list[bytes] = []
    pieces: list[bytes] = []  # of the packet being read
    held = 0
    page: Page | None = first
    while page is not None:
        if page is not first and (page.serial != first.serial or page.after_gap):
            raise NoIndex(
                "multiplexed ogg streams" if page.serial != first.serial else "corrupt ogg headers"
            )
        for data, complete in page.packets():
            if len(done) == codec.header_packets:
                raise NoIndex("audio shares a page with the ogg headers")
            if len(done) != 1:
                held += len(data)
                if held > MAX_HEADER_PACKET:
                    raise NoIndex("ogg header packet too large")
                pieces.append(data)
            if complete:
                done.append(b"".join(pieces))
                pieces, held = [], 0
        if len(done) == codec.header_packets:
            return done, page.end
        page = next(scan, None)
    raise NoIndex("truncated ogg headers")


class _AudioScan:
    """Walks audio pages: seek points, the first packet's position, the end."""

    def __init__(self, codec: _Codec, durations: _Durations, points: Points) -> None:
        self.codec = codec
        self.durations = durations
        self.points = points
        self.start: int | None = None  # native position of the first audio packet
        self.first_duration = 0  # its duration (a Vorbis first packet outputs nothing)
        self.granule = 0  # last granule position seen
        self.known = False  # whether ``granule`` is the position of this page's start
        self.ended = False
        self.data_end = 0
        self._sequence = -1

    def add(self, page: Page) -> None:
        # Garbage between pages costs nothing; a break in the page numbering
        # means pages (and their samples) went missing.
        lost = self._sequence >= 0 and page.sequence != self._sequence + 1
        self._sequence = page.sequence
        if self.start is None:
            if page.granule < 0:
                raise NoIndex("first ogg audio page has no granule position")
            total, self.first_duration = self.durations.first_page(page)
            self.start = page.granule - total
            self.points.add(self.start, page.offset)
        elif self.known and not lost and not page.flags & CONTINUED:
            self.points.add(self.granule, page.offset)
        if lost:
            # Pages went missing: the last granule no longer says where this
            # page starts, so no point until a granule is seen again.
            self.known = False
        if page.granule >= 0:
            self.granule, self.known = page.granule, True
        self.data_end = page.end
        self.ended = bool(page.flags & EOS)


class _Durations:
    """Packet durations, needed only on the first audio page (to place it)."""

    def __init__(self, codec: _Codec, headers: list[bytes]) -> None:
        self.codec = codec
        if codec.name == "vorbis":
            sizes = headers[0][28]
            self.blocksizes = (1 << (sizes & 15), 1 << (sizes >> 4))
            self.mode_long = _vorbis_modes(headers[2])

    def first_page(self, page: Page) -> tuple[int, int]:
        """(sum of the durations of the packets the first audio page completes,
        duration of the first of them), counted as FFmpeg counts them."""
        complete = [data for data, done in page.packets() if done and data]
        if self.codec.name == "opus":
            durations = [_opus_samples(p) for p in complete]
        else:
            durations, previous = [], self.blocksizes[0]
            for packet in complete:
                duration, previous = self._vorbis(packet, previous)
                durations.append(duration)
        return sum(durations), durations[0] if durations else 0

    def _vorbis(self, packet: bytes, previous: int) -> tuple[int, int]:
        modes = len(self.mode_long)
        mode = 0 if modes == 1 else (packet[0] >> 1) & ((1 << (modes - 1).bit_length()) - 1)
        if packet[0] & 1 or mode >= modes:
            raise NoIndex("invalid vorbis audio packet")
        if self.mode_long[mode]:
            previous = self.blocksizes[(packet[0] >> (1 + (modes - 1).bit_length())) & 1]
        current = self.blocksizes[self.mode_long[mode]]
        return (previous + current) >> 2, current


def _vorbis_modes(setup: bytes) -> list[int]:
    """Each mode's block flag (0 short, 1 long), read from the end of the setup
    header, the only part of it packet durations depend on.

    Walking the setup header forward means decoding every codebook; instead,
    as FFmpeg and liboggz do, read it backwards from the framing bit: each mode
    is 41 bits (flag, 16-bit window type and transform type, both 0, 8-bit
    mapping), preceded by a 6-bit mode count that must agree. Only the tail
    that can hold them is read (a whole header as one integer would make
    every bit read cost its length).
    """
    setup = setup[-_SETUP_TAIL:]
    width = 8 * len(setup)
    bits = int.from_bytes(setup[::-1], "big")  # MSB-first over reversed bytes

    def take(position: int, count: int) -> int:
        return (bits >> (width - position - count)) & ((1 << count) - 1)

    position = 0
    while position < width - 97 and not take(position, 1):
        position += 1
    framing = position + 1
    if framing >= width - 97:
        raise NoIndex("invalid vorbis setup header")
    position, count, found = framing, 0, 0
    while width - position >= 97 and count < 64:
        if take(position, 8) > 63 or take(position + 8, 16) or take(position + 24, 16):
            break
        position += 41
        count += 1
        if take(position, 6) + 1 == count:
            found = count
    if not found:
        raise NoIndex("invalid vorbis setup header")
    flags = [take(framing + 41 * k + 40, 1) for k in range(found)]
    return flags[::-1]


def _opus_samples(packet: bytes) -> int:
    """Samples at 48 kHz in one Opus packet, from its TOC byte (RFC 6716 3.1)."""
    toc = packet[0]
    config = toc >> 3
    if config < 12:
        frame = (480, 960, 1920, 2880)[config & 3]
    elif config < 16:
        frame = (480, 960)[config & 1]
    else:
        frame = (120, 240, 480, 960)[config & 3]
    code = toc & 3
    if code == 0:
        frames = 1
    elif code in (1, 2):
        frames = 2
    elif len(packet) < 2:
        raise NoIndex("invalid opus packet")
    else:
        frames = packet[1] & 0x3F
    return frame * frames
