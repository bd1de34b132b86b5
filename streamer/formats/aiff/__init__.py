"""AIFF and AIFF-C with PCM samples (integer, float, either byte order,
A-law, µ-law): ``parse`` finds the ``COMM`` and ``SSND`` chunks; decoding is
the WAV format's, the one PCM decode."""

from __future__ import annotations

from ..wav import Wav
from . import parse

__all__ = ["FORMAT", "Aiff"]


class Aiff(Wav):
    container = "aiff"
    parse = parse


FORMAT = Aiff()
