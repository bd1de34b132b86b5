"""Any audio FFmpeg demuxes and decodes: the index every episode can fall back
to when no native format fits (or the native index fails its check).

``parse`` runs FFmpeg's demuxer and decoder over the episode once, noting
each packet's byte position and the samples decoded before it; ``decode``
repositions the demuxer by byte at a seek point (or splices the header and
the planned bytes, for Matroska and Ogg) and places the samples by the seek
point that ends the plan. ``SeekIndex.container`` is ``ffmpeg:`` plus
FFmpeg's demuxer name, ``codec`` FFmpeg's canonical codec name. It never
sniffs: the registry tries it after the native formats.
"""

from __future__ import annotations

import dataclasses
import math

from ...index.table import SeekIndex
from ..base import PackagedFormat, preroll_units
from ..job import CropPlan
from ..reader import Reader
from . import decode, parse

__all__ = ["FORMAT", "Generic"]


class Generic(PackagedFormat):
    container = parse.CONTAINER_PREFIX
    codecs = frozenset()
    parse = parse
    decoding = decode

    def handles(self, index: SeekIndex) -> bool:
        """Whether ``index`` is a generic one (any codec: FFmpeg decoded it to index it)."""
        return index.container.startswith(parse.CONTAINER_PREFIX)

    def build_index(self, reader: Reader, *, density: float) -> SeekIndex:
        """The parsed index, the samples a decoder started at a seek point
        loses (``SeekIndex.preroll``, measured) put on top of the codec's
        own pre-roll: the decoder converges only once it has output again."""
        index = super().build_index(reader, density=density)
        seconds = decode.preroll_seconds(index.codec)
        if index.preroll and math.isfinite(seconds):
            index = dataclasses.replace(
                index, preroll=index.preroll + round(seconds * index.timescale)
            )
        return index

    def refine_plan(self, index: SeekIndex, plan: CropPlan) -> CropPlan:
        """``decode.refine_plan``, from the last but one seek point when the
        plan would start at the last: ``padding`` is what a decode from there
        gives past the end (``parse``), and a decode from the last point may
        trim otherwise (FFmpeg's Ogg demuxer takes a splice of the last page
        for a one-page stream: PyAV's Vorbis at 8 kHz ended 512 samples later,
        and such crops came out shifted)."""
        last = len(index.byte_pos) - 1
        if 0 < plan.point == last:
            plan = plan.starting_at(index, last - 1)
        return decode.refine_plan(index, plan)

    def preroll(self, index: SeekIndex) -> int:
        """``decode.preroll_seconds`` in samples; the whole episode for a
        codec decoded from the start."""
        return preroll_units(index, decode.preroll_seconds(index.codec))


FORMAT = Generic()
