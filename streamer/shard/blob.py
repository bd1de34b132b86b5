"""Blob handles: one binary cell of a shard, addressed but not loaded.

A handle is (reader, absolute offset, length). Reading a sub-range asks the
reader for just those bytes, so a crop out of a 2 GB episode touches only the
crop's bytes. For local shards the reader is the shard's memory map and reads
are zero-copy views; remote shards give the same handle over a remote reader.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import DataError
from ..storage.base import RangeReader
from ..storage.files import RangeFile

__all__ = ["BlobHandle"]


class BlobHandle(RangeFile):
    """A read-only, seekable window onto one blob inside a shard file.

    Sub-range reads (``read_range`` / ``aread_range``) return buffers and do
    not move the file position. The file-like methods (``read``, ``seek``,
    ``tell``) return ``bytes``, which is what FFmpeg (PyAV) and ``wave``
    expect. ``bytes_read`` counts what was actually asked of the reader.
    """

    def __init__(
        self,
        reader: RangeReader,
        offset: int,
        length: int,
        *,
        shard: str | None = None,
        key: str | None = None,
    ) -> None:
        super().__init__(length)
        self.reader = reader
        self.offset = offset
        self.shard = shard
        self.key = key
        self.bytes_read = 0

    def __len__(self) -> int:
        return self.length

    def __reduce__(self) -> tuple[object, ...]:
        # Travels to worker processes as its address: the reader pickles small
        # (a path to map, or a remote store's options); the position does not.
        return _handle, (self.reader, self.offset, self.length, self.shard, self.key)

    def __repr__(self) -> str:
        return (
            f"BlobHandle(shard={self.shard!r}, key={self.key!r}, "
            f"offset={self.offset}, length={self.length})"
        )

    # -- sub-range access -------------------------------------------------

    def _check(self, start: int, length: int) -> None:
        if start < 0 or length < 0 or start + length > self.length:
            raise DataError(
                f"range [{start}, {start + length}) is outside the blob of {self.length} bytes",
                shard=self.shard,
                key=self.key,
                offset=start,
            )

    def read_range(self, start: int, length: int) -> memoryview:
        """Exactly ``length`` bytes from ``start`` (relative to the blob)."""
        self._check(start, length)
        self.bytes_read += length
        return self.reader.read_sync(self.offset + start, length)

    async def aread_range(self, start: int, length: int) -> memoryview:
        """Async form of ``read_range``."""
        self._check(start, length)
        self.bytes_read += length
        return await self.reader.read(self.offset + start, length)

    def read_ranges(self, ranges: Sequence[tuple[int, int]]) -> list[memoryview]:
        """Several sub-ranges in one batch (remote stores share requests)."""
        for start, length in ranges:
            self._check(start, length)
        self.bytes_read += sum(length for _, length in ranges)
        return self.reader.read_many_sync([(self.offset + s, n) for s, n in ranges])

    async def aread_ranges(self, ranges: Sequence[tuple[int, int]]) -> list[memoryview]:
        """Async form of ``read_ranges``."""
        for start, length in ranges:
            self._check(start, length)
        self.bytes_read += sum(length for _, length in ranges)
        return await self.reader.read_many([(self.offset + s, n) for s, n in ranges])

    def view(self) -> memoryview:
        """The whole blob (zero-copy for local shards: it reads every byte you touch)."""
        return self.read_range(0, self.length)

    def _read_at(self, position: int, size: int) -> memoryview:
        return self.read_range(position, size)


def _handle(
    reader: RangeReader, offset: int, length: int, shard: str | None, key: str | None
) -> BlobHandle:
    return BlobHandle(reader, offset, length, shard=shard, key=key)
