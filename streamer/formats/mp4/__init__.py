"""MP4/M4A/MOV (AAC, AC-3, ALAC, AMR, E-AC-3, FLAC, mp3, Opus, Vorbis, PCM): ``parse``
builds the index and holds its checks, over ``boxes`` (the box walk and the
header ranges), ``entry`` (the sample entry's codec and configuration;
``description``: its fields and child boxes by its version), ``tables``
(the sample tables; ``fragments``: a fragmented file's), ``gapless`` (edit
list, ``iTunSMPB``, what the first and last packets decode to) and ``pcm``
(PCM's sample entries and chunks); ``decode`` runs FFmpeg's demuxer over
the planned ranges, keeping demuxers open across crops of an episode."""

from __future__ import annotations

from ...index.table import SeekIndex
from ..base import PackagedFormat
from ..job import CropPlan, Ranges
from . import decode, parse

__all__ = ["FORMAT", "Mp4"]


class Mp4(PackagedFormat):
    container = "mp4"
    codecs = frozenset(decode.PREROLL_SECONDS)
    #: FFmpeg's mov demuxer cannot seek by byte ("mov cannot seek by byte").
    generic_second = False
    parse = parse
    decoding = decode

    def preroll(self, index: SeekIndex) -> int:
        """The codec's seconds, and for AAC at least one packet (``decode.MIN_PREROLL_SAMPLES``)."""
        samples = decode.MIN_PREROLL_SAMPLES.get(index.codec, 0)
        least = -(-samples * index.timescale // index.sample_rate)
        return max(super().preroll(index), least)

    def refine_plan(self, index: SeekIndex, plan: CropPlan) -> CropPlan:
        return decode.refine_plan(index, plan)

    def deferrable(self, index: SeekIndex, plan: CropPlan) -> Ranges:
        """``moov`` (and the top-level box headers): an open demuxer parsed them."""
        header = tuple(index.header)
        return header if header and plan.header[: len(header)] == header else ()


FORMAT = Mp4()
