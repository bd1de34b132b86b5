"""The byte plan of a crop: which bytes of the blob a decoder needs, from the index.

Timelines: a crop asks for *gapless* samples ``[first, last)`` at the native
rate, the indices of FFmpeg's full gapless decode. The seek index counts on
the codec's *native* timeline (``timescale`` units): gapless sample ``g`` is
native ``first_sample + g * timescale / sample_rate``.

The plan covers the header ranges plus the data from the last seek point at
or before ``first - preroll`` to the first seek point at or after ``last``
(or the end of the data): whole frames or pages, nothing else.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..index.table import SeekIndex

__all__ = ["CropPlan", "Episode", "Fetched", "plan_crop", "to_gapless", "to_native"]

#: What identifies an episode's bytes within a process: (shard, key, blob length).
Episode = tuple[object, ...]


@dataclass(frozen=True)
class CropPlan:
    """What to fetch and where decoding starts, for gapless samples ``[first, last)``."""

    first: int
    last: int
    #: Index of the seek point decoding starts from (-1 for PCM: arithmetic).
    point: int
    #: Native position of the first sample of the frame/page at ``data[0]``.
    start_native: int
    #: ``(offset, length)`` in the blob: the header ranges, then the data range.
    header: tuple[tuple[int, int], ...]
    data: tuple[int, int]

    def starting_at(self, index: SeekIndex, point: int) -> CropPlan:
        """The same plan, decoding from seek point ``point`` instead."""
        start, end = int(index.byte_pos[point]), sum(self.data)
        return dataclasses.replace(
            self, point=point, start_native=int(index.sample_pos[point]), data=(start, end - start)
        )

    def with_header(self, extra: tuple[tuple[int, int], ...]) -> CropPlan:
        """The same plan with more ranges read up front (a codec's own needs)."""
        return dataclasses.replace(self, header=(*self.header, *extra)) if extra else self

    def without_header(self) -> CropPlan:
        """The same plan without its header ranges (the decoder has them already)."""
        return dataclasses.replace(self, header=())

    @property
    def ranges(self) -> tuple[tuple[int, int], ...]:
        return (*self.header, self.data)

    @property
    def nbytes(self) -> int:
        return sum(length for _, length in self.ranges)


@dataclass(frozen=True)
class Fetched:
    """The planned bytes, in memory: what a codec module decodes from.

    ``pieces`` are the plan's ranges in order (header ranges first, the data
    range last) at their blob offsets; for local shards they are views of
    the memory map, so nothing is copied until a codec asks.
    """

    pieces: tuple[tuple[int, memoryview], ...]
    blob_length: int
    #: Reads bytes outside the plan (counted as a bug signal); None once the
    #: bytes have been shipped away from the blob (pickled to a worker).
    read_unplanned: Callable[[int, int], bytes] | None

    @property
    def header(self) -> bytes:
        """The header ranges, concatenated."""
        return b"".join(bytes(view) for _, view in self.pieces[:-1])

    @property
    def data(self) -> memoryview:
        """The data range."""
        return self.pieces[-1][1]

    def holding_back(
        self, ranges: tuple[tuple[int, int], ...]
    ) -> tuple[Fetched, tuple[tuple[int, memoryview], ...]]:
        """These bytes without the pieces at ``ranges``, and those pieces: what
        a sender ships now and what it keeps until asked."""
        held = set(ranges)
        keep = tuple(p for p in self.pieces if (p[0], len(p[1])) not in held)
        back = tuple(p for p in self.pieces if (p[0], len(p[1])) in held)
        return dataclasses.replace(self, pieces=keep), back

    def adding(self, pieces: tuple[tuple[int, memoryview], ...]) -> Fetched:
        """These bytes with ``pieces`` (held back, now sent) in front."""
        return dataclasses.replace(self, pieces=(*pieces, *self.pieces))

    def portable(self) -> Fetched:
        """A copy that owns its bytes (what a worker process receives)."""
        return _rebuild(
            tuple((offset, bytes(view)) for offset, view in self.pieces), self.blob_length
        )

    def __reduce__(self) -> tuple[object, ...]:
        pieces = tuple((offset, bytes(view)) for offset, view in self.pieces)
        return (_rebuild, (pieces, self.blob_length))


def _rebuild(pieces: tuple[tuple[int, bytes], ...], blob_length: int) -> Fetched:
    views = tuple((offset, memoryview(data)) for offset, data in pieces)
    return Fetched(views, blob_length, None)


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


def plan_crop(index: SeekIndex, first: int, last: int, preroll: int) -> CropPlan:
    """The plan for gapless samples ``[first, last)`` (``last`` already clipped),
    decoding from at least ``preroll`` native units before ``first``."""
    if index.block_align:
        start = index.data_start + first * index.block_align
        end = min(index.data_start + last * index.block_align, index.data_end)
        return CropPlan(first, last, -1, to_native(index, first), (), (start, end - start))
    want_from = to_native(index, first) - preroll
    want_to = to_native(index, last)
    points = index.sample_pos
    point = max(int(np.searchsorted(points, want_from, side="right")) - 1, 0)
    after = int(np.searchsorted(points, want_to, side="left"))
    start = int(index.byte_pos[point])
    end = int(index.byte_pos[after]) if after < len(points) else index.data_end
    return CropPlan(
        first=first,
        last=last,
        point=point,
        start_native=int(points[point]),
        header=tuple(index.header),
        data=(start, end - start),
    )
