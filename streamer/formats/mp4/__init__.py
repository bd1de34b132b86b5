"""MP4/M4A (AAC, ALAC): ``parse`` reads the box tree and sample tables,
``decode`` runs FFmpeg's demuxer over the planned ranges, keeping demuxers
open across crops of an episode."""

from __future__ import annotations

import numpy as np

from ...index.table import SeekIndex
from ..base import Format
from ..job import CropPlan, DecodeContext, Fetched, Ranges
from ..reader import Reader
from . import decode, parse

__all__ = ["FORMAT", "Mp4"]


class Mp4(Format):
    container = "mp4"
    codecs = frozenset(decode.PREROLL_SECONDS)

    def matches(self, head: bytes) -> bool:
        return parse.matches(head)

    def build_index(self, reader: Reader, *, density: float) -> SeekIndex:
        return parse.parse(reader, density=density)

    def preroll(self, index: SeekIndex) -> int:
        return round(decode.PREROLL_SECONDS[index.codec] * index.timescale)

    def refine_plan(self, index: SeekIndex, plan: CropPlan) -> CropPlan:
        return decode.refine_plan(index, plan)

    def deferrable(self, index: SeekIndex, plan: CropPlan) -> Ranges:
        """``moov`` (and the top-level box headers): an open demuxer parsed them."""
        header = tuple(index.header)
        return header if header and plan.header[: len(header)] == header else ()

    def decode(
        self, index: SeekIndex, plan: CropPlan, fetched: Fetched, context: DecodeContext
    ) -> tuple[np.ndarray, int]:
        return decode.decode(index, plan, fetched, context)


FORMAT = Mp4()
