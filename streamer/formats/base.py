"""The format plug-in interface: what every (container, codec) family implements.

A format is used twice, by the same object: when indexing (``matches``,
``build_index``; ``tail_splice`` and ``first_damage`` for the index check)
and when decoding (``preroll``, ``refine_plan``, ``deferrable``,
``decode``). The registry (``registry.py``) keys formats by
``(container, codec)``, so an index is only ever built for a pair that a
format can also decode; anything else becomes a "no index" row and is
served by the fallback.
"""

from __future__ import annotations

import abc
import math
from types import ModuleType
from typing import BinaryIO, ClassVar, NamedTuple

import numpy as np

from ..index.table import SeekIndex
from .job import CropPlan, DecodeContext, Fetched, Ranges
from .reader import NoIndex, Reader

__all__ = ["Format", "NoIndex", "PackagedFormat", "TailSplice", "preroll_units"]


class TailSplice(NamedTuple):
    """Bytes FFmpeg decodes, as a file, to the full decode's last samples
    (``Format.tail_splice``), and the audio packets its demuxer must hand
    over from them for that to hold."""

    data: bytes
    packets: int


class Format(abc.ABC):
    """One container family and the codecs it carries that streamer decodes.

    ``container`` is the name ``SeekIndex.container`` carries; ``codecs``
    are the ``SeekIndex.codec`` values this format decodes in it.
    """

    container: ClassVar[str]
    codecs: ClassVar[frozenset[str]]
    #: Whether FFmpeg's packet index (``registry.GENERIC``) may serve a file
    #: this format's parser refuses: not when FFmpeg's demuxer for the
    #: container cannot seek by byte, where trying it only adds its
    #: refusal to every reason.
    generic_second: ClassVar[bool] = True

    @abc.abstractmethod
    def matches(self, head: bytes) -> bool:
        """Whether the first bytes of a file announce this container."""

    @abc.abstractmethod
    def build_index(self, reader: Reader, *, density: float) -> SeekIndex:
        """Index an episode read front to back; raises ``NoIndex`` with the reason."""

    @abc.abstractmethod
    def preroll(self, index: SeekIndex) -> int:
        """Native units to decode before a crop for the output to be exact."""

    def refine_plan(self, index: SeekIndex, plan: CropPlan) -> CropPlan:
        """The plan with whatever more this format's decoder reads (default: none)."""
        return plan

    def deferrable(self, index: SeekIndex, plan: CropPlan) -> Ranges:
        """Planned ranges a decoder that stays open across crops may not need
        again (default: none); callers deliver them only when asked
        (``DecodeContext.held_back``)."""
        return ()

    @abc.abstractmethod
    def decode(
        self, index: SeekIndex, plan: CropPlan, fetched: Fetched, context: DecodeContext
    ) -> tuple[np.ndarray, int]:
        """Decode the fetched bytes: float32 ``(channels, n)`` samples and the
        gapless index of the first. CPU only; bytes outside ``fetched`` come
        through ``context``."""

    def tail_splice(self, stream: BinaryIO, index: SeekIndex, before: int) -> TailSplice | None:
        """For the index check's tail reference: bytes that FFmpeg decodes to
        exactly its full decode's last samples, starting at least ``before``
        native units before the end, where seeking in the whole file would
        read all of it (default: None, the check seeks in the file)."""
        return None

    def first_damage(self, stream: BinaryIO) -> tuple[int, int] | None:
        """For the index check, when it fails: the first bytes of the episode
        (``stream``, read from its first byte) that fail a checksum of the
        container's own, as ``(offset, length)``; None when every one holds,
        or the format has none (the default). Such bytes explain a failed
        check without the index being wrong: FFmpeg's reference decodes
        them otherwise than a crop, whose decoder checks the same checksums
        and counts what fails them (``decode.verify.check``)."""
        return None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.container}: {', '.join(sorted(self.codecs))})"


class PackagedFormat(Format):
    """A format whose subpackage holds a ``parse`` module (``matches(head)``,
    ``parse(reader, density=...)``) and a ``decode`` module
    (``decode(index, plan, fetched, context)``, and ``PREROLL_SECONDS`` per
    codec where its decoders need pre-roll); the subclass names them and adds
    what is its own (the optional hooks, a ``preroll`` counted otherwise)."""

    parse: ClassVar[ModuleType]
    decoding: ClassVar[ModuleType]

    def matches(self, head: bytes) -> bool:
        return bool(self.parse.matches(head))

    def build_index(self, reader: Reader, *, density: float) -> SeekIndex:
        index: SeekIndex = self.parse.parse(reader, density=density)
        return index

    def preroll(self, index: SeekIndex) -> int:
        """The decode module's ``PREROLL_SECONDS`` for the codec (none: 0), in native units."""
        return preroll_units(
            index, getattr(self.decoding, "PREROLL_SECONDS", {}).get(index.codec, 0.0)
        )

    def decode(
        self, index: SeekIndex, plan: CropPlan, fetched: Fetched, context: DecodeContext
    ) -> tuple[np.ndarray, int]:
        result: tuple[np.ndarray, int] = self.decoding.decode(index, plan, fetched, context)
        return result


def preroll_units(index: SeekIndex, seconds: float) -> int:
    """A pre-roll of ``seconds`` in ``index``'s native units; infinite (a
    codec no decoder started after the first packet converges for: AC-3's
    dither, AMR's predictors) reaches before the episode's first sample, so
    every crop decodes from the first packet."""
    if math.isinf(seconds):
        return max(index.first_sample, 0) + max(index.num_samples, 0) + 1
    return round(seconds * index.timescale)
