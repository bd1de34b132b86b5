"""A file object that holds only the planned ranges of a blob.

The MP4 demuxer wants a whole file to seek in. This one reports the blob's
full length but serves bytes only from the ranges the plan fetched; a read
anywhere else is served by ``fallback`` (a real read of the blob) and counted,
because it means the plan missed something the demuxer needed; with no
``fallback`` (bytes shipped to a worker) it is a ``CropError``.
"""

from __future__ import annotations

from collections.abc import Callable

from ..errors import CropError
from ..storage.files import RangeFile
from .stats import DecodeStats

__all__ = ["UNPLANNED_READ", "SparseFile"]

#: Most bytes one read outside the plan fetches (reads stay short, as above).
UNPLANNED_READ = 4096


class SparseFile(RangeFile):
    """Read-only view of ``length`` bytes of which only ``pieces`` are held."""

    def __init__(
        self,
        length: int,
        pieces: list[tuple[int, memoryview]],
        fallback: Callable[[int, int], bytes] | None,
        stats: DecodeStats,
        where: dict[str, object],
    ) -> None:
        super().__init__(length)
        self._pieces = sorted(pieces, key=lambda piece: piece[0])
        self._fallback = fallback
        self._stats = stats
        self._where = where

    def refill(
        self,
        pieces: list[tuple[int, memoryview]],
        fallback: Callable[[int, int], bytes] | None,
        stats: DecodeStats,
        where: dict[str, object],
    ) -> None:
        """Hold another crop's planned ranges (the demuxer stays open)."""
        self._pieces = sorted(pieces, key=lambda piece: piece[0])
        self._fallback, self._stats, self._where = fallback, stats, where

    def _read_at(self, position: int, size: int) -> memoryview | bytes:
        """Up to ``size`` bytes, stopping at the end of a held piece: a short
        read, so a reader that only wanted part of a buffer's worth (FFmpeg
        reads 32 KiB at a time) never pulls in bytes beyond the plan."""
        chunk = self._from_pieces(position, size)
        if chunk is None:
            chunk = self._unplanned(position, min(size, UNPLANNED_READ))
        return chunk

    def _from_pieces(self, position: int, size: int) -> memoryview | None:
        for start, view in self._pieces:
            if start <= position < start + len(view):
                return view[position - start : position - start + size]
        return None

    def _unplanned(self, position: int, size: int) -> bytes:
        """Bytes outside the plan, up to the next held piece."""
        following = [start for start, _ in self._pieces if start > position]
        if following:
            size = min(size, following[0] - position)
        self._stats.unplanned_reads += 1
        self._stats.unplanned_bytes += size
        if self._fallback is None:
            raise CropError(
                f"the decoder needs bytes [{position}, {position + size}) outside its plan",
                **self._where,
            )
        return self._fallback(position, size)
