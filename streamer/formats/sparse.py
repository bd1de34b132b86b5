"""A file object that holds only the planned ranges of a blob.

The MP4 demuxer wants a whole file to seek in. This one reports the blob's
full length but serves bytes only from the ranges the plan fetched; a read
anywhere else is a real read of the blob (``DecodeContext.read_unplanned``),
counted, because it means the plan missed something the demuxer needed.
"""

from __future__ import annotations

from ..storage.files import RangeFile
from .job import DecodeContext, Pieces

__all__ = ["UNPLANNED_READ", "SparseFile"]

#: Most bytes one read outside the plan fetches (reads stay short, as above).
UNPLANNED_READ = 4096


class SparseFile(RangeFile):
    """Read-only view of ``length`` bytes of which only ``pieces`` are held."""

    def __init__(self, length: int, pieces: Pieces, context: DecodeContext) -> None:
        super().__init__(length)
        self.refill(pieces, context)

    def refill(self, pieces: Pieces, context: DecodeContext) -> None:
        """Hold a crop's planned ranges (again, when the demuxer stays open)."""
        self._pieces = sorted(pieces, key=lambda piece: piece[0])
        self._context = context

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
        return self._context.read_unplanned(position, size)
