"""The values of an IPC-compressed binary column, read as what they decompress to.

An IPC-compressed shard (wsds writes zstd by default) stores a record batch's
audio cells as one compressed buffer, so a cell has no byte range in the file
and a crop cannot read just its bytes: the buffer is decompressed whole and
the cells are served from memory. ``DecompressedValues`` is that buffer
behind the ``RangeReader`` interface, so blob handles, plans and decoders
treat it like any other reader.

What a process keeps decompressed is bounded (``KEPT_BYTES``, the most
recently read buffers): a reader holds the buffer's address, not its bytes,
and decompresses it again once it has been dropped. (The readers of every
batch a pass touched held their bytes for good: the planning process of a
zstd dataset grew to the dataset's decompressed size.)

A decode job carries its blob handle, and so its reader, to a worker
process. The reader travels as its address too (the shard's own reader,
which pickles small, and the compressed range) and decompresses only when
read: a worker sent the planned bytes never does.

The compressed bytes are read through the store's block cache, by a
blocking read or an awaited one alike, so a disk tier keeps them as the
blocks a warmup counts and checks (``pipeline.warmup``).
"""

from __future__ import annotations

import collections
import pickle
import threading

from ..storage.base import RangeReader
from ..storage.local import MemoryReader
from .columns import decode_shard_buffer

__all__ = ["KEPT_BYTES", "DecompressedValues", "kept_bytes"]

#: Decompressed bytes a process keeps (at least the buffer being read).
KEPT_BYTES = 256 << 20


class DecompressedValues(RangeReader):
    """Bytes ``[offset, offset + length)`` of ``source``, an IPC body buffer
    compressed with ``compression``, decompressed when read. ``shard``
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
        self._address = (_identity(source), offset, length)

    def __reduce__(self) -> tuple[object, ...]:
        address = (self.source, self.offset, self.length, self.compression)
        return _unpickled, (*address, self.shard, self.url)

    @property
    def values(self) -> MemoryReader:
        """The decompressed buffer: kept from an earlier read, or decompressed now."""
        values = self._kept()
        if values is None:
            (raw,) = self.source.read_many_sync([(self.offset, self.length)])
            values = self._keep(raw)
        return values

    async def _avalues(self) -> MemoryReader:
        """``values`` for a caller on an event loop (the store's own, a
        prefetch): the compressed bytes are awaited, never waited for by
        a blocking call, which on the store's loop would wait on itself."""
        values = self._kept()
        if values is None:
            (raw,) = await self.source.read_many([(self.offset, self.length)])
            values = self._keep(raw)
        return values

    def _kept(self) -> MemoryReader | None:
        with _lock:  # held for the lookup only: never across a read or a decompression
            entry = _kept.pop(self._address, None)
            if entry is not None:
                _kept[self._address] = entry
            _drop_beyond(KEPT_BYTES)
            return None if entry is None else entry[1]

    def _keep(self, raw: memoryview) -> MemoryReader:
        buffer = decode_shard_buffer(raw, self.compression, shard=self.shard, offset=self.offset)
        values = MemoryReader(buffer, url=self.url)
        with _lock:
            _put(self._address, (self.source, values))  # the source alive: its id stays its
            _drop_beyond(KEPT_BYTES)
        return values

    async def size(self) -> int:
        return (await self._avalues()).size_sync()

    async def read(self, offset: int, length: int) -> memoryview:
        return (await self._avalues()).read_sync(offset, length)

    def size_sync(self) -> int:
        return self.values.size_sync()

    def read_sync(self, offset: int, length: int) -> memoryview:
        return self.values.read_sync(offset, length)


_kept: collections.OrderedDict[tuple[object, int, int], tuple[RangeReader, MemoryReader]] = (
    collections.OrderedDict()
)
_lock = threading.Lock()
_total = 0  # the bytes of ``_kept``'s buffers, kept as they come and go (a read looks at it)


def _identity(source: RangeReader) -> object:
    """What tells ``source`` from other readers in this process: its pickle
    (a path to map, or a store's options, the object's path and the
    versions seen; not its URL, which two stores, two endpoints, may share),
    or, for a reader that does not pickle (bytes in memory), the object."""
    try:
        return pickle.dumps(source)
    except (TypeError, pickle.PicklingError):
        return id(source)


def _drop_beyond(budget: int) -> None:
    """Drop the least recently read buffers past ``budget`` bytes, keeping
    the newest whatever its size (a view handed out keeps its bytes alive
    until its reader lets go of it)."""
    global _total
    while len(_kept) > 1 and _total > budget:
        _, (_, values) = _kept.popitem(last=False)
        _total -= values.size_sync()


def _put(address: tuple[object, int, int], entry: tuple[RangeReader, MemoryReader]) -> None:
    """Keep ``entry`` as the newest (replacing what two threads that
    decompressed the same buffer at once may both keep)."""
    global _total
    old = _kept.pop(address, None)
    if old is not None:
        _total -= old[1].size_sync()
    _kept[address] = entry
    _total += entry[1].size_sync()


def kept_bytes() -> int:
    """Decompressed bytes this process keeps now."""
    return _total


def _unpickled(
    source: RangeReader, offset: int, length: int, compression: str, shard: str, url: str
) -> DecompressedValues:
    return DecompressedValues(source, offset, length, compression, shard=shard, url=url)
