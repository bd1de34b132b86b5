"""Index any audio FFmpeg demuxes: one pass of its demuxer and decoder.

The positions are the full decode's own: the pass feeds every packet of the
first audio stream to a decoder, as the full decode does, and a packet's
sample position is the number of samples the decoder gave before it. Only
that is exact for every container: Matroska and ASF stamp packets in
milliseconds, raw streams (ADTS, AC-3) have no timestamps at all, and
priming, pre-skip and end trimming are the decoder's to apply.

The header ranges are the bytes FFmpeg reads while it opens the file with
the demuxer named and probing cut short (``OPEN_OPTIONS``), exactly as a
crop's decoder opens it; a recording file object notes them.
"""

from __future__ import annotations

import dataclasses
from array import array
from typing import Any, BinaryIO

import av

from ...index.table import SeekIndex
from ...storage.files import RangeFile
from ..reader import NoIndex, Points, Reader, interval

__all__ = ["CONTAINER_PREFIX", "OPEN_OPTIONS", "demuxer_name", "parse"]

#: ``SeekIndex.container`` of a generic index: this, then FFmpeg's demuxer name.
CONTAINER_PREFIX = "ffmpeg:"
#: How indexer and decoder open a file: the demuxer is named, and stream
#: probing stops after the first packet, so opening reads a few KiB, not 5 MB.
OPEN_OPTIONS = {"probesize": "32", "analyzeduration": "1"}
#: PyAV's I/O buffer: what one read of the demuxer asks for. Smaller than
#: FFmpeg's 32 KiB so the header ranges hold little more than the header.
BUFFER_SIZE = 4096
#: Demuxers that accept a byte seek but do not resume there, measured: Ogg's
#: keeps the page it was reading and drops a varying part of the next one,
#: depending on how the bytes arrive (its own index is the native one);
#: Matroska's keeps its place in the element tree and skips from the end of
#: the cluster it was in, wherever the seek went.
NO_BYTE_SEEK = {
    "ogg": "the demuxer drops a varying part of the page after a byte seek",
    "matroska": "the demuxer resumes after its current cluster, not at a byte seek",
}
#: FFmpeg's buffer for the first open, which only learns the demuxer's name.
_PROBE_BUFFER = 32768


class _Recording(RangeFile):
    """The stream as FFmpeg reads it, noting the byte ranges read while ``recording``."""

    def __init__(self, stream: BinaryIO, length: int) -> None:
        super().__init__(length)
        self._stream = stream
        self.recording = False
        self.ranges: list[tuple[int, int]] = []

    def _read_at(self, position: int, size: int) -> bytes:
        self._stream.seek(position)
        data = self._stream.read(size)
        if not data:
            raise NoIndex("stream ended before its length")
        if self.recording:
            self.ranges.append((position, len(data)))
        return data


def demuxer_name(container: Any) -> str:
    """FFmpeg's name for the demuxer (the first of its aliases: ``mov``)."""
    return str(container.format.name).split(",")[0]


def parse(reader: Reader, *, density: float) -> SeekIndex:
    """Index the first audio stream of a file FFmpeg can open."""
    stream = reader.raw_stream()
    if stream is None:
        raise NoIndex("generic index needs a seekable stream")
    length = reader.length()
    source = _Recording(stream, length)
    try:
        with av.open(source, "r", buffer_size=_PROBE_BUFFER) as probe:
            name = demuxer_name(probe)
            if not probe.streams.audio:
                raise NoIndex(f"no audio stream in {name}")
    except av.FFmpegError:
        raise NoIndex("unknown container") from None
    try:
        source.seek(0)
        source.recording = True
        with av.open(
            source, "r", format=name, options=OPEN_OPTIONS, buffer_size=BUFFER_SIZE
        ) as container:
            source.recording = False
            index = _index(container, name, _merged(source.ranges), length, density)
        try:
            return _with_seek_loss(index, source, name)
        except av.FFmpegError as exc:
            raise NoIndex(
                f"{name}: decoding after a byte seek fails ({type(exc).__name__})"
            ) from None
    except av.FFmpegError as exc:
        raise NoIndex(f"FFmpeg cannot read it ({type(exc).__name__})") from None


def _merged(ranges: list[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """Byte ranges sorted, with overlapping and touching ones joined."""
    out: list[list[int]] = []
    for start, size in sorted(ranges):
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], start + size)
        else:
            out.append([start, start + size])
    return tuple((start, end - start) for start, end in out)


def _index(
    container: Any, name: str, header: tuple[tuple[int, int], ...], length: int, density: float
) -> SeekIndex:
    if container.format.flags & av.format.Flags.no_byte_seek.value:
        raise NoIndex(f"{name} cannot seek by byte")
    if name in NO_BYTE_SEEK:
        raise NoIndex(f"{name}: {NO_BYTE_SEEK[name]}")
    if not container.streams.audio:
        raise NoIndex(f"no audio stream in {name} opened without probing")
    stream = container.streams.audio[0]
    decoder = stream.codec_context
    counted = _Counted()
    for packet in container.demux(stream):
        if packet.size == 0:  # the end of the stream: what the decoder still holds
            counted.frames(decoder.decode(None))
            continue
        counted.packet(packet)
        try:
            frames = decoder.decode(packet)
        except (av.FFmpegError, ValueError) as exc:
            raise NoIndex(f"decoder rejects the packet at byte {packet.pos} ({exc})") from None
        counted.frames(frames)
    return counted.index(name, decoder.codec.canonical_name, header, length, density)


class _Counted:
    """Packets and the samples decoded before each, as the pass goes."""

    def __init__(self) -> None:
        self.positions = array("q")
        self.samples = array("q")
        self.keyframes = bytearray()
        self.total = 0
        self.rate = 0
        self.channels = 0

    def packet(self, packet: Any) -> None:
        if packet.pos is None or packet.pos < 0:
            raise NoIndex("packets without byte positions")
        if self.positions and packet.pos < self.positions[-1]:
            raise NoIndex("packets out of byte order")
        self.positions.append(packet.pos)
        self.samples.append(self.total)
        self.keyframes.append(bool(packet.is_keyframe))

    def frames(self, frames: list[Any]) -> None:
        for frame in frames:
            shape = (frame.sample_rate, frame.layout.nb_channels)
            if self.rate and (self.rate, self.channels) != shape:
                raise NoIndex("sample rate or channels change mid-stream")
            self.rate, self.channels = shape
            self.total += frame.samples

    def index(
        self,
        name: str,
        codec: str,
        header: tuple[tuple[int, int], ...],
        length: int,
        density: float,
    ) -> SeekIndex:
        if not self.total:
            raise NoIndex("no audio decoded")
        points = Points(interval(self.rate, density))
        last_pos = -1
        for pos, sample, key in zip(self.positions, self.samples, self.keyframes, strict=True):
            # Several packets at one position (an Ogg page, an ASF packet):
            # a seek there reaches the first; points need new samples too.
            fresh = not points.samples or sample > points.samples[-1]
            if key and pos > last_pos and fresh:
                points.add(sample, pos)
            last_pos = pos
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
            data_start=int(self.positions[0]) if self.positions else 0,
            data_end=length,
            sample_pos=sample_pos,
            byte_pos=byte_pos,
        )


def matches(head: bytes) -> bool:
    """Never: the generic index is what is tried when no native format fits."""
    return False


#: Seek points a byte seek is tried at, as fractions of the way through the points.
_PROBES = (0.25, 0.5, 0.75)


def _with_seek_loss(index: SeekIndex, source: RangeFile, name: str) -> SeekIndex:
    """The index with what a byte seek changes, measured: the samples it
    loses at the start (added to the pre-roll) and those it adds at the end
    (``padding``).

    A demuxer repositioned by byte may not give the packet there first (ASF's
    drops the rest of the container packet it thinks it is in; a Vorbis
    decoder gives nothing for its first packet), and it has no timestamps,
    so end trimming done by timestamp (the LAME tag's padding) does not
    happen. Decoding from a few seek points to the next but one, and from
    the last but one to the end, measures both. A demuxer that comes back
    before the point (one that reads by its own table) or with more samples
    than the pass counted cannot be placed by byte."""
    points, pos, samples = len(index.byte_pos), index.byte_pos, index.sample_pos
    if points < 3:
        # Too short to measure: its crops decode from the first packet.
        return dataclasses.replace(index, sample_pos=samples[:1], byte_pos=pos[:1])
    probes = {min(int(points * f), points - 2) for f in _PROBES} - {0}
    loss = max(_lost(source, name, index, k, min(k + 2, points - 1)) for k in probes)
    k = points - 2
    lost = _lost(source, name, index, k, k + 1)
    extra = _decoded(source, name, int(pos[k]), None) - (index.num_samples - int(samples[k])) + lost
    if extra < 0:
        raise NoIndex(f"{name} gives fewer samples at the end after a byte seek")
    return dataclasses.replace(index, preroll=loss, padding=extra)


def _lost(source: RangeFile, name: str, index: SeekIndex, k: int, end: int) -> int:
    """Samples a decode from a byte seek to point ``k`` lacks by point ``end``."""
    decoded = _decoded(source, name, int(index.byte_pos[k]), int(index.byte_pos[end]))
    if decoded == 0:
        raise NoIndex(f"{name}: nothing decoded after a byte seek")
    lost = int(index.sample_pos[end]) - decoded - int(index.sample_pos[k])
    if lost < 0:
        raise NoIndex(f"{name} gives more samples after a byte seek than in order")
    return lost


def _decoded(source: RangeFile, name: str, start: int, stop: int | None) -> int:
    """Samples decoded after a byte seek to ``start``, up to the packet at ``stop``."""
    source.seek(0)
    with av.open(source, "r", format=name, options=OPEN_OPTIONS, buffer_size=BUFFER_SIZE) as c:
        return _decoded_from(c, start, stop)


def _decoded_from(container: Any, start: int, stop: int | None) -> int:
    """Samples decoded from a byte seek to ``start`` up to the packet at ``stop``."""
    stream = container.streams.audio[0]
    container.seek(start, unsupported_byte_offset=True)
    decoder = stream.codec_context
    total = 0
    for packet in container.demux(stream):
        if packet.size == 0:
            frames = decoder.decode(None) if stop is None else []
        elif stop is not None and packet.pos >= stop:
            break
        elif packet.pos is None or packet.pos < start:
            raise NoIndex(f"{container.format.name} does not resume at a byte position")
        else:
            frames = decoder.decode(packet)
        total += sum(frame.samples for frame in frames)
    return total
