"""Ogg Vorbis and Opus: ``pages`` parses pages for both sides, ``parse``
indexes pages and granules, ``decode`` decodes the packets of planned pages."""

from __future__ import annotations

from ...index.table import SeekIndex
from ..base import PackagedFormat
from ..job import CropPlan
from . import decode, parse

__all__ = ["FORMAT", "Ogg"]


class Ogg(PackagedFormat):
    container = "ogg"
    codecs = frozenset(decode.PREROLL_SECONDS)
    parse = parse
    decoding = decode

    def refine_plan(self, index: SeekIndex, plan: CropPlan) -> CropPlan:
        """Never start on the last seek point: output is placed by the granule of
        a page other than the last (whose granule may trim the stream), so an
        earlier page must be decoded too."""
        if 0 < plan.point == len(index.sample_pos) - 1:
            return plan.starting_at(index, plan.point - 1)
        return plan


FORMAT = Ogg()
