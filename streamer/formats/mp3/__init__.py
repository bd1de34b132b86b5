"""MPEG audio (mp1, mp2, mp3) in its own elementary stream: ``parse`` indexes
the frames (Xing/Info/VBRI and LAME tags), ``decode`` decodes planned frames."""

from __future__ import annotations

import numpy as np

from ...index.table import SeekIndex
from ..base import Format
from ..job import CropPlan, DecodeContext, Fetched
from ..reader import Reader
from . import decode, parse

__all__ = ["FORMAT", "MpegAudio"]


class MpegAudio(Format):
    container = "mp3"
    codecs = frozenset(decode.DECODERS)

    def matches(self, head: bytes) -> bool:
        return parse.matches(head)

    def build_index(self, reader: Reader, *, density: float) -> SeekIndex:
        return parse.parse(reader, density=density)

    def preroll(self, index: SeekIndex) -> int:
        """``PREROLL_FRAMES`` frames, in native units."""
        return decode.PREROLL_FRAMES * decode.frame_samples(index)

    def decode(
        self, index: SeekIndex, plan: CropPlan, fetched: Fetched, context: DecodeContext
    ) -> tuple[np.ndarray, int]:
        return decode.decode(index, plan, fetched, context)


FORMAT = MpegAudio()
