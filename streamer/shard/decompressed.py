"""The values of an IPC-compressed binary column, read as what they decompress to.

An IPC-compressed shard (wsds writes zstd by default) stores a record batch's
audio cells as one compressed buffer, so a cell has no byte range in the file
and a crop cannot read just its bytes: the buffer is decompressed whole and
the cells are served from memory. ``DecompressedValues`` is that buffer
behind the ``RangeReader`` interface, so blob handles, plans and decoders
treat it like any other reader.

A decode job carries its blob handle, and so its reader, to a worker
process. This reader travels as its address (the shard's own reader, which
pickles small, and the compressed range), not as its bytes, and decompresses
only when read: a worker sent the planned bytes never does, and one that
reads the blob itself (the path without an index) decompresses the batch
once per process (``decompressed_values`` keeps the last few).
"""

from __future__ import annotations

import collections
import pickle
import threading

from ..storage.base import RangeReader
from ..storage.local import MemoryReader
from .columns import decode_shard_buffer

__all__ = ["DecompressedValues", "decompressed_values"]

#: Decompressed buffers a process keeps (each is a record batch's audio).
KEPT = 2


class DecompressedValues(RangeReader):
    """Bytes ``[offset, offset + length)`` of ``source``, an IPC body buffer
    compressed with ``compression``, decompressed on first use. ``shard``
    names the shard in errors; ``url`` is what logs call the buffer."""

    def __init__(
        self,
        source: RangeReader,
        offset: int,
        length: int,
        compression: str,
        *,
        shard: str,
        url: str,
    ) -> None:
        self.source, self.offset, self.length = source, offset, length
        self.compression, self.shard, self.url = compression, shard, url
        self._values: MemoryReader | None = None
        self._lock = threading.Lock()

    def __reduce__(self) -> tuple[object, ...]:
        address = (self.source, self.offset, self.length, self.compression, self.shard, self.url)
        return decompressed_values, address

    @property
    def values(self) -> MemoryReader:
        """The decompressed buffer (decompressed the first time)."""
        with self._lock:  # decoder threads of one process share a reader
            if self._values is None:
                (raw,) = self.source.fetch_many_sync([(self.offset, self.length)])
                buffer = decode_shard_buffer(
                    raw, self.compression, shard=self.shard, offset=self.offset
                )
                self._values = MemoryReader(buffer, url=self.url)
            return self._values

    async def size(self) -> int:
        return self.size_sync()

    async def read(self, offset: int, length: int) -> memoryview:
        return self.read_sync(offset, length)

    def size_sync(self) -> int:
        return self.values.size_sync()

    def read_sync(self, offset: int, length: int) -> memoryview:
        return self.values.read_sync(offset, length)


_kept: collections.OrderedDict[tuple[bytes, int, int], DecompressedValues] = (
    collections.OrderedDict()
)
_kept_lock = threading.Lock()


def decompressed_values(
    source: RangeReader, offset: int, length: int, compression: str, shard: str, url: str
) -> DecompressedValues:
    """This process's reader of one compressed buffer: the same one for
    every job that names it, while it is among the last ``KEPT`` named.
    The source is known by its pickle (a path to map, or a store's options,
    the object's path and the versions seen), not by its URL, which two
    stores (two endpoints) may share."""
    address = (pickle.dumps(source), offset, length)
    with _kept_lock:
        reader = _kept.pop(address, None)
        if reader is None:
            reader = DecompressedValues(source, offset, length, compression, shard=shard, url=url)
        _kept[address] = reader
        while len(_kept) > KEPT:
            _kept.popitem(last=False)
        return reader
