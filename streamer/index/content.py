"""Whether an episode's bytes are still the ones its seek index was built from.

``num_bytes`` catches a blob rewritten to another length; a blob rewritten to
the same length (another episode's audio swapped in under the key, an mp3
retagged and trimmed, a WAV whose header chunks changed) needs its bytes
looked at. Each ``seek_index/`` row records CRC-32s of bytes that every crop
through it reads anyway (``table.CONTENT_COLUMN``, ``SeekIndex.content_crc``):

- each ``header`` range, whole (what a decoder is fed before the audio);
- the first ``POINT_BYTES`` bytes at each seek point (fewer when the next
  point, or the end of the audio data, comes first): a crop's data range
  starts at a seek point, and a frame or page header with what follows it
  (mp3 side information, an Ogg page's CRC, a FLAC frame number) differs as
  soon as the frames moved or are another episode's.

PCM (``block_align``) has no seek points: its crops read the header ranges
too when they are small (``SMALL_HEADER``), whose bytes then say
everything the index says. A crop checks the CRCs of the ranges it read
(``crop_checks``, ``stale``) and on a mismatch goes through the exact path
without the index, counted as ``STALE``. A row without the column (a shard
written before it) is not checked.

Those bytes say whether the index still belongs to the blob, not whether the
audio between them is intact. The ``span_crc`` column (``SeekIndex.span_crc``)
covers that: a CRC-32 of the whole data of each *span*, ``span_size`` seek-point
intervals (one unless the points are denser than about one a second), or for
PCM ``span_size`` bytes from ``data_start`` (``span_ranges``). Containers
whose frames or pages carry CRCs of their own, checked on every byte a crop
decodes (``SELF_CHECKED``: FLAC, Ogg), record none. A crop reads the spans
its data range touches whole (``span_checks``: PCM crops and grouped spans
read a little more than they decode) and checks them once its bytes passed
the checks above: a mismatch there is damaged data (``DAMAGED``), a
``CropError``, never the fallback, which would decode the same bytes; unless
the blob hashes to the ``sha256`` ``audio_info`` records for it: then the
audio is intact and the span CRCs are another blob's (a ``seek_index/``
shard copied from another pack of files of the same lengths, whose PCM
headers are byte for byte the same: nothing else told), and the crop goes
through the exact path, counted as ``STALE_SPANS``. ``streamer index`` looks
at a few spans of each row (``sampled_spans``) for the same reason.
"""

from __future__ import annotations

import itertools
import zlib
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np

from .table import SeekIndex

__all__ = [
    "DAMAGED",
    "PCM_SPAN_BYTES",
    "PCM_SPAN_SECONDS",
    "POINT_BYTES",
    "SELF_CHECKED",
    "SMALL_HEADER",
    "STALE",
    "STALE_SPANS",
    "Check",
    "SpanChecks",
    "checked_ranges",
    "content_crcs",
    "crop_checks",
    "damaged_spans",
    "expected_count",
    "expected_spans",
    "matches",
    "mismatch",
    "sampled_spans",
    "span_bounds",
    "span_checks",
    "span_crcs",
    "span_ranges",
    "span_size",
    "stale",
]

#: Bytes checked at each seek point.
POINT_BYTES = 64
#: Header bytes worth reading only to check them: PCM crops read (and
#: check) the header ranges when they hold at most this, and a look at
#: every row of a shard (``matches(sample=True)``) skips larger ranges.
SMALL_HEADER = 64 * 1024
#: Why a crop does not use its index: the bytes it read are not the ones
#: the index was built from.
STALE = "index stale: content changed"

#: Audio per span CRC of a PCM episode (``span_size``): its bytes rounded
#: down to a power of two, within ``PCM_SPAN_BYTES``. A crop reads its data
#: out to its spans' ends, on average one span more than it decodes (5 % of
#: a 2 s crop), and the index grows by 4 bytes a span (docs/seek-index.md,
#: "Damaged audio data": measured).
PCM_SPAN_SECONDS = 0.05
PCM_SPAN_BYTES = (4096, 1 << 20)
#: Containers whose formats check CRCs of their own on every byte a crop
#: decodes (FLAC frames' CRC-16, Ogg pages' CRC-32): no span CRCs.
SELF_CHECKED = frozenset({"flac", "ogg"})
#: Why a crop fails when a span it read has another CRC than recorded while
#: the bytes at its seek point still have theirs: the audio data is damaged.
DAMAGED = "damaged audio data"
#: Why a crop does not use its index when the spans it read have other CRCs
#: than recorded in a blob that hashes to its recorded ``sha256``: the
#: span CRCs (and the index) were built from another blob.
STALE_SPANS = "index stale: span CRCs of other audio data"
#: Bytes read per call while computing span CRCs (``span_crcs``).
_READ_CHUNK = 8 << 20

#: ``(offset, length, crc32)`` of bytes a crop reads.
Check = tuple[int, int, int]
Ranges = Sequence[tuple[int, int]]
Pieces = Sequence[tuple[int, memoryview]]


def checked_ranges(index: SeekIndex) -> list[tuple[int, int]]:
    """The byte ranges whose CRCs a row records, in order: the header
    ranges, then one per seek point (none for PCM)."""
    ranges = [(int(offset), int(length)) for offset, length in index.header]
    if index.block_align:
        return ranges
    starts = np.asarray(index.byte_pos, dtype=np.int64)
    ends = np.append(starts[1:], index.data_end)
    lengths = np.minimum(ends - starts, POINT_BYTES)
    return ranges + list(zip(starts.tolist(), lengths.tolist(), strict=True))


def content_crcs(index: SeekIndex, read: Callable[[Ranges], list[memoryview]]) -> np.ndarray:
    """The CRC-32s of ``checked_ranges(index)``, read with ``read``."""
    views = read(checked_ranges(index))
    return np.fromiter((zlib.crc32(view) for view in views), dtype=np.uint32, count=len(views))


def expected_count(index: SeekIndex) -> int:
    """How many CRCs a row of ``index`` records."""
    return len(index.header) + (0 if index.block_align else len(index.byte_pos))


def crop_checks(index: SeekIndex, header: Ranges, point: int) -> tuple[Check, ...]:
    """The checks for a crop that reads the ranges ``header`` and the data
    from seek point ``point`` (-1: none): the index's header ranges among
    them and the bytes at the point; none when the row records no CRCs."""
    crcs = index.content_crc
    if not len(crcs):
        return ()
    wanted = set(header)
    checks = [
        (int(offset), int(length), int(crc))
        for (offset, length), crc in zip(
            index.header, crcs[: len(index.header)].tolist(), strict=True
        )
        if (offset, length) in wanted
    ]
    if point >= 0:
        start = int(index.byte_pos[point])
        end = int(index.byte_pos[point + 1]) if point + 1 < len(index.byte_pos) else index.data_end
        checks.append((start, min(end - start, POINT_BYTES), int(crcs[len(index.header) + point])))
    return tuple(checks)


def mismatch(checks: Sequence[Check], pieces: Pieces) -> Check | None:
    """The first checked range held in ``pieces`` whose bytes have another
    CRC than recorded, or None (ranges not held are not looked at: deferred
    ones are checked when delivered)."""
    for check in checks:
        offset, length, crc = check
        for at, view in pieces:
            if at <= offset and offset + length <= at + len(view):
                if zlib.crc32(view[offset - at : offset - at + length]) != crc:
                    return check
                break
    return None


def stale(checks: Sequence[Check], pieces: Pieces) -> bool:
    """Whether any checked range held in ``pieces`` has another CRC than
    recorded (``mismatch``)."""
    return mismatch(checks, pieces) is not None


def span_size(index: SeekIndex) -> int:
    """The ``span_size`` the build records for ``index``: seek-point
    intervals per span CRC (one, unless the points are denser than about
    one a second: ``--density``), for PCM bytes (``PCM_SPAN_SECONDS``); 0
    (no span CRCs) for "no index" and ``SELF_CHECKED`` containers."""
    if not index.ok or index.container in SELF_CHECKED or index.data_end <= index.data_start:
        return 0
    if index.block_align:
        wanted = index.block_align * index.sample_rate * PCM_SPAN_SECONDS
        low, high = PCM_SPAN_BYTES
        return min(max(1 << int(wanted).bit_length() - 1, low), high)
    points = len(index.byte_pos)
    if points < 2:
        return 1
    seconds = (int(index.sample_pos[-1]) - int(index.sample_pos[0])) / index.timescale
    return max(1, int(points // max(seconds, 1.0)))


def span_bounds(index: SeekIndex, size: int) -> np.ndarray:
    """Where the spans of ``size`` (``span_size``) start, in order, and
    ``data_end`` after the last: they tile the data from the first seek
    point (PCM: from ``data_start``) to ``data_end``. An array: a long PCM
    episode has millions."""
    if index.block_align:
        starts = np.arange(index.data_start, index.data_end, size, dtype=np.int64)
    else:
        starts = np.asarray(index.byte_pos, dtype=np.int64)[::size]
    return np.append(starts, np.int64(index.data_end))


def span_ranges(index: SeekIndex, size: int) -> list[tuple[int, int]]:
    """The ``(offset, length)`` of each span (``span_bounds``)."""
    bounds = span_bounds(index, size)
    return list(zip(bounds[:-1].tolist(), np.diff(bounds).tolist(), strict=True))


def expected_spans(index: SeekIndex) -> int:
    """How many span CRCs a row of ``index`` with its ``span_size`` records."""
    size = index.span_size
    if size <= 0:
        return 0
    if index.block_align:
        return -(-(index.data_end - index.data_start) // size)
    return -(-len(index.byte_pos) // size)


def span_crcs(
    index: SeekIndex, size: int, read: Callable[[Ranges], list[memoryview]]
) -> np.ndarray:
    """The CRC-32s of the spans of ``size`` (``span_bounds``), read with
    ``read`` in contiguous runs of spans of about ``_READ_CHUNK`` bytes (one
    read each: an episode of hours is never held whole)."""
    bounds = span_bounds(index, size)
    crcs = np.zeros(len(bounds) - 1, dtype=np.uint32)
    first = 0
    while first < len(crcs):
        start = int(bounds[first])
        last = int(np.searchsorted(bounds, start + _READ_CHUNK, side="right")) - 1
        last = max(last, first + 1)  # spans first..last-1, at least one
        (view,) = read([(start, int(bounds[last]) - start)])
        edges = (bounds[first : last + 1] - start).tolist()
        for i, (begin, end) in enumerate(itertools.pairwise(edges), start=first):
            crcs[i] = zlib.crc32(view[begin:end])
        first = last
    return crcs


class SpanChecks(NamedTuple):
    """What a crop reads of its data so that every span it touches is read
    whole (``read``: its data range, out to the spans' ends), and their checks."""

    read: tuple[int, int]
    checks: tuple[Check, ...]


def span_checks(index: SeekIndex, data: tuple[int, int]) -> SpanChecks:
    """The spans a crop whose data range is ``data`` touches: ``data`` and
    no checks when the row records no span CRCs, or no content CRCs (then
    a span that differs could as well be a stale index as damaged data)."""
    crcs, size = index.span_crc, index.span_size
    if not len(crcs) or size <= 0 or not len(index.content_crc):
        return SpanChecks(data, ())
    start, end = data[0], data[0] + data[1]
    if index.block_align:
        first = max(start - index.data_start, 0) // size
        last = -(-(end - index.data_start) // size)
        bounds = [index.data_start + g * size for g in range(first, last)]
        bounds.append(min(index.data_start + last * size, index.data_end))
    else:
        points = index.byte_pos
        first = max(int(np.searchsorted(points, start, side="right")) - 1, 0) // size
        last = -(-int(np.searchsorted(points, end, side="left")) // size)
        bounds = [int(points[g * size]) for g in range(first, last)]
        bounds.append(int(points[last * size]) if last * size < len(points) else index.data_end)
    checks = tuple(
        (bounds[j], bounds[j + 1] - bounds[j], int(crcs[first + j]))
        for j in range(min(last, len(crcs)) - first)
    )
    return SpanChecks((bounds[0], bounds[-1] - bounds[0]), checks)


def damaged_spans(
    index: SeekIndex, read: Callable[[Ranges], list[memoryview]]
) -> list[tuple[int, int]]:
    """The spans whose bytes, read with ``read``, have another CRC than the
    row records (``[(offset, length)]``; none when it records none)."""
    if not len(index.span_crc):
        return []
    bounds = span_bounds(index, index.span_size)
    found = span_crcs(index, index.span_size, read)
    return [
        (int(bounds[i]), int(bounds[i + 1] - bounds[i]))
        for i in np.flatnonzero(found != index.span_crc)
    ]


def sampled_spans(index: SeekIndex, read: Callable[[Ranges], list[memoryview]]) -> bool:
    """Whether the first, middle and last spans (``span_ranges``) of the
    row, read with ``read``, have the CRCs it records (True when it records
    none): a cheap look that finds the span CRCs of another blob (a PCM
    episode of other samples behind the same header), not damage, which
    only whole reads find (``damaged_spans``). A mismatch says "stale or
    damaged"; only the blob's ``sha256`` tells which."""
    crcs = index.span_crc
    if not len(crcs) or index.span_size <= 0:
        return True
    bounds = span_bounds(index, index.span_size)
    if len(bounds) - 1 != len(crcs):
        return False
    chosen = sorted({0, len(crcs) // 2, len(crcs) - 1})
    views = read([(int(bounds[i]), int(bounds[i + 1] - bounds[i])) for i in chosen])
    return all(zlib.crc32(view) == int(crcs[i]) for i, view in zip(chosen, views, strict=True))


def matches(index: SeekIndex, read: Callable[[Ranges], list[memoryview]], *, sample: bool) -> bool:
    """Whether the bytes ``read`` gives have the CRCs the row records (True
    when it records none). ``sample``: the header ranges of at most
    ``SMALL_HEADER`` bytes and the first seek point only (a cheap look at
    every row of a shard: one small read each, mostly; MP4's ``moov`` is
    left to the crops); otherwise every range."""
    crcs = index.content_crc
    if not len(crcs):
        return True
    ranges = checked_ranges(index)
    if len(ranges) != len(crcs):
        return False
    chosen = range(len(ranges))
    if sample:
        head = len(index.header)
        chosen = [i for i in range(head) if ranges[i][1] <= SMALL_HEADER]
        chosen += [head] if len(ranges) > head else []
    views = read([ranges[i] for i in chosen])
    return all(zlib.crc32(view) == int(crcs[i]) for i, view in zip(chosen, views, strict=True))
