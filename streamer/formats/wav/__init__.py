"""WAV (RIFF, RF64) with PCM samples: ``parse`` finds the ``fmt `` and
``data`` chunks, ``decode`` turns planned sample frames into floats with numpy."""

from __future__ import annotations

from ..base import PackagedFormat
from . import decode, parse

__all__ = ["FORMAT", "Wav"]


class Wav(PackagedFormat):
    container = "wav"
    codecs = frozenset(decode.CODECS)
    parse = parse
    decoding = decode


FORMAT = Wav()
