"""The byte plan of a crop from its seek index: which bytes a decoder needs.

The plan covers the header ranges plus the data from the last seek point at
or before ``first - preroll`` to the first seek point at or after ``last``
(or the end of the data): whole frames or pages, nothing else. A format may
add to it (``Format.refine_plan``).
"""

from __future__ import annotations

import numpy as np

from ..formats.job import CropPlan, ending_at, to_native
from ..index.table import SeekIndex

__all__ = ["plan_crop"]


def plan_crop(index: SeekIndex, first: int, last: int, preroll: int) -> CropPlan:
    """The plan for gapless samples ``[first, last)`` (``last`` already clipped),
    decoding from at least ``preroll`` native units before ``first``."""
    if index.block_align:
        start = index.data_start + first * index.block_align
        end = min(index.data_start + last * index.block_align, index.data_end)
        native = to_native(index, first)
        return CropPlan(first, last, -1, native, native, (), (start, end - start))
    want_from = to_native(index, first) - preroll
    want_to = to_native(index, last)
    points = index.sample_pos
    point = max(int(np.searchsorted(points, want_from, side="right")) - 1, 0)
    after = int(np.searchsorted(points, want_to, side="left"))
    start = int(index.byte_pos[point])
    end, end_native = ending_at(index, after)
    return CropPlan(
        first=first,
        last=last,
        point=point,
        start_native=int(points[point]),
        decode_from=max(want_from, int(points[point])),
        header=tuple(index.header),
        data=(start, end - start),
        end_native=end_native,
    )
