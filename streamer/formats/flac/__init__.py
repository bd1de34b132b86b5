"""Native FLAC: ``parse`` finds frames by sync and CRC-8, ``decode`` decodes
planned frames with STREAMINFO as extradata."""

from __future__ import annotations

from typing import BinaryIO

from ..base import PackagedFormat
from . import decode, parse

__all__ = ["FORMAT", "Flac"]


class Flac(PackagedFormat):
    container = "flac"
    codecs = frozenset({"flac"})
    parse = parse
    decoding = decode

    def first_damage(self, stream: BinaryIO) -> tuple[int, int] | None:
        """The first frame failing its CRCs (``decode.first_damaged_frame``):
        a crop over it counts it, FFmpeg's decode differs there."""
        return decode.first_damaged_frame(stream)


FORMAT = Flac()
