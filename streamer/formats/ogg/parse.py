"""Ogg (Vorbis, Opus, FLAC): page scan with CRC check and resync, granule positions.

Native timeline: the stream's granule positions, i.e. PCM samples at the
stream's rate for Vorbis and FLAC and at 48 kHz for Opus, pre-skip
included. Seek points are pages whose first packet starts on that page (not
continued from the previous page); ``sample_pos`` is the granule position
of the last page before it that completes a packet, which is the timestamp
FFmpeg gives that first packet: the native position where the output of
that packet begins once the packets before it have been decoded. The first
packet's position is the first granule minus the durations of the packets
up to it, as FFmpeg counts them, whatever the page layout (audio on the
page that ends the headers, headers over several pages).

Gapless: FFmpeg decodes every packet whatever the granules say. Opus output
starts ``pre_skip`` after the first packet's position (``encoder_delay`` =
pre-skip); Vorbis output after the first packet (which only primes); FLAC
at it. With an end-of-stream page, ``num_samples`` ends where FFmpeg's
trimming of the last packet ends it (``_Link._trim_end``); without one
(a file cut short, a recording stopped), where its last page's packets
decode to, as FFmpeg trims nothing then; -1 when no granule places them.

Lost pages (a break in the page numbering: a page that fails its CRC)
mean no index: FFmpeg drops them and its decode closes the gap they leave,
which no granule describes. So does a granule position that is not the
one before plus the durations of the packets completed since (but on the
last page, which may end the stream short): FFmpeg decodes the packets,
and crops placed by that granule were off by the difference.

Chains (links one after another) are one timeline, as FFmpeg decodes them
(``_Link``); in a multiplexed file the first audio stream is indexed.

Decoding from a seek point needs pre-roll: Vorbis's first packet only primes
the overlap (it outputs nothing), Opus wants 80 ms to converge.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterator
from typing import BinaryIO, NamedTuple

from ...index.table import OK, SeekIndex
from ..flac import parse as flac
from ..opus import NO_PACKET, mode_preroll, toc_config
from ..reader import NoIndex, Points, Reader, interval
from .pages import BOS, CONTINUED, EOS, Page
from .pages import scan as scan_pages

__all__ = [
    "AUDIO_HEADERS",
    "FLAC_STREAMINFO",
    "MISPLACED",
    "matches",
    "misplaced",
    "packet_durations",
    "parse",
]

#: Largest identification or setup header packet kept (libvorbis writes setup
#: headers of a few KiB); the comment packet, which may carry pictures, is skipped.
MAX_HEADER_PACKET = 1 << 24
#: Where STREAMINFO's body starts in an Ogg FLAC first packet: the mapping's
#: 9 bytes, "fLaC" and the metadata block header.
FLAC_STREAMINFO = 17
#: First bytes of a packet kept for its duration: a FLAC frame header is at
#: most 16 bytes (Opus and Vorbis need 2).
_HEAD = 16
#: The tail of a Vorbis setup header that holds its modes: at most 64 modes
#: of 41 bits, their count and the framing bit.
_SETUP_TAIL = 512

_UNSUPPORTED = {
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


def _identify_packet(packet: bytes) -> _Codec:
    if packet.startswith(b"\x01vorbis") and len(packet) >= 30:
        channels, rate = packet[11], int.from_bytes(packet[12:16], "little")
        if not channels or not rate:
            raise NoIndex("invalid vorbis identification header")
        return _Codec("vorbis", rate, channels, rate, 0, 3)
    if packet.startswith(b"OpusHead") and len(packet) >= 19:
        pre_skip = int.from_bytes(packet[10:12], "little")
        return _Codec("opus", 48000, packet[9], 48000, pre_skip, 2)
    if packet.startswith(b"\x7fFLAC") and packet[9:13] == b"fLaC":
        # The mapping's header, then STREAMINFO (its metadata block header first).
        info = flac.streaminfo(packet[FLAC_STREAMINFO : FLAC_STREAMINFO + flac.STREAMINFO_SIZE])
        following = int.from_bytes(packet[7:9], "big")
        if not following:
            raise NoIndex("ogg flac without its count of header packets")
        return _Codec("flac", info.sample_rate, info.channels, info.sample_rate, 0, 1 + following)
    for magic, name in _UNSUPPORTED.items():
        if packet.startswith(magic):
            raise NoIndex(f"unsupported codec in ogg: {name}")
    raise NoIndex("unknown codec in ogg")


def parse(stream: BinaryIO | Reader, *, density: float = 1.0) -> SeekIndex:
    """Index an Ogg Vorbis or Opus file, chained or not; raises ``NoIndex`` otherwise."""
    reader = stream if isinstance(stream, Reader) else Reader(stream)
    scan = iter(scan_pages(reader))
    first = next(scan, None)
    if first is None:
        raise NoIndex("no ogg pages")
    if not first.flags & BOS or first.after_gap:
        raise NoIndex("ogg stream does not start with a beginning-of-stream page")
    group, scan = _first_pages(first, scan)
    audio = next((page for page in group if _is_audio(page)), first)
    codec = _identify(audio)
    points = Points(interval(codec.timescale, density))
    others = {page.serial for page in group if page is not audio}
    links = [_Link(audio, scan, codec, points, None, others, first.offset)]
    while (bos := links[-1].read(scan)) is not None:
        links.append(_Link(bos, scan, _identify(bos), points, links[-1]))
    head, last = links[0], links[-1]
    sample_pos, byte_pos = points.arrays()
    return SeekIndex(
        status=OK,
        codec=codec.name,
        container="ogg",
        sample_rate=codec.sample_rate,
        channels=codec.channels,
        timescale=codec.timescale,
        first_sample=head.first_sample,
        num_samples=last.end - head.first_sample if last.bounded else -1,
        encoder_delay=codec.pre_skip,
        header=tuple(link.header for link in links),
        data_start=head.data_start,
        data_end=last.data_end,
        sample_pos=sample_pos,
        byte_pos=byte_pos,
        preroll=max(_longest_packet(head), mode_preroll(min(link.lowest for link in links))),
    )


#: Vorbis's pre-roll (``decode.PREROLL_SECONDS``): one block's overlap.
VORBIS_PREROLL_SECONDS = 0.05


def _longest_packet(link: _Link) -> int:
    """The most a Vorbis packet can output (half a long block) when that is
    more than ``VORBIS_PREROLL_SECONDS`` (else 0, as for other codecs): a
    decode must start a packet before the crop's, since its first packet
    only primes the decoder, and 0.05 s is less below 20 kHz (400 samples at
    8 kHz, where a packet of PyAV's encoder outputs 1024)."""
    if link.codec.name != "vorbis":
        return 0
    longest = link.durations.blocksizes[1] // 2
    return longest if longest > round(VORBIS_PREROLL_SECONDS * link.codec.sample_rate) else 0


#: How the first packet of an audio stream starts: FFmpeg's first audio
#: stream is the first of these, whatever streams come before it.
AUDIO_HEADERS = (b"\x01vorbis", b"OpusHead", b"\x7fFLAC", b"Speex")


def _is_audio(bos: Page) -> bool:
    return bos.body.startswith(AUDIO_HEADERS)


def _first_pages(first: Page, scan: Iterator[Page]) -> tuple[list[Page], Iterator[Page]]:
    """The beginning-of-stream pages that open the file (one per stream of
    a multiplexed file: Skeleton, Theora beside the audio) and the scan
    from the page after them."""
    group = [first]
    for page in scan:
        if not page.flags & BOS:
            return group, itertools.chain([page], scan)
        group.append(page)
    return group, scan


def _identify(bos: Page) -> _Codec:
    packets = list(bos.packets())
    if not packets:
        raise NoIndex("empty first ogg page")
    return _identify_packet(packets[0][0])


def _headers(
    first: Page, scan: Iterator[Page], codec: _Codec, others: set[int]
) -> tuple[list[bytes], Page, int]:
    """The header packets (the comment packet, the second, as ``b""``: nothing
    needs it), the page that completes the last one and how many packet
    pieces on it are headers: audio packets may follow on that page, and
    headers may span pages (each page a piece of a packet)."""
    done: list[bytes] = []
    pieces: list[bytes] = []  # of the packet being read
    held = 0
    page: Page | None = first
    while page is not None:
        if page.serial in others and not page.flags & BOS:
            page = next(scan, None)
            continue
        if page is not first and (page.serial != first.serial or page.after_gap):
            raise NoIndex(
                "multiplexed ogg streams" if page.serial != first.serial else "corrupt ogg headers"
            )
        for number, (data, complete) in enumerate(page.packets()):
            if len(done) != 1:
                held += len(data)
                if held > MAX_HEADER_PACKET:
                    raise NoIndex("ogg header packet too large")
                pieces.append(data)
            if complete:
                done.append(b"".join(pieces))
                pieces, held = [], 0
                if len(done) == codec.header_packets:
                    return done, page, number + 1
        page = next(scan, None)
    raise NoIndex("truncated ogg headers")


def _same_stream(first: list[bytes], later: list[bytes], codec: _Codec, other: _Codec) -> None:
    """Raise ``NoIndex`` unless a chained link decodes as part of the first
    link's stream: FFmpeg decodes every link with one decoder set up by the
    first link's headers (a link of another rate or channel count fails its
    decode; Vorbis codebooks of another setup turn it into noise)."""
    if (other.name, other.sample_rate, other.channels) != (
        codec.name,
        codec.sample_rate,
        codec.channels,
    ):
        raise NoIndex("chained ogg streams of different formats")
    if codec.name == "flac":
        raise NoIndex("chained ogg flac streams")
    if codec.name == "vorbis":
        same = first[0] == later[0] and first[2] == later[2]
    else:  # all of OpusHead but the pre-skip and the input sample rate
        same = first[0][:10] + first[0][16:] == later[0][:10] + later[0][16:]
    if not same:
        raise NoIndex(f"chained ogg streams with different {codec.name} headers")


#: Why a page's granule position does not hold (``misplaced``).
MISPLACED = "an ogg granule position that is not where its packets end"


def misplaced(page: Page, start: int, decoded: int) -> bool:
    """Whether ``page``'s granule position is not where its packets end:
    ``start``, the granule position the packets counted start at, plus
    ``decoded``, what they decode to (``packet_durations``). FFmpeg decodes
    every packet whatever the granules say, so after such a page its decode
    has the samples elsewhere than the granules say. An end-of-stream page's
    granule trims the stream (it is not held to it) and a page without one
    places nothing. The index (``_Link``) and the decoder (``decode``) hold
    pages to this one rule."""
    return page.granule >= 0 and not page.flags & EOS and page.granule != start + decoded


def packet_durations(headers: list[bytes]) -> _Durations:
    """A counter of a stream's audio packet durations, in order
    (``.next(packet)``), given its header packets."""
    return _Durations(_identify_packet(headers[0]), headers)


class _Link:
    """One link of a chain (a whole stream when there is no chain): its
    headers, its audio pages' seek points, where it starts and ends.

    The native timeline runs on across links as FFmpeg's output does: a
    link's position is its granule position plus ``base``, chosen so that
    its first output sample follows the previous link's last (FFmpeg trims
    a link's end to its last granule, drops an Opus link's pre-skip, and its
    Vorbis decoder, not reset, outputs the overlap of the previous link's
    last block with the new link's first packet).
    """

    def __init__(
        self,
        bos: Page,
        scan: Iterator[Page],
        codec: _Codec,
        points: Points,
        previous: _Link | None,
        others: set[int] | None = None,
        begins: int | None = None,
    ) -> None:
        """``others``: the serials of the streams beside it (a multiplexed
        file), whose pages are skipped; ``begins``: where its header range
        begins (the file's first page) when not at its own first page."""
        self.codec = codec
        self.serial = bos.serial
        self.others = others or set()
        self.headers, last, skip = _headers(bos, scan, codec, self.others)
        if previous is not None:
            _same_stream(previous.headers, self.headers, previous.codec, codec)
            if previous.single:
                raise NoIndex("a chained ogg link of one audio page")
            if previous.trim and previous.ended:
                raise NoIndex("a chained ogg link that FFmpeg does not end at its last granule")
        self.durations = _Durations(codec, self.headers)
        self.points = points
        self.previous = previous
        self.base = 0
        self.start: int | None = None  # granule position of the first audio packet
        self.first_duration = 0  # its duration (a Vorbis first packet outputs nothing)
        self.data_start = 0  # offset of the page the first audio packet starts on
        self.granule = 0  # last granule position seen
        self.known = False  # whether ``granule`` is the position of this page's start
        self.ended = False
        self.bounded = False  # whether the link's end is known (``read``)
        self.trim = 0  # how far before its last granule FFmpeg's output of the link ends
        self.single = False  # whether the link is one audio page
        self.data_end = 0
        #: The lowest TOC configuration of its Opus packets (``opus.mode_preroll``).
        self.lowest = NO_PACKET
        self._bos = bos.offset if begins is None else begins
        self._placed_at = last.end  # end of the page that placed the first packet (or headers)
        self._sequence = -1
        #: The last page taken and what was known before it (to recount it).
        #: Before the last page taken, the granule and whether it was known;
        #: and what that page's packets decode to (``_end_unmarked``).
        self._last: tuple[int, bool, int] | None = None
        self._lengths: list[int] = []  # durations of the audio packets before the first granule
        self._head = b""  # first bytes of the packet being read (all its duration needs)
        #: Durations of the packets completed since the last granule position.
        self._since = 0
        #: Where a page whose granule its packets do not reach starts (None: none).
        self._misplaced: int | None = None
        self._last_head = b""  # those of the last packet completed (Vorbis: its block size)
        if skip < len(list(last.packets())):  # audio begins on the page ending the headers
            self.add(last, skip)

    @property
    def header(self) -> tuple[int, int]:
        """The byte range a decoder starting in this link needs first: its
        headers, and for a later link also its pages up to the first
        granule position (which place it on the chain's timeline)."""
        return (self._bos, self._placed_at - self._bos)

    @property
    def first_sample(self) -> int:
        """Native position of the link's first output sample on its own."""
        assert self.start is not None
        if self.codec.name == "opus":
            return self.base + self.start + self.codec.pre_skip
        if self.codec.name == "flac":
            return self.base + self.start
        return self.base + self.start + self.first_duration

    @property
    def end(self) -> int:
        """Native position where the link's output ends (its last granule)."""
        return self.base + self.granule - self.trim

    def read(self, scan: Iterator[Page]) -> Page | None:
        """Take the link's pages; returns the first page of the next link, if any."""
        for page in scan:
            if page.serial in self.others and not page.flags & BOS:
                self.data_end = page.end  # the audio range runs to the file's last page
                continue
            if page.flags & BOS and self.start is not None and not self.others:
                if not self.ended and not self._end_unmarked():
                    raise NoIndex("a chained ogg link without its end after lost pages")
                return page
            if page.serial != self.serial or page.flags & BOS:
                raise NoIndex("multiplexed ogg streams")
            if self.ended:
                break
            self.add(page)
        if self.start is None:
            raise NoIndex("no ogg audio pages")
        self.bounded = self.ended or self._end_unmarked()
        return None

    def add(self, page: Page, skip: int = 0) -> None:
        """Take the next page; its first ``skip`` packet pieces are headers."""
        # Garbage between pages costs nothing; a break in the page numbering
        # means pages (and their samples) went missing, and FFmpeg's decode
        # closes the gap they leave, which granules cannot describe.
        if self._sequence >= 0 and page.sequence != self._sequence + 1:
            raise NoIndex(
                f"ogg pages lost before byte {page.offset}: FFmpeg's decode closes the gap"
            )
        if self._misplaced is not None:  # not the last page: no stream end excuses it
            raise NoIndex(f"{MISPLACED} (page at byte {self._misplaced})")
        self._sequence = page.sequence
        lengths = self._count(page, skip)
        self._last = (self.granule, self.known, sum(lengths))
        self._check_granule(page, sum(lengths))
        if self.start is None:
            self._place_first(page)
        elif self.known and not page.flags & CONTINUED:
            self.points.add(self.base + self.granule, page.offset)
        placed = self.start is not None and not self.single and self.known
        if placed and page.flags & EOS and lengths and page.granule >= 0:
            self._trim_end(self.granule + sum(lengths), page.granule, lengths[-1])
        if page.granule >= 0:
            self.granule, self.known = page.granule, True
        self.data_end = page.end
        self.ended = bool(page.flags & EOS)

    def _count(self, page: Page, skip: int) -> list[int]:
        """Follow the packets (their first bytes): the durations of those the
        page completes (kept up to the first granule, to place the first
        packet; every page's granule is checked against them), the last
        one's first bytes (a Vorbis link's last block overlaps the next
        link's first) and the lowest Opus mode (``opus.mode_preroll``)."""
        if self.start is None and not self._lengths and not self._head:
            self.data_start = page.offset
        if self.start is not None and self._last_head and self.codec.name == "vorbis":
            self.durations.previous = self.durations.blocksize(self._last_head)
        lengths, opus = [], self.codec.name == "opus"
        for data, complete in list(page.packets())[skip:]:
            self._head = (self._head + data)[:_HEAD]
            if complete and self._head:
                self._last_head = self._head
                lengths.append(self.durations.next(self._head))
                if opus:
                    self.lowest = min(self.lowest, toc_config(self._head[0]))
            if complete:
                self._head = b""
        if self.start is None:
            self._lengths += lengths
        return lengths

    def _check_granule(self, page: Page, decoded: int) -> None:
        """Note a page whose granule position is not the last one plus
        ``decoded``, what the packets completed since decode to
        (``misplaced``; a page whose granule was rewritten: crops from the
        seek point after it were off by the difference, verified). Only once
        the first packet is placed (any first granule will do); the last
        page may also end the stream short without an end-of-stream page
        (``_end_unmarked``), so ``add`` refuses only when a page follows."""
        self._since += decoded
        if page.granule < 0:
            return
        if self.start is not None and misplaced(page, self.granule, self._since):
            self._misplaced = page.offset
        self._since = 0

    def _end_unmarked(self) -> bool:
        """End a link that has no end-of-stream page (a recorder cut it, or
        the file is cut short): FFmpeg trims nothing, so its output ends
        where the packets of its last page decode to, whatever that page's
        granule says. False when that is unknown (no granule before the
        last page)."""
        assert self._last is not None  # the link has audio pages
        granule, known, decoded = self._last
        if not known:
            return False
        self.trim = self.granule - (granule + decoded)
        return True

    def _trim_end(self, decoded: int, granule: int, last: int) -> None:
        """Where FFmpeg's output of the link ends, given the end of what its
        packets decode to and the end-of-stream granule: Opus trims to the
        granule, Vorbis only when that cuts into the last packet alone (else
        nothing), FLAC never; none outputs more than it decodes. Kept as
        ``trim`` before the granule."""
        if (
            self.codec.name == "flac"
            or (self.codec.name == "vorbis" and not 0 <= decoded - granule <= last)
            or granule > decoded
        ):
            self.trim = granule - decoded

    def _place_first(self, page: Page) -> None:
        """Place the first packet as FFmpeg does: the first granule position
        minus the durations of the packets up to it (a packet may span
        pages; pages before may complete none)."""
        if page.flags & EOS and self._lengths:
            self._one_page(page.granule)
        if page.granule >= 0 and self._lengths:
            self.start = page.granule - sum(self._lengths)
        else:
            return
        self.first_duration = self._lengths[0] if self._lengths else 0
        if self.previous is not None:
            self._placed_at = max(self._placed_at, page.end)
            self.base = self.previous.end + self._overlap() - self.first_sample
        self.points.restart(self.base + self.start, self.data_start)

    def _one_page(self, granule: int) -> None:
        """A stream of one audio page, which ends it: FFmpeg takes its start
        for 0 and trims the end by what that makes too much, if its rules
        allow (Opus: at most the last packet; Vorbis: none if more than the
        last packet). Its output ends at the granule less that trim, on a
        timeline where, untrimmed, it would end at the granule."""
        if self.previous is not None:
            raise NoIndex("a chained ogg link of one audio page")
        self.single = True
        excess = sum(self._lengths) - granule
        last = self._lengths[-1]
        if self.codec.name == "opus":
            self.trim = min(max(excess, 0), last)
        else:
            self.trim = excess if 0 < excess <= last else 0

    def _overlap(self) -> int:
        """Samples a Vorbis decoder carried over from the previous link
        outputs for this link's first packet: the previous link's last
        block and this first one overlap (alone, a first packet outputs
        nothing)."""
        if self.codec.name != "vorbis" or self.previous is None or not self._lengths:
            return 0
        previous = self.previous.durations.blocksize(self.previous._last_head)
        return (previous + self.durations.first_blocksize) >> 2


class _Durations:
    """Packet durations at 48 kHz (Opus) or the stream's rate (Vorbis),
    counted as FFmpeg counts them, from a packet's first bytes (two, or a
    FLAC frame header): the index counts every packet once, and the decoder
    every packet a crop reads (``decode._placed``)."""

    def __init__(self, codec: _Codec, headers: list[bytes]) -> None:
        self.codec = codec
        if codec.name == "vorbis":
            sizes = headers[0][28]
            self.blocksizes = (1 << (sizes & 15), 1 << (sizes >> 4))
            self.mode_long = _vorbis_modes(headers[2])
            self.previous = self.blocksizes[0]
            self.first_blocksize = 0
            self._blocks = _vorbis_blocks(self.blocksizes, tuple(self.mode_long))

    def next(self, head: bytes) -> int:
        """The duration of the next packet, which starts with ``head``."""
        if self.codec.name == "opus":
            return _opus_samples(head)
        if self.codec.name == "flac":
            header = flac.frame_header(head, 0)
            if header is None:
                raise NoIndex("invalid flac frame in ogg")
            return header.block
        current, stated = self._block(head)
        previous = stated or self.previous
        self.previous = current
        self.first_blocksize = self.first_blocksize or current
        return (previous + current) >> 2

    def blocksize(self, head: bytes) -> int:
        """A Vorbis audio packet's block size, from its mode."""
        return self._block(head)[0]

    def _block(self, head: bytes) -> tuple[int, int]:
        """``_vorbis_block`` of the packet that starts with ``head``."""
        block = self._blocks[head[0]]
        if block is None:
            raise NoIndex("invalid vorbis audio packet")
        return block


@functools.lru_cache(maxsize=64)
def _vorbis_blocks(
    blocksizes: tuple[int, int], mode_long: tuple[int, ...]
) -> tuple[tuple[int, int] | None, ...]:
    """``_vorbis_block`` of each first byte, for a stream's block sizes and
    modes: a lookup per packet costs half of working it out, and the table
    is made once per stream, not per crop (``decode`` counts every packet a
    crop reads, with a counter of its own)."""
    return tuple(_vorbis_block(byte, blocksizes, mode_long) for byte in range(256))


def _vorbis_block(
    byte: int, blocksizes: tuple[int, int], mode_long: tuple[int, ...]
) -> tuple[int, int] | None:
    """The block size of a Vorbis audio packet that starts with ``byte``
    (from its mode) and, for a long block, the previous block's size, which
    its window flag states (else 0: the previous packet's); None when no
    audio packet starts so."""
    modes = len(mode_long)
    bits = (modes - 1).bit_length()
    mode = 0 if modes == 1 else (byte >> 1) & ((1 << bits) - 1)
    if byte & 1 or mode >= modes:
        return None
    current = blocksizes[mode_long[mode]]
    long = current == blocksizes[1]
    return current, blocksizes[(byte >> (1 + bits)) & 1] if long else 0


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
    if not packet:
        raise NoIndex("empty opus packet")  # FFmpeg's demuxer refuses it
    toc = packet[0]
    mode = toc_config(toc)
    if mode < 12:
        frame = (480, 960, 1920, 2880)[mode & 3]
    elif mode < 16:
        frame = (480, 960)[mode & 1]
    else:
        frame = (120, 240, 480, 960)[mode & 3]
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
