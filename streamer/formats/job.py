"""What a format is handed to decode one crop: the episode, the plan, the bytes, a context.

Timelines: a crop asks for *gapless* samples ``[first, last)`` at the native
rate, the indices of FFmpeg's full gapless decode. The seek index counts on
the codec's *native* timeline (``timescale`` units): gapless sample ``g`` is
native ``first_sample + g * timescale / sample_rate`` (``to_native``,
``to_gapless``).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import numpy as np

from ..errors import CropError
from ..index.table import SeekIndex
from ..shard.blob import BlobHandle
from .frames import SampleBuffer

__all__ = [
    "CropPlan",
    "DecodeContext",
    "DecodeStats",
    "Episode",
    "Fetched",
    "Pieces",
    "Ranges",
    "StaleIndex",
    "decode_span",
    "ending_at",
    "to_gapless",
    "to_native",
]

log = logging.getLogger(__name__)

#: ``(offset, length)`` byte ranges of a blob.
Ranges = tuple[tuple[int, int], ...]
#: Bytes of a blob at their offsets.
Pieces = tuple[tuple[int, memoryview], ...]


@dataclass(frozen=True)
class Episode:
    """One episode as a crop sees it, built once by the dataset: its key, the
    shard it lives in, a handle on its encoded bytes and its seek index
    (``None``: the dataset has no ``seek_index/``). It pickles small: the
    blob handle travels as its reader's address (a path each process maps,
    or a remote store's options).

    ``sha256`` is the digest of the blob's bytes as ``audio_info`` records
    them (``streamer pack`` writes it), 32 bytes, or None where nothing is
    recorded (another tool's ``audio_info``, or a layout whose audio column
    may hold other bytes than the ones ``audio_info`` describes): a crop
    whose index finds other bytes than it was built from is served by the
    exact fallback only once the blob's bytes hash to it (``decode.crop``)."""

    key: str
    shard: str | None
    blob: BlobHandle
    index: SeekIndex | None
    sha256: bytes | None = None

    @property
    def id(self) -> tuple[str | None, str, int, bytes | None]:
        """What identifies the episode's bytes within a process (decoder
        caches): its place, its length and, where recorded, its digest (a
        dataset packed again at the same place in this process, or one
        under the same URL on another endpoint, has other bytes there: an
        MP4 demuxer kept for the first, its sample tables the old blob's,
        failed every crop of the second)."""
        return (self.shard, self.key, self.blob.length, self.sha256)

    def error(self, message: str, offset: int | None = None) -> CropError:
        """A ``CropError`` that names this episode."""
        return CropError(message, shard=self.shard, key=self.key, offset=offset)


class StaleIndex(Exception):
    """Raised by a format's decoder when the blob's bytes show that the index
    was built from other bytes (the blob rewritten, and its index row let
    through: a shard written before ``num_bytes``, or a blob of its old
    length): the crop is decoded by the fallback instead, with ``reason``
    counted, never from the index. Not a ``CropError``: nothing is wrong
    with the crop."""

    def __init__(self, detail: str) -> None:
        super().__init__(f"index built for another blob ({detail})")

    @property
    def reason(self) -> str:
        return str(self)


@dataclass(frozen=True)
class CropPlan:
    """What to fetch and where decoding starts, for gapless samples ``[first, last)``."""

    first: int
    last: int
    #: Index of the seek point decoding starts from (-1 for PCM: arithmetic).
    point: int
    #: Native position of the first sample of the frame/page at ``data[0]``.
    start_native: int
    #: Native position decoding must start at or before: ``first`` less the
    #: pre-roll, and not before ``start_native``. A format that knows where
    #: each frame of the data starts (by count, or from a sample table) starts
    #: at the last frame at or before it, not at the seek point: seek points
    #: are about a second apart, frames a few milliseconds.
    decode_from: int
    #: ``(offset, length)`` in the blob: the header ranges, then the data range.
    header: Ranges
    data: tuple[int, int]
    #: Native position of the seek point where the data range ends (the
    #: first sample after it); -1 when the data runs to the end of the audio.
    end_native: int = -1

    def starting_at(self, index: SeekIndex, point: int) -> CropPlan:
        """The same plan, decoding from seek point ``point`` instead."""
        start, end = int(index.byte_pos[point]), sum(self.data)
        return dataclasses.replace(
            self, point=point, start_native=int(index.sample_pos[point]), data=(start, end - start)
        )

    def reaching_past(self, index: SeekIndex, margin: int) -> CropPlan:
        """The same plan, its data running on to the next seek point (or
        the end) when the crop ends within ``margin`` native units of where
        the data ends: a decoder that holds samples back until it has more
        packets (``ffmpeg.OPUS_HELD_BACK``) needs them."""
        if self.end_native < 0 or self.end_native - to_native(index, self.last) >= margin:
            return self
        point = int(np.searchsorted(index.sample_pos, self.end_native, side="right"))
        end, native = ending_at(index, point)
        start = self.data[0]
        return dataclasses.replace(self, data=(start, end - start), end_native=native)

    def with_header(self, extra: Ranges) -> CropPlan:
        """The same plan with more ranges read up front (a format's own needs)."""
        return dataclasses.replace(self, header=(*self.header, *extra)) if extra else self

    @property
    def ranges(self) -> Ranges:
        return (*self.header, self.data)

    @property
    def nbytes(self) -> int:
        return sum(length for _, length in self.ranges)


@dataclass(frozen=True)
class Fetched:
    """Planned bytes in memory, what a format decodes from: the plan's ranges
    in order (header ranges first, the data range last) at their blob
    offsets. For local shards they are views of the memory map, so nothing
    is copied until a format asks; pickled, they travel as just these bytes.
    """

    pieces: Pieces

    @property
    def header(self) -> bytes:
        """The header ranges, concatenated."""
        return b"".join(bytes(view) for _, view in self.pieces[:-1])

    @property
    def data(self) -> memoryview:
        """The data range."""
        return self.pieces[-1][1]

    @property
    def nbytes(self) -> int:
        return sum(len(view) for _, view in self.pieces)

    def holds(self, start: int, end: int) -> bool:
        """Whether the pieces together hold every byte of ``[start, end)``."""
        for offset, view in sorted(self.pieces, key=lambda piece: piece[0]):
            if start >= end:
                break
            if offset <= start < offset + len(view):
                start = offset + len(view)
        return start >= end

    def adding(self, pieces: Pieces) -> Fetched:
        """These bytes with ``pieces`` (held back, now delivered) in front."""
        return Fetched((*pieces, *self.pieces))

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild, (tuple((offset, bytes(view)) for offset, view in self.pieces),))


def _rebuild(pieces: tuple[tuple[int, bytes], ...]) -> Fetched:
    return Fetched(tuple((offset, memoryview(data)) for offset, data in pieces))


@dataclass
class DecodeStats:
    """Decode counters (per dataset, or per pipeline). ``fallback`` crops had
    no usable index; ``unplanned_reads`` counts a decoder asking for bytes
    outside its plan (always a bug signal); ``bad_packets`` are packets,
    frames or pages that failed a check (FLAC frame and Ogg page CRCs) or
    that the decoder rejected, each decoded as silence or dropped, and
    spans of audio data that failed their CRC (``index.content``; the
    crop is then a ``CropError``);
    ``planned_bytes`` is what the crops' decoders were given. ``paths``
    counts the crops by the path that served them: ``"index"`` (a native
    index), ``"generic index"`` (an FFmpeg packet index, container
    ``ffmpeg:...``), ``"fallback from the start"`` (no usable index).
    ``past_end`` counts crops that ran past the episode's end, clipped (or
    zero-padded with ``pad``): a sampler that plans from exact durations
    makes none, so they come from a duration that is a header's estimate
    (an episode without an index) or from crops asked for past the end."""

    crops: int = 0
    planned_bytes: int = 0
    fallback: int = 0
    fallback_reasons: dict[str, int] = field(default_factory=dict)
    unplanned_reads: int = 0
    unplanned_bytes: int = 0
    bad_packets: int = 0
    past_end: int = 0
    paths: dict[str, int] = field(default_factory=dict)

    def count_fallback(self, reason: str) -> None:
        self.fallback += 1
        self.fallback_reasons[reason] = self.fallback_reasons.get(reason, 0) + 1

    def count_path(self, path: str) -> None:
        self.paths[path] = self.paths.get(path, 0) + 1

    def add(self, other: DecodeStats) -> None:
        """Add another's counts to these (a worker's, for one crop)."""
        for name, value in vars(other).items():
            if isinstance(value, dict):
                mine = getattr(self, name)
                for what, count in value.items():
                    mine[what] = mine.get(what, 0) + count
            else:
                setattr(self, name, getattr(self, name) + value)

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


@dataclass
class DecodeContext:
    """Everything a format's decoder may need besides the index, plan and bytes.

    ``held_back()`` delivers the plan's ranges the caller did not send up
    front (``Format.deferrable``: MP4's ``moov``), wherever they are: a read
    of the blob in this process, or a request to the parent in a decode
    worker. ``read_unplanned`` reads bytes outside the plan, counted.
    ``mono``: the crop is wanted as the mean of its channels, which the
    decoder's buffer (``buffer``) computes as the frames come out.
    """

    episode: Episode
    stats: DecodeStats
    held_back: Callable[[], Pieces]
    mono: bool = False

    def buffer(self, channels: int, capacity: int) -> SampleBuffer:
        """The buffer a decoder writes a crop's frames of ``channels``
        channels into: their mean alone for a mono crop (no full-width copy
        to reduce afterwards, ``frames.SampleBuffer``)."""
        return SampleBuffer(channels, capacity, mean=self.mono)

    def width(self, channels: int) -> int:
        """The channels of ``buffer(channels, ...)``'s samples."""
        return 1 if self.mono else channels

    def read_unplanned(self, offset: int, length: int) -> bytes:
        self.stats.unplanned_reads += 1
        self.stats.unplanned_bytes += length
        return bytes(self.episode.blob.read_range(offset, length))

    def error(self, message: str, offset: int | None = None) -> CropError:
        """A ``CropError`` naming the episode, and ``offset`` in its blob when
        the bad bytes are known (the planned data's start, a header's)."""
        return self.episode.error(message, offset)

    def bad_packet(self, why: str, offset: int | None = None) -> None:
        """Count bytes that are not decoded as they stand (``why``), and say
        where at debug level: a crop may carry on around them, but a run
        that counts many wants to find them."""
        self.stats.bad_packets += 1
        episode = self.episode
        log.debug(
            "bad packet: %s (shard=%r, key=%r, offset=%r)", why, episode.shard, episode.key, offset
        )


def ending_at(index: SeekIndex, point: int) -> tuple[int, int]:
    """Where a plan's data ends when it runs to seek point ``point``: (its
    byte offset, its native position); past the last point, the end of the
    data and -1 (``CropPlan.end_native``)."""
    if point < len(index.sample_pos):
        return int(index.byte_pos[point]), int(index.sample_pos[point])
    return index.data_end, -1


def to_native(index: SeekIndex, sample: int) -> int:
    """Native position of gapless sample ``sample``."""
    if index.timescale == index.sample_rate:
        return index.first_sample + sample
    return index.first_sample + round(sample * index.timescale / index.sample_rate)


def to_gapless(index: SeekIndex, native: int) -> int:
    """Gapless sample index of native position ``native``."""
    if index.timescale == index.sample_rate:
        return native - index.first_sample
    return round((native - index.first_sample) * index.sample_rate / index.timescale)


def decode_span(index: SeekIndex, plan: CropPlan) -> int:
    """About how many samples decoding ``plan`` gives: from where its data
    starts to the seek point where it ends (or the crop's end), a few
    frames to spare, rounded up to 32 Ki samples (fewer distinct sizes for
    the allocator to reuse). The size of the buffer a format decodes into:
    it grows when that is not enough; a hint past 4 Mi samples is not taken."""
    end = to_gapless(index, plan.end_native) if plan.end_native >= 0 else plan.last
    span = max(end, plan.last) - to_gapless(index, plan.start_native) + 8192
    return min(max(-(-span // 32768) * 32768, 0), 1 << 22)
