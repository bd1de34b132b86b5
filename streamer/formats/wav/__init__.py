"""WAV (RIFF, RF64) with PCM samples: ``parse`` finds the ``fmt `` and
``data`` chunks, ``decode`` turns planned sample frames into floats with numpy."""

from __future__ import annotations

import numpy as np

from ...index.table import SeekIndex
from ..base import Format
from ..job import CropPlan, DecodeContext, Fetched
from ..reader import Reader
from . import decode, parse

__all__ = ["FORMAT", "Wav"]


class Wav(Format):
    container = "wav"
    codecs = frozenset(decode.CODECS)

    def matches(self, head: bytes) -> bool:
        return parse.matches(head)

    def build_index(self, reader: Reader, *, density: float) -> SeekIndex:
        return parse.parse(reader, density=density)

    def preroll(self, index: SeekIndex) -> int:
        """Samples stand alone: none."""
        return 0

    def decode(
        self, index: SeekIndex, plan: CropPlan, fetched: Fetched, context: DecodeContext
    ) -> tuple[np.ndarray, int]:
        return decode.decode(index, plan, fetched)


FORMAT = Wav()
