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
blocks a warmup counts and checks (``pipeline.warmup``). A buffer several
readers want at once (planning threads, prefetches on the store's loop)
is fetched and decompressed by one of them; the others wait for it
(``_Flight``), threads on an event, tasks woken through their loop.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import pickle
import threading
from collections.abc import Callable, Iterator

import anyio
import anyio.lowlevel
import sniffio

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
        """The decompressed buffer: kept from an earlier read, or decompressed
        now (or by the reader of the same buffer already at it, waited for)."""
        while True:
            values, flight, leader = self._lookup()
            if values is not None:
                return values
            if leader:
                with flight.leading():
                    (raw,) = self.source.read_many_sync([(self.offset, self.length)])
                    return flight.done(self._keep(raw))
            if _on_a_loop():  # blocking it could block the leader, a task on it: no waiting
                (raw,) = self.source.read_many_sync([(self.offset, self.length)])
                return self._keep(raw)
            values = flight.wait()
            if values is not None:
                return values  # else the leader was interrupted: try again

    async def _avalues(self) -> MemoryReader:
        """``values`` for a caller on an event loop (the store's own, a
        prefetch): the compressed bytes are awaited, never waited for by
        a blocking call, which on the store's loop would wait on itself;
        so is another reader's decompression of the same buffer."""
        while True:
            values, flight, leader = self._lookup()
            if values is not None:
                return values
            if leader:
                with flight.leading():
                    (raw,) = await self.source.read_many([(self.offset, self.length)])
                    return flight.done(self._keep(raw))
            values = await flight.await_()
            if values is not None:
                return values

    def _lookup(self) -> tuple[MemoryReader | None, _Flight, bool]:
        """(the kept buffer, or ``None`` with the flight that decompresses it
        and whether this caller leads it: one fetch and decompression per
        buffer at a time, the other readers wait for it). The lock is held
        for the lookup only: never across a read, a decompression or a wait."""
        with _lock:
            entry = _kept.pop(self._address, None)
            if entry is not None:
                _kept[self._address] = entry
                _drop_beyond(KEPT_BYTES)
                return entry[1], _NO_FLIGHT, False
            flight = _inflight.get(self._address)
            if flight is not None:
                return None, flight, False
            flight = _inflight[self._address] = _Flight(self._address)
            return None, flight, True

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


class _Flight:
    """One reader's fetch and decompression of a buffer, which the other
    readers of that buffer wait for instead of fetching it again (a warmup's
    planning threads and its prefetches on the store's loop each fetched a
    batch's whole compressed buffer, up to 30 times). Threads wait on an
    event; a task on an event loop is woken through its loop's thread-safe
    callback, never by blocking it. A leader that fails hands its error to
    the waiters; one interrupted (cancelled) lets them try again."""

    def __init__(self, address: tuple[object, int, int]) -> None:
        self.address = address
        self._finished = threading.Event()
        self._values: MemoryReader | None = None
        self._error: Exception | None = None
        self._wakers: list[Callable[[], None]] = []

    @contextlib.contextmanager
    def leading(self) -> Iterator[None]:
        """The leader's fetch and decompression: whatever ends it ends the flight."""
        try:
            yield
        except Exception as exc:
            self._finish(None, exc)
            raise
        except BaseException:
            self._finish(None, None)  # cancelled, interrupted: the waiters try again
            raise

    def done(self, values: MemoryReader) -> MemoryReader:
        self._finish(values, None)
        return values

    def _finish(self, values: MemoryReader | None, error: Exception | None) -> None:
        with _lock:
            if _inflight.get(self.address) is self:
                del _inflight[self.address]
            self._values, self._error = values, error
            self._finished.set()
            wakers, self._wakers = self._wakers, []
        for wake in wakers:
            with contextlib.suppress(Exception):  # its loop has ended: nobody left to wake
                wake()

    def wait(self) -> MemoryReader | None:
        """The buffer, once the leader has it (``None``: it was interrupted)."""
        self._finished.wait()
        return self._outcome()

    async def await_(self) -> MemoryReader | None:
        """``wait`` for a task on an event loop (asyncio or trio)."""
        woken = anyio.Event()
        if sniffio.current_async_library() == "asyncio":
            loop = asyncio.get_running_loop()

            def wake() -> None:
                loop.call_soon_threadsafe(woken.set)
        else:
            token = anyio.lowlevel.current_token().native_token

            def wake() -> None:
                token.run_sync_soon(woken.set)

        with _lock:
            finished = self._finished.is_set()
            if not finished:
                self._wakers.append(wake)
        if not finished:
            try:
                await woken.wait()
            finally:
                with _lock:
                    if wake in self._wakers:  # cancelled: the leader need not wake it
                        self._wakers.remove(wake)
        return self._outcome()

    def _outcome(self) -> MemoryReader | None:
        if self._error is not None:
            raise self._error
        return self._values


#: The buffers being fetched and decompressed now, by address.
_inflight: dict[tuple[object, int, int], _Flight] = {}
_NO_FLIGHT = _Flight((None, 0, 0))


def _on_a_loop() -> bool:
    """Whether this thread runs an event loop (asyncio's; trio's)."""
    try:
        sniffio.current_async_library()
    except sniffio.AsyncLibraryNotFoundError:
        return False
    return True


def _forget_flights() -> None:
    """In a forked child: the parent's flights have no leader here."""
    global _lock
    _lock = threading.Lock()  # another thread of the parent may have held it
    _inflight.clear()


os.register_at_fork(after_in_child=_forget_flights)


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
