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
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence

import numpy as np

from .table import SeekIndex

__all__ = [
    "POINT_BYTES",
    "SMALL_HEADER",
    "STALE",
    "Check",
    "checked_ranges",
    "content_crcs",
    "crop_checks",
    "expected_count",
    "matches",
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


def stale(checks: Sequence[Check], pieces: Pieces) -> bool:
    """Whether any checked range held in ``pieces`` has another CRC than
    recorded (ranges not held are not looked at: deferred ones are checked
    when delivered)."""
    for offset, length, crc in checks:
        for at, view in pieces:
            if at <= offset and offset + length <= at + len(view):
                if zlib.crc32(view[offset - at : offset - at + length]) != crc:
                    return True
                break
    return False


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
