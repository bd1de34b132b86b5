"""WAV (RIFF, RF64) and Sony Wave64 with PCM samples: ``parse`` finds the
``fmt `` and ``data`` chunks, ``decode`` turns planned sample frames into
floats with numpy (the one PCM decode, AIFF's too)."""

from __future__ import annotations

from ...index.table import SeekIndex
from ..base import PackagedFormat
from ..reader import Reader
from . import decode, parse

__all__ = ["FORMAT", "W64", "W64_FORMAT", "Wav"]


class Wav(PackagedFormat):
    container = "wav"
    codecs = frozenset(decode.CODECS)
    parse = parse
    decoding = decode


class W64(Wav):
    """Wave64: WAV's ``fmt `` and decode, its own chunk headers."""

    container = "w64"

    def matches(self, head: bytes) -> bool:
        return parse.matches_w64(head)

    def build_index(self, reader: Reader, *, density: float) -> SeekIndex:
        return parse.parse_w64(reader, density=density)


FORMAT = Wav()
W64_FORMAT = W64()
