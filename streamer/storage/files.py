"""File objects over random-access bytes: what FFmpeg (PyAV), ``wave`` and the
index parsers read through when the bytes are not a real file."""

from __future__ import annotations

import abc
import io

__all__ = ["RangeFile"]


class RangeFile(io.RawIOBase):
    """A read-only, seekable file of ``length`` bytes over some random-access source.

    Subclasses say how to read at a position (``_read_at``, which may return
    fewer bytes than asked: a short read); this class keeps the position and
    gives the file object FFmpeg (PyAV) and ``wave`` expect: ``read`` returns
    ``bytes``, ``seek(0, 2)`` works.
    """

    def __init__(self, length: int) -> None:
        super().__init__()
        self.length = length
        self._pos = 0

    @abc.abstractmethod
    def _read_at(self, position: int, size: int) -> bytes | memoryview:
        """Up to ``size`` bytes (at least one) at ``position``, inside the file."""

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self.length}[whence]
        position = base + offset
        if position < 0:
            raise ValueError(f"negative seek position {position}")
        self._pos = position
        return position

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:
            size = self.length - self._pos
        size = max(0, min(size, self.length - self._pos))
        if size == 0:
            return b""
        data = bytes(self._read_at(self._pos, size))
        self._pos += len(data)
        return data

    def readinto(self, buffer) -> int:  # type: ignore[no-untyped-def]
        data = self.read(len(memoryview(buffer)))
        memoryview(buffer).cast("B")[: len(data)] = data
        return len(data)

    def readall(self) -> bytes:
        return self.read(-1)
