"""Native FLAC: ``parse`` finds frames by sync and CRC-8, ``decode`` decodes
planned frames with STREAMINFO as extradata."""

from __future__ import annotations

from ..base import PackagedFormat
from . import decode, parse

__all__ = ["FORMAT", "Flac"]


class Flac(PackagedFormat):
    container = "flac"
    codecs = frozenset({"flac"})
    parse = parse
    decoding = decode


FORMAT = Flac()
