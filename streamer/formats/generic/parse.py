"""Index any audio FFmpeg demuxes: one pass of its demuxer and decoder.

The positions are the full decode's own: the pass feeds every packet of the
first audio stream to a decoder, as the full decode does, and a packet's
sample position is the number of samples the decoder gave before it. Only
that is exact for every container: Matroska and ASF stamp packets in
milliseconds, raw streams (ADTS, AC-3) have no timestamps at all, and
priming, pre-skip and end trimming are the decoder's to apply.

A crop's decoder reaches its seek point one of two ways, and the index
records what that needs:

- by a *byte seek* (most demuxers): the header ranges are the bytes FFmpeg
  reads while it opens the file with the demuxer named and probing cut
  short (``OPEN_OPTIONS``), exactly as the crop's decoder opens it; a
  recording file object notes them. Seek points are packets.
- by a *timestamp seek* (``TABLE_SEEK``: APE, TTA, Musepack SV8, CAF, whose
  demuxers read by the seek table they load at open): seek points are the
  table's entries, at their byte positions.
- by *splicing* (``SPLICED``: Matroska/WebM, whose demuxer keeps its place
  in the element tree and ignores a byte seek; Ogg, whose demuxer drops a
  varying part of the next page after one): the decoder reads the bytes
  before the first seek point followed directly by the planned ones, as if
  they were the file. Seek points are cluster or page starts, found in the
  bytes the pass reads (the element's ID or capture pattern), confirmed by
  the packets around them; in Matroska also blocks of one packet (a
  SimpleBlock, or a BlockGroup that opens with its Block), spliced after
  the head of a cluster of unknown size (``OPEN_CLUSTER``),
  since muxers cut clusters every 5 s or more and a crop would decode from
  the cluster before it to the one after.

Packets without byte positions and no table (Musepack SV7) and demuxers with no
seek that stays inside a plan (``FIRST_POINT_ONLY``: DSF, DSDIFF) get one
point, the first packet: their crops decode from the start.

What a decoder started that way does differently from the full decode
(samples it loses at the start, end trimming it misses) is measured after
the pass (``_with_seek_loss``).
"""

from __future__ import annotations

import dataclasses
import io
from array import array
from collections.abc import Callable, Iterator
from fractions import Fraction
from typing import Any, BinaryIO

import av
import numpy as np

from ...index.table import ENDS_EARLY, SeekIndex
from ...storage.files import RangeFile
from ..ffmpeg import LENGTH_POLICY, open_input
from ..opus import NO_PACKET, mode_preroll, toc_config
from ..opus import PREROLL_SECONDS as OPUS_PREROLL
from ..reader import NoIndex, Points, Reader, interval

__all__ = [
    "BUFFER_SIZE",
    "CONTAINER_PREFIX",
    "FIRST_POINT_ONLY",
    "OPEN_CLUSTER",
    "OPEN_OPTIONS",
    "OVERREAD",
    "SPLICED",
    "STAMPED",
    "TABLE_SEEK",
    "demuxer_name",
    "open_spliced",
    "parse",
    "place",
    "reposition",
]

#: ``SeekIndex.container`` of a generic index: this, then FFmpeg's demuxer name.
CONTAINER_PREFIX = "ffmpeg:"
#: How indexer and decoder open a file: the demuxer is named, and stream
#: probing stops after the first packet, so opening reads a few KiB, not 5 MB.
OPEN_OPTIONS = {"probesize": "32", "analyzeduration": "1"}
#: PyAV's I/O buffer: what one read of the demuxer asks for. Smaller than
#: FFmpeg's 32 KiB so the header ranges hold little more than the header.
BUFFER_SIZE = 4096
#: Demuxers read spliced, and what starts the element a seek point is: a
#: Matroska cluster's ID, an Ogg page's capture pattern.
SPLICED = {"matroska": b"\x1f\x43\xb6\x75", "ogg": b"OggS"}
#: Demuxers that read by the frame table they load at open (TTA's seek
#: table): a byte seek leaves the table's frame counter behind, so the next
#: packets are cut at the wrong sizes. They are repositioned by timestamp,
#: which their own seek turns into the frame's byte position from the table.
TABLE_SEEK = frozenset({"ape", "caf", "mpc8", "tta"})
#: Those of them whose table counts bytes from the start of the data (the
#: first packet), not of the file: CAF's packet table (``pakt``: ALAC, and
#: every codec with packets of varying size). A CAF of constant-size
#: packets (PCM) has no table: its seek computes the byte from the packet
#: size, and its points are its packets.
DATA_RELATIVE = frozenset({"caf"})
#: Those of them whose packets have no byte position: packets are placed
#: by timestamp (after a seek, MPC8's timestamps can be off, its positions not).
STAMPED = frozenset({"ape"})
#: Bytes a packet of these demuxers reads past the next table entry: an APE
#: frame is read in whole 32-bit words from its word-aligned start, and the
#: next entry is its frame's start aligned down, so the word they share.
OVERREAD = {"ape": 4}
#: Demuxers with no seek a crop's decoder can use inside its plan: DSF's and
#: IFF's (DSDIFF) refuse a byte seek, and their timestamp seek reads every
#: packet from the start (FFmpeg's generic index). One point, the first.
FIRST_POINT_ONLY = frozenset({"dsf", "iff"})
#: Most bytes from a cluster's start to its first block (ID, size, timestamp).
_CLUSTER_HEAD = 64
#: What a Matroska splice that starts at a block puts before it: a cluster
#: (its ID) of unknown size (the next cluster ends it) at timestamp 0.
#: Timestamps do not place a generic crop's samples (``decode``), so the
#: cluster's real one is not needed.
OPEN_CLUSTER = SPLICED["matroska"] + b"\x01\xff\xff\xff\xff\xff\xff\xff" + b"\xe7\x81\x00"
#: Matroska element IDs: a SimpleBlock, a BlockGroup and the Block in it.
_SIMPLE_BLOCK, _BLOCK_GROUP, _BLOCK = 0xA3, 0xA0, 0xA1
#: The longest element head of those: a one-byte ID and an 8-byte size.
_HEAD_MAX = 9
#: A block's lacing bits (in its flags byte), and those of fixed-size lacing.
_LACING, _FIXED_LACING = 0x06, 0x04
#: Where an Ogg page's header type is, and its "continued packet" flag.
_OGG_FLAGS, _CONTINUED = 5, 0x01
#: FFmpeg's buffer for the first open, which only learns the demuxer's name.
_PROBE_BUFFER = 32768
#: Seek points a byte seek is tried at, as fractions of the way through the points.
_PROBES = (0.25, 0.5, 0.75)


class _Recording(RangeFile):
    """The stream as FFmpeg reads it, noting the byte ranges read while
    ``recording`` and where ``pattern`` occurs in what is read."""

    def __init__(self, stream: BinaryIO, length: int) -> None:
        super().__init__(length)
        self._stream = stream
        self.recording = False
        self.ranges: list[tuple[int, int]] = []
        self.pattern = b""
        #: Where ``pattern`` was found -> the byte 5 after it (-1: not read with it).
        self.found: dict[int, int] = {}
        self._last = (-1, b"")  # end of the previous read, and its last bytes

    def _read_at(self, position: int, size: int) -> bytes:
        self._stream.seek(position)
        data = self._stream.read(size)
        if not data:
            raise NoIndex("stream ended before its length")
        if self.recording:
            self.ranges.append((position, len(data)))
        if self.pattern:
            self._find(position, data)
        return data

    def _find(self, position: int, data: bytes) -> None:
        end, tail = self._last
        start, text = (position - len(tail), tail + data) if end == position else (position, data)
        at = text.find(self.pattern)
        while at >= 0:
            flags = text[at + _OGG_FLAGS] if at + _OGG_FLAGS < len(text) else -1
            self.found[start + at] = max(flags, self.found.get(start + at, -1))
            at = text.find(self.pattern, at + 1)
        self._last = (position + len(data), data[-(len(self.pattern) - 1) :])

    def fill_flags(self) -> None:
        """Read the byte 5 after each find that a read ended before."""
        for at, flags in self.found.items():
            if flags < 0:
                self.found[at] = self.read_range(at + _OGG_FLAGS, 1)[0]

    def read_range(self, offset: int, length: int) -> bytes:
        self._stream.seek(offset)
        return bytes(self._stream.read(length))


def demuxer_name(container: Any) -> str:
    """FFmpeg's name for the demuxer (the first of its aliases: ``mov``)."""
    return str(container.format.name).split(",")[0]


def reposition(container: Any, name: str, byte: int, sample: int) -> None:
    """Move the demuxer to the seek point at ``byte``, ``sample`` samples in:
    by byte, or by the point's timestamp for ``TABLE_SEEK`` demuxers."""
    if name not in TABLE_SEEK:
        container.seek(byte, unsupported_byte_offset=True)
        return
    stream = container.streams.audio[0]
    pts = Fraction(sample, stream.codec_context.sample_rate) / stream.time_base
    container.seek(round(pts), stream=stream, backward=True)


def place(packet: Any, name: str) -> int | None:
    """Where ``packet`` is, in the units a crop's seek points are compared
    in: its byte position, or for ``STAMPED`` demuxers the sample its
    timestamp is at."""
    if name not in STAMPED:
        return packet.pos
    if packet.pts is None:
        return None
    stream = packet.stream
    return round(packet.pts * packet.time_base * stream.codec_context.sample_rate)


def open_demuxer(source: Any, name: str) -> Any:
    """FFmpeg's demuxer ``name`` over a file object, opened the one way the
    indexer and every crop open it (what the header ranges were recorded with)."""
    return open_input(source, format=name, options=OPEN_OPTIONS, buffer_size=BUFFER_SIZE)


def open_spliced(header: bytes, data: bytes, name: str) -> Any:
    """A demuxer over ``header`` followed directly by ``data`` (Matroska
    data that starts at a block: by ``OPEN_CLUSTER`` and ``data``)."""
    if name == "matroska" and not data.startswith(SPLICED[name]):
        header += OPEN_CLUSTER
    return open_demuxer(io.BytesIO(header + data), name)


def parse(reader: Reader, *, density: float) -> SeekIndex:
    """Index the first audio stream of a file FFmpeg can open."""
    stream = reader.raw_stream()
    if stream is None:
        raise NoIndex("generic index needs a seekable stream")
    source = _Recording(stream, reader.length())
    try:
        with open_input(source, buffer_size=_PROBE_BUFFER) as probe:
            name = demuxer_name(probe)
            if not probe.streams.audio:
                raise NoIndex(f"no audio stream in {name}")
    except av.FFmpegError:
        raise NoIndex("unknown container") from None
    try:
        index, source = _pass_to_the_end(stream, source, name, density)
    except av.FFmpegError as exc:
        raise NoIndex(f"FFmpeg cannot read it ({type(exc).__name__})") from None
    try:
        return _with_seek_loss(index, source, name)
    except av.FFmpegError as exc:
        raise NoIndex(f"{name}: decoding after a seek fails ({type(exc).__name__})") from None


def _pass_to_the_end(
    stream: BinaryIO, source: _Recording, name: str, density: float
) -> tuple[SeekIndex, _Recording]:
    """``_pass``, and the source it ran over: where FFmpeg's decode ends early
    (``_EndsEarly``), the pass runs again over the file as if it ended there,
    as its full decode does, so that header reads, seek points and the
    measures after a seek all see that end; the index's reason notes it.
    One that ends early again, or whose cut file decodes to other than the
    samples counted before the failure (packets sharing the cut's byte:
    ASF), has no index."""
    try:
        return _pass(source, name, density), source
    except _EndsEarly as early:
        cut = _Recording(stream, early.at)
        index = _pass(cut, name, density)
        if index.num_samples != early.samples:
            raise NoIndex(str(early)) from None
        return dataclasses.replace(index, reason=f"{ENDS_EARLY}: {early}"), cut


def _pass(source: _Recording, name: str, density: float) -> SeekIndex:
    """Open as a crop's decoder does (recording the reads), then demux and
    decode every packet."""
    source.seek(0)
    source.recording = True
    source.pattern = SPLICED.get(name, b"")
    with open_demuxer(source, name) as c:
        opening = list(source.ranges)
        source.ranges.clear()
        flags = c.format.flags
        seekable = SPLICED.keys() | FIRST_POINT_ONLY
        if flags & av.format.Flags.no_byte_seek.value and name not in seekable:
            raise NoIndex(f"{name} cannot seek by byte")
        if not c.streams.audio:
            raise NoIndex(f"no audio stream in {name} opened without probing")
        table = _table(c) if name in TABLE_SEEK else None  # as opening loads it
        counted = _count(c)
        source.recording = False
        codec = c.streams.audio[0].codec_context.codec.canonical_name
    if table is not None and name in DATA_RELATIVE:
        table = table.from_data(counted.positions[0] if counted.positions else 0)
    if table is not None:
        points = counted.table_points(table)
        if not len(points[0]) or points[0][0] != 0:  # no table, or not from the start
            points = _first_point(opening, source.ranges)
        header = _merged(opening)
    elif counted.unplaced or name in FIRST_POINT_ONLY:
        points = _first_point(opening, source.ranges)
        header = _merged(opening)
    elif name in SPLICED:
        source.fill_flags()
        points = counted.element_points(source.found, name)
        if name == "matroska":
            blocks = counted.block_points(source.read_range, interval(counted.rate, density))
            points = _merged_points(points, blocks)
        # The first point: a cluster or page the first packet starts, or in
        # Matroska its block, when other tracks' blocks open its cluster
        # (a video's keyframe muxed first).
        if not len(points[1]) or points[1][0] > counted.positions[0]:
            raise NoIndex(f"{name}: the first packet does not start a cluster, block or page")
        header = ((0, int(points[1][0])),)
    else:
        points = counted.packet_points()
        header = _merged(opening)
    index = counted.index(name, codec, header, points, source.length, density)
    # What an Opus stream's SILK packets need beyond the codec's own pre-roll,
    # which ``Generic.build_index`` adds to whatever ``preroll`` is stored.
    extra = mode_preroll(counted.lowest) - round(OPUS_PREROLL * 48000)
    return dataclasses.replace(index, preroll=max(extra, 0))


@dataclasses.dataclass(frozen=True)
class _Table:
    """A ``TABLE_SEEK`` demuxer's seek table as opening loads it: entry
    timestamps (ascending) and byte positions, and samples per timestamp unit."""

    stamps: np.ndarray
    positions: np.ndarray
    samples_per_stamp: Fraction

    def entry(self, stamp: int) -> int:
        """The entry a backward seek to ``stamp`` picks (-1: none)."""
        return int(np.searchsorted(self.stamps, stamp, side="right")) - 1

    def from_data(self, start: int) -> _Table | None:
        """The table of a ``DATA_RELATIVE`` demuxer whose data (the first
        packet) starts at byte ``start``, in file positions; None for an
        empty one (its packets are its points)."""
        if not len(self.positions):
            return None
        return dataclasses.replace(self, positions=self.positions - self.positions[0] + start)


def _table(container: Any) -> _Table:
    """The first audio stream's seek table."""
    stream = container.streams.audio[0]
    entries = np.asarray(sorted((e.timestamp, e.pos) for e in stream.index_entries), np.int64)
    entries = entries.reshape(-1, 2)  # no table (an SV8 file may have none): no points
    return _Table(entries[:, 0], entries[:, 1], stream.time_base * stream.codec_context.sample_rate)


class _EndsEarly(NoIndex):
    """FFmpeg's decode of the file ends at byte ``at``, before the file does:
    its decoder rejects the packet there, or its demuxer fails to read one
    after the packet ending there (a file cut short mid-packet, damage). The
    full decode ends there (docs/decoding.md), so the index can too."""

    def __init__(self, reason: str, at: int, samples: int) -> None:
        super().__init__(reason)
        self.at = at
        #: Samples decoded before it: what the file cut there must decode to.
        self.samples = samples


def _count(container: Any) -> _Counted:
    """Every packet of the first audio stream, and the samples before each.
    Raises ``_EndsEarly`` where FFmpeg's decode ends before the file, once
    it has decoded samples."""
    stream = container.streams.audio[0]
    decoder = stream.codec_context
    counted = _Counted()
    packets = container.demux(stream)
    while True:
        try:
            packet = next(packets)
        except StopIteration:
            break
        except av.FFmpegError as exc:
            at = counted.data_end()
            if not counted.total or at is None:
                raise
            raise _EndsEarly(
                f"FFmpeg cannot read past byte {at} ({exc})", at, counted.total
            ) from None
        if packet.size == 0:  # the end of the stream: what the decoder still holds
            counted.frames(decoder.decode(None))
            continue
        try:
            frames = decoder.decode(packet)
        except (av.FFmpegError, ValueError) as exc:
            reason = f"decoder rejects the packet at byte {packet.pos} ({exc})"
            if not counted.total or packet.pos is None or packet.pos <= 0:
                raise NoIndex(reason) from None
            raise _EndsEarly(reason, packet.pos, counted.total) from None
        counted.packet(packet)
        if decoder.name == "opus":
            counted.lowest = min(counted.lowest, toc_config(memoryview(packet)[0]))
        counted.frames(frames)
    if not counted.total:
        raise NoIndex("no audio decoded")
    return counted


def _first_point(opening: list[tuple[int, int]], demuxing: list[tuple[int, int]]) -> _Candidates:
    """The one seek point of a stream whose packets have no byte positions
    (Musepack SV7) or whose demuxer is in
    ``FIRST_POINT_ONLY``: the first packet, at the
    lowest byte read after opening (the start of the last read of opening
    if demuxing read nothing more). Its crops decode from the start, reading
    what the pass read: the header ranges, then bytes at or past this point."""
    start = min((offset for offset, _ in demuxing), default=opening[-1][0])
    return np.zeros(1, dtype=np.int64), np.asarray([start], dtype=np.int64)


def _merged_points(a: _Candidates, b: _Candidates) -> _Candidates:
    """Two sets of candidate points as one, by sample, then byte."""
    samples, positions = np.concatenate([a[0], b[0]]), np.concatenate([a[1], b[1]])
    order = np.lexsort((positions, samples))
    return samples[order], positions[order]


def _block_start(read: Callable[[int, int], bytes], pos: int, sizes: list[int]) -> int | None:
    """Where the block whose packets FFmpeg reports at ``pos`` (the block's
    content: track number, timestamp, flags, then the frames), ``sizes``
    bytes each, begins: a SimpleBlock's ID, or the ID of the BlockGroup
    that a Block opens (FFmpeg 9's muxer writes Vorbis so). None when the
    bytes around ``pos`` are not the head of such a block (a Block that is
    not its group's first child; a track whose frames the demuxer rebuilds
    from stripped headers: a size that does not add up)."""
    if pos < 2:
        return None
    at = max(pos - 2 * _HEAD_MAX, 0)
    near = read(at, pos + _HEAD_MAX + 4 - at)
    if len(near) <= pos - at:
        return None
    track = _varint_length(near[pos - at])
    lacing = near[pos - at + track + 2 : pos - at + track + 4]
    for start, length, value in _heads(near, at, pos):
        if not _holds(value, track, lacing, sizes):
            continue
        if near[start - at] == _SIMPLE_BLOCK:
            return start
        if near[start - at] == _BLOCK:
            block = 1 + length + value
            groups = _heads(near, at, start)
            found = (g for g, _, v in groups if near[g - at] == _BLOCK_GROUP and v >= block)
            group = next(found, None)
            if group is not None:
                return group
    return None


def _holds(content: int, track: int, lacing: bytes, sizes: list[int]) -> bool:
    """Whether a block's ``content`` bytes are its head (``track`` bytes of
    track number, a timestamp, flags) and exactly the frames ``sizes``: one
    frame unlaced; several behind a lace count that says so and lace sizes
    (none in fixed lacing, at most 8 bytes a frame in Xiph's and EBML's)."""
    frames = sum(sizes)
    if len(sizes) == 1:
        return content == track + 3 + frames
    if len(lacing) < 2 or not lacing[0] & _LACING or lacing[1] != len(sizes) - 1:
        return False
    head = content - (track + 4 + frames)
    if lacing[0] & _LACING == _FIXED_LACING:
        return head == 0
    return 0 <= head <= 8 * (len(sizes) - 1)


def _heads(near: bytes, at: int, end: int) -> Iterator[tuple[int, int, int]]:
    """Element heads (a one-byte ID and a size) that end at ``end`` in
    ``near`` (the bytes from ``at``): their start, size length and size."""
    for length in range(1, 9):
        start = end - 1 - length
        if start < at:
            return
        head = near[start - at + 1 : end - at]
        if _varint_length(head[0]) == length:
            yield start, length, int.from_bytes(head) & ((1 << (7 * length)) - 1)


def _varint_length(first: int) -> int:
    """Bytes of an EBML variable-size integer, from its first byte (9: invalid)."""
    return 9 - first.bit_length() if first else 9


def _merged(ranges: list[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """Byte ranges sorted, with overlapping and touching ones joined."""
    out: list[list[int]] = []
    for start, size in sorted(ranges):
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], start + size)
        else:
            out.append([start, start + size])
    return tuple((start, end - start) for start, end in out)


#: Candidate seek points: (samples decoded before, byte position), ascending.
_Candidates = tuple[np.ndarray, np.ndarray]


class _Counted:
    """Packets and the samples decoded before each, as the pass goes."""

    def __init__(self) -> None:
        self.positions = array("q")
        self.sizes = array("q")
        self.samples = array("q")
        self.keyframes = bytearray()
        self.stamps = array("q")
        self.total = 0
        #: Whether packets come without byte positions (then none has a place).
        self.unplaced = False
        self.rate = 0
        self.channels = 0
        #: Opus: the lowest TOC configuration of its packets (``opus.mode_preroll``).
        self.lowest = NO_PACKET

    def packet(self, packet: Any) -> None:
        if packet.pos is None or packet.pos < 0:
            self.unplaced = True
        elif self.positions and packet.pos < self.positions[-1]:
            raise NoIndex("packets out of byte order")
        self.positions.append(-1 if self.unplaced else packet.pos)
        self.sizes.append(packet.size)
        self.samples.append(self.total)
        self.keyframes.append(bool(packet.is_keyframe))
        self.stamps.append(-1 if packet.pts is None else packet.pts)

    def frames(self, frames: list[Any]) -> None:
        for frame in frames:
            shape = (frame.sample_rate, frame.layout.nb_channels)
            if self.rate and (self.rate, self.channels) != shape:
                raise NoIndex("sample rate or channels change mid-stream")
            self.rate, self.channels = shape
            self.total += frame.samples

    def data_end(self) -> int | None:
        """Where the last packet counted ends (None: packets have no place)."""
        if self.unplaced or not self.positions:
            return None
        return self.positions[-1] + self.sizes[-1]

    def keys(self) -> np.ndarray:
        """Which packets a decoder can start at: the keyframe flags, or every
        packet when the first is not flagged (a stream's first packet starts
        a decode: its muxer does not use the flag; GStreamer's matroskamux
        leaves it unset on AAC blocks). The index check still checks."""
        flags = np.frombuffer(self.keyframes, dtype=bool)
        return flags if len(flags) and flags[0] else np.ones(len(flags), dtype=bool)

    def packet_points(self) -> tuple[np.ndarray, np.ndarray]:
        """Keyframe packets, the first at each byte position (several
        packets share an Ogg page or an ASF packet: a seek reaches the first)."""
        positions = np.frombuffer(self.positions, dtype=np.int64)
        first = np.ones(len(positions), dtype=bool)
        first[1:] = positions[1:] > positions[:-1]
        keep = first & self.keys()
        return np.frombuffer(self.samples, dtype=np.int64)[keep], positions[keep]

    def table_points(self, table: _Table) -> _Candidates:
        """Keyframe packets a ``TABLE_SEEK`` demuxer's seek lands on, at the
        entry's byte position. A seek is asked for the timestamp of the
        samples decoded before the packet, which must be the packet's own;
        it picks the last entry at or before it, which must be this packet's:
        at its position or after the end of the packet before (MPC8's entries
        are packet headers, and some carry an earlier timestamp than their
        packet's), or, for packets without a position (APE), stamped as it."""
        samples, positions, keys = [], [], self.keys()
        ends = np.frombuffer(self.positions, np.int64) + np.frombuffer(self.sizes, np.int64)
        for k, stamp in enumerate(self.stamps):
            entry = table.entry(stamp)
            if not keys[k] or entry < 0 or stamp * table.samples_per_stamp != self.samples[k]:
                continue
            at, pos = int(table.positions[entry]), self.positions[k]
            after = k == 0 or ends[k - 1] <= at
            if (pos >= 0 and after and at <= pos) or (pos < 0 and table.stamps[entry] == stamp):
                samples.append(self.samples[k])
                positions.append(at)
        return np.asarray(samples, dtype=np.int64), np.asarray(positions, dtype=np.int64)

    def element_points(self, found: dict[int, int], name: str) -> _Candidates:
        """Element starts that are seek points, each just before or at a
        keyframe packet. A Matroska cluster must lie after the end of the
        packet before it and at most ``_CLUSTER_HEAD`` bytes before the
        next (a cluster ID inside a packet's payload is not one); an Ogg
        page must be where FFmpeg reports a packet and not continue one from
        the page before (the planned pages then hold whole packets)."""
        positions = np.frombuffer(self.positions, dtype=np.int64)
        ends = positions + np.frombuffer(self.sizes, dtype=np.int64)
        marks = np.asarray(sorted(found), dtype=np.int64)
        flags = np.asarray([found[int(m)] for m in marks], dtype=np.int64)
        after = np.searchsorted(positions, marks, side="left")
        inside = after < len(positions)
        marks, flags, after = marks[inside], flags[inside], after[inside]
        distance = positions[after] - marks
        if name == "ogg":
            keep = (distance == 0) & (flags >= 0) & (flags & _CONTINUED == 0)
        else:
            clear = (after == 0) | (ends[np.maximum(after - 1, 0)] <= marks)
            keep = (distance > 0) & (distance <= _CLUSTER_HEAD) & clear
        keep &= self.keys()[after]
        samples = np.frombuffer(self.samples, dtype=np.int64)[after[keep]]
        return samples, marks[keep]

    def block_points(self, read: Callable[[int, int], bytes], step: int) -> _Candidates:
        """Matroska blocks (``_block_start``) that start with a keyframe packet,
        the first in each ``step``-wide bin of samples, as ``Points`` keeps
        them: a splice can start at one (``OPEN_CLUSTER``). ``read(offset,
        length)``: the file's bytes."""
        positions = np.frombuffer(self.positions, dtype=np.int64)
        sizes = np.frombuffer(self.sizes, dtype=np.int64)
        samples = np.frombuffer(self.samples, dtype=np.int64)
        usable = self.keys().copy()
        usable[1:] &= positions[1:] > positions[:-1]  # a laced block's packets share one position
        ends = np.searchsorted(positions, positions, side="right")  # past a block's last packet
        found_samples, found_positions = [], []
        k, count = 0, len(positions)
        while k < count:
            laced = sizes[k : ends[k]].tolist()
            start = _block_start(read, int(positions[k]), laced) if usable[k] else None
            if start is None:
                k += 1
                continue
            found_samples.append(int(samples[k]))
            found_positions.append(start)
            k = int(np.searchsorted(samples, (samples[k] // step + 1) * step))  # the next bin
        return np.asarray(found_samples, dtype=np.int64), np.asarray(found_positions, np.int64)

    def index(
        self,
        name: str,
        codec: str,
        header: tuple[tuple[int, int], ...],
        candidates: _Candidates,
        length: int,
        density: float,
    ) -> SeekIndex:
        if not len(candidates[1]):
            raise NoIndex(f"{name}: no packet a decoder can start from")
        points = Points(interval(self.rate, density))
        for sample, pos in zip(*(c.tolist() for c in candidates), strict=True):
            if not points.samples or sample > points.samples[-1]:
                points.add(sample, pos)
        sample_pos, byte_pos = points.arrays()
        return SeekIndex(
            status="ok",
            codec=codec,
            container=CONTAINER_PREFIX + name,
            sample_rate=self.rate,
            channels=self.channels,
            timescale=self.rate,
            first_sample=0,
            num_samples=self.total,
            header=header,
            data_start=int(byte_pos[0]),
            data_end=length,
            sample_pos=sample_pos,
            byte_pos=byte_pos,
            # FFmpeg's demuxer placed these points and decodes from them: a
            # crop through them is exact under the FFmpeg that checked them.
            length_policy=LENGTH_POLICY,
        )


def _with_seek_loss(index: SeekIndex, source: _Recording, name: str) -> SeekIndex:
    """The index with what a decoder started at a seek point does
    differently, measured: the samples it loses at the start (added to the
    pre-roll) and those it adds at the end (``padding``).

    A demuxer repositioned by byte may not give the packet there first (ASF's
    drops the rest of the container packet it thinks it is in; a Vorbis
    decoder gives nothing for its first packet), and it has no timestamps,
    so end trimming done by timestamp (the LAME tag's padding) does not
    happen. Decoding from a few seek points to the next but one, and from
    the last but one to the end, measures both. A demuxer that comes back
    before the point (one that reads by its own table), with nothing, or
    with more samples than the pass counted cannot be placed this way."""
    points, pos, samples = len(index.byte_pos), index.byte_pos, index.sample_pos
    if points < 3:
        # Too short to measure: its crops decode from the first packet.
        return dataclasses.replace(index, sample_pos=samples[:1], byte_pos=pos[:1])
    probes = {min(int(points * f), points - 2) for f in _PROBES} - {0}
    loss = max(_lost(source, name, index, k, _probe_end(index, k)) for k in probes)
    # The last point a second before the last one (points a packet apart, at
    # ``--density inf``, are closer than a cold decoder's first output), and
    # not the first, from which a decode is not repositioned.
    k = int(np.searchsorted(samples, samples[-1] - index.sample_rate, side="right")) - 1
    k = min(max(k, 1), points - 2)
    lost = _lost(source, name, index, k, points - 1)
    to_end = _decoded(source, name, index, k, None)
    extra = to_end - (index.num_samples - int(samples[k])) + lost
    if extra < 0:
        raise NoIndex(f"{name} gives fewer samples at the end after a seek")
    return dataclasses.replace(index, preroll=index.preroll + loss, padding=extra)


def _probe_end(index: SeekIndex, k: int) -> int:
    """Where a probe decode from point ``k`` stops: the next point but one,
    or the first a second on when that is nearer (a packet apart)."""
    samples = index.sample_pos
    later = int(np.searchsorted(samples, samples[k] + index.sample_rate))
    return min(max(k + 2, later), len(samples) - 1)


def _lost(source: _Recording, name: str, index: SeekIndex, k: int, end: int) -> int:
    """Samples a decode from seek point ``k`` lacks by point ``end``."""
    decoded = _decoded(source, name, index, k, end)
    if decoded == 0:
        raise NoIndex(f"{name}: nothing decoded after a seek")
    lost = int(index.sample_pos[end]) - decoded - int(index.sample_pos[k])
    if lost < 0:
        raise NoIndex(f"{name} gives more samples after a seek than in order")
    return lost


def _decoded(source: _Recording, name: str, index: SeekIndex, k: int, end: int | None) -> int:
    """Samples decoded from seek point ``k`` up to point ``end`` (None: the end)."""
    start = int(index.byte_pos[k])
    if name in SPLICED:
        stop = index.data_end if end is None else int(index.byte_pos[end])
        head = source.read_range(0, index.header[0][1])
        data = source.read_range(start, stop - start)
        with open_spliced(head, data, name) as container:
            return _decoded_from(container, name, None, end is None)
    source.seek(0)
    with open_demuxer(source, name) as c:
        reposition(c, name, start, int(index.sample_pos[k]))
        places = index.sample_pos if name in STAMPED else index.byte_pos
        span = (int(places[k]), None if end is None else int(places[end]))
        return _decoded_from(c, name, span, end is None)


def _decoded_from(
    container: Any, name: str, span: tuple[int, int | None] | None, flush: bool
) -> int:
    """Samples decoded from where ``container`` is; with ``span``, only from
    packets placed (``place``) at or after its start and before its stop."""
    stream = container.streams.audio[0]
    decoder = stream.codec_context
    total = 0
    for packet in container.demux(stream):
        at = place(packet, name) if span is not None and packet.size else None
        if packet.size == 0:
            frames = decoder.decode(None) if flush else []
        elif span is not None and (at is None or at < span[0]):
            raise NoIndex(f"{container.format.name} does not resume at its seek point")
        elif span is not None and span[1] is not None and at >= span[1]:
            break
        else:
            frames = decoder.decode(packet)
        total += sum(frame.samples for frame in frames)
    return total


def matches(head: bytes) -> bool:
    """Never: the generic index is what is tried when no native format fits."""
    return False
