"""MPEG audio (mp1, mp2, mp3) in its own elementary stream: ``parse`` indexes
the frames (Xing/Info/VBRI and LAME tags), ``decode`` decodes planned frames."""

from __future__ import annotations

from typing import BinaryIO

from ...index.table import SeekIndex
from ..base import PackagedFormat, TailSplice
from . import decode, parse

__all__ = ["FORMAT", "MpegAudio"]


class MpegAudio(PackagedFormat):
    container = "mp3"
    codecs = frozenset(decode.DECODERS)
    parse = parse
    decoding = decode

    def preroll(self, index: SeekIndex) -> int:
        """``decode.preroll_frames`` frames, in native units."""
        return decode.preroll_frames(index) * decode.frame_samples(index)

    def tail_splice(self, stream: BinaryIO, index: SeekIndex, before: int) -> TailSplice | None:
        """The tag frame and the frames from a point near the end
        (``parse.tail_splice``): FFmpeg's seek in an mp3 without a usable
        table of contents reads every frame from the start."""
        return parse.tail_splice(stream, index, before)


FORMAT = MpegAudio()
