"""Native FLAC: ``parse`` finds frames by sync and CRC-8, ``decode`` decodes
planned frames with STREAMINFO as extradata."""

from __future__ import annotations

import numpy as np

from ...index.table import SeekIndex
from ..base import Format
from ..job import CropPlan, DecodeContext, Fetched
from ..reader import Reader
from . import decode, parse

__all__ = ["FORMAT", "Flac"]


class Flac(Format):
    container = "flac"
    codecs = frozenset({"flac"})

    def matches(self, head: bytes) -> bool:
        return parse.matches(head)

    def build_index(self, reader: Reader, *, density: float) -> SeekIndex:
        return parse.parse(reader, density=density)

    def preroll(self, index: SeekIndex) -> int:
        """FLAC frames are independent: none."""
        return 0

    def decode(
        self, index: SeekIndex, plan: CropPlan, fetched: Fetched, context: DecodeContext
    ) -> tuple[np.ndarray, int]:
        return decode.decode(index, plan, fetched, context)


FORMAT = Flac()
