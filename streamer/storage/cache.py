"""The block cache between readers and a store's requests.

Objects are cut into aligned blocks (``block_size``, default 128 KiB). A read
becomes the set of blocks it touches; each block comes from, in order:

1. the in-memory LRU (a byte budget shared by every object of the store);
2. a fetch already in flight for it (N concurrent readers -> 1 request);
3. the optional disk tier (``disk.py``);
4. a new request. Missing blocks are coalesced: consecutive ones, and ones
   separated by at most ``coalesce_gap`` bytes of blocks that are not needed
   (fetched anyway, since a request costs more than a few KiB), become one
   ranged GET of at most ``max_request`` bytes.

Alignment makes overlapping and adjacent reads share blocks, and makes a
block a stable unit for the disk tier. A read inside one block returns a
zero-copy view of it. The cache lives on the store's event loop thread
(``loop.py``), so it needs no locks.

Blocks are keyed by the object's *stamp* as well as its path and size: a
token naming one version of the object, which every write through the
store replaces (``forget``). A fetch or disk lookup carries the stamp it
started under, so the old version's bytes still arriving after a rewrite
(a slow or retried GET, another store's late disk-tier write) land under
the old stamp, where no reader looks any more. With a disk tier the stamp
is an entry of it, so stores and processes opened later agree on it.

The disk tier keys every entry (``disk_key``) by the object's *cache name*,
which the store gives: its path, or for an HTTP URL the URL without the
query parameters that only authenticate (a presigned signature), so a
directory filled through URLs signed for one job serves the next job's
URLs, signed anew. The memory tier keys blocks by path.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence

from ..errors import StorageError
from ..timing import record
from ._urls import redact
from .disk import DiskCache
from .loop import retrieve_outcome
from .stats import StoreStats

__all__ = ["TAG_KINDS", "BlockCache", "CacheConfig"]

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30

#: ``fetch(path, start, end, size)``: exactly the bytes ``[start, end)`` of one
#: object of ``size`` bytes.
Fetch = Callable[[str, int, int, int], Awaitable[bytes]]
#: The name the disk tier keys an object's entries by (``RemoteStore.cache_name``).
Name = Callable[[str], str]
#: A block: (path, stamp, object size, block number).
_Key = tuple[str, str, int, int]
#: The stamp of an object this store has not written, without a disk tier
#: (only written objects take room in ``BlockCache._stamps`` then).
_FIRST_STAMP = ""
#: The kinds of version tag kept under a stamp (``RemoteStore._first_tag``).
#: Each use of a stamp from the disk tier makes them newer than it, so the
#: size limit never evicts them while the stamp stays: a later run would
#: take a replaced object's tag for the first one, and mix the versions.
TAG_KINDS = ("ETag", "Last-Modified")


@dataclasses.dataclass(frozen=True)
class CacheConfig:
    """Block cache settings (all are store options of the same name)."""

    block_size: int = 128 * KiB
    cache_bytes: int = 256 * MiB
    coalesce_gap: int = 256 * KiB
    max_request: int = 16 * MiB
    cache_dir: str | None = None
    cache_dir_bytes: int = 16 * GiB

    def __post_init__(self) -> None:
        if self.block_size <= 0 or self.max_request < self.block_size:
            raise ValueError("block_size must be positive and at most max_request")


@dataclasses.dataclass(eq=False)
class _Run:
    """One request in flight for consecutive blocks of an object: a future per
    block, and how many readers wait for it (see ``BlockCache.read``)."""

    path: str
    stamp: str
    size: int
    futures: dict[int, asyncio.Future[bytes]] = dataclasses.field(default_factory=dict)
    task: asyncio.Task[None] | None = None
    waiters: int = 0
    why: str = ""


class BlockCache:
    """Aligned blocks of every object of one store, fetched through ``fetch``.

    ``namespace`` (the store's URL) keeps disk entries of different stores
    apart, ``name`` names an object in them (``disk_key``); blocks are keyed
    by (path, stamp, size), so an object rewritten through this store is
    never served from its old blocks.
    """

    def __init__(
        self,
        fetch: Fetch,
        *,
        config: CacheConfig,
        stats: StoreStats,
        namespace: str,
        name: Name = str,
    ) -> None:
        self.config = config
        self._fetch = fetch
        self._stats = stats
        self._namespace = namespace
        self._name = name
        self._blocks: OrderedDict[_Key, bytes] = OrderedDict()
        self._bytes = 0
        self._inflight: dict[_Key, _Run] = {}
        self._stamps: dict[str, str] = {}
        #: Keys of the disk entries other than blocks this cache read or wrote
        #: (stamps, remembered answers: ``note``), which a later run reads too.
        self._entries: set[str] = set()
        self._fetching: set[asyncio.Task[None]] = set()
        self._background: set[asyncio.Future[None]] = set()
        self._disk = (
            DiskCache(config.cache_dir, max_bytes=config.cache_dir_bytes)
            if config.cache_dir
            else None
        )

    @property
    def disk(self) -> DiskCache | None:
        """The disk tier, if the store has one (``cache_dir``)."""
        return self._disk

    @property
    def memory_bytes(self) -> int:
        """Bytes held by the in-memory tier."""
        return self._bytes

    async def read(
        self, path: str, size: int, ranges: Sequence[tuple[int, int]]
    ) -> list[memoryview]:
        """The bytes of each ``(offset, length)`` range (already bounds-checked)."""
        stamp = self._stamps.get(path, _FIRST_STAMP if self._disk is None else None)
        if stamp is None:
            stamp = await self.stamp(path)
        wanted = sorted({b for offset, length in ranges for b in self._span(offset, length)})
        found: dict[int, bytes] = {}
        waiting: dict[int, _Run] = {}
        missing = self._not_at_hand(path, stamp, size, wanted, found, waiting)
        if not missing and not waiting:
            with record("cache_hit"):
                return [self._assemble(found, offset, length) for offset, length in ranges]
        joined: dict[int, _Run] = {}  # by id: every fetch this reader waits for, once
        try:
            self._join(joined, waiting.values())
            if missing and self._disk is not None:
                with record("disk_cache"):
                    missing = await self._from_disk(path, stamp, size, missing, found)
                # another reader may have fetched some meanwhile: not asked for again
                missing = self._not_at_hand(path, stamp, size, missing, found, waiting)
                self._join(joined, waiting.values())
            self._stats.misses += len(missing)
            for first, last in self._runs(missing):
                started = self._start_fetch(path, stamp, size, first, last)
                self._join(joined, started.values())
                waiting.update(started)
            for block, run in waiting.items():
                found[block] = await asyncio.shield(run.futures[block])
        finally:
            self._leave(joined.values())
        return [self._assemble(found, offset, length) for offset, length in ranges]

    def _not_at_hand(
        self,
        path: str,
        stamp: str,
        size: int,
        blocks: list[int],
        found: dict[int, bytes],
        waiting: dict[int, _Run],
    ) -> list[int]:
        """The ``blocks`` neither in memory (put into ``found``) nor being
        fetched by another reader (put into ``waiting``): the ones this
        reader must find on disk or fetch. Asked again after a disk lookup,
        during which another reader's fetch may have brought some."""
        missing = []
        for block in blocks:
            key = (path, stamp, size, block)
            if key in self._blocks:
                self._blocks.move_to_end(key)
                found[block] = self._blocks[key]
                self._stats.hits += 1
            elif key in self._inflight:
                waiting[block] = self._inflight[key]
                self._stats.deduplicated += 1
            else:
                missing.append(block)
        return missing

    # A fetch is shared by every reader that waits for it: a reader that is
    # cancelled (or fails on another block) leaves it running for the others,
    # and cancels it when it was the last one waiting, so no request or retry
    # outlives its readers.

    @staticmethod
    def _join(joined: dict[int, _Run], runs: Iterable[_Run]) -> None:
        for run in runs:
            if id(run) not in joined:
                joined[id(run)] = run
                run.waiters += 1

    def _leave(self, runs: Iterable[_Run]) -> None:
        for run in runs:
            run.waiters -= 1
            if not run.waiters:
                self._abandon(run, "no reader waits for it any more")

    async def cancel_fetches(self) -> None:
        """Fail every fetch in flight with ``StorageError`` and wait until its
        request is cancelled (the store is closing)."""
        for run in {id(run): run for run in self._inflight.values()}.values():
            self._abandon(run, "the store was closed")
        await asyncio.gather(*self._fetching, return_exceptions=True)

    async def stamp(self, path: str) -> str:
        """The stamp of the version of ``path`` this store reads: what it set
        when it last wrote ``path``; else the disk tier's (made by the first
        store asking); else the first stamp. Take it before asking for bytes,
        and keep those bytes under it."""
        stamp, disk = self._stamps.get(path), self._disk
        if stamp is not None:
            return stamp
        if disk is None:
            return _FIRST_STAMP
        key, new = self._stamp_key(path), uuid.uuid4().hex.encode()

        def lookup() -> bytes:
            found = disk.get(key)
            if found is not None and self._tags_kept(path, found.decode()):
                return found
            # A new stamp is marked untagged before any store can take it: one
            # found with neither tags nor the mark lost its tags (bit rot, an
            # eviction), and the bytes kept under it are of a version no
            # answer can be checked against. A new stamp retires them.
            disk.put(self.untagged_key(path, new.decode()), b"")
            if found is not None:
                disk.put(key, new)
                return new
            found = disk.get_or_add(key, new)
            if found != new:  # another store's, new too (marked, or tagged since)
                disk.remove(self.untagged_key(path, new.decode()))
            return found

        found = (await asyncio.get_running_loop().run_in_executor(None, lookup)).decode()
        self.note(key)
        # A write while the disk tier was asked set the newer stamp: it stands.
        return self._stamps.setdefault(path, found)

    def _tags_kept(self, path: str, stamp: str) -> bool:
        """Whether the disk tier holds the first version tags under an earlier
        store's ``stamp``, or its mark that none came yet (``untagged_key``);
        then make them used later than the stamp: they must live as long."""
        disk = self._disk
        assert disk is not None
        mark = self.untagged_key(path, stamp)
        tags = [self.tag_key(path, stamp, kind) for kind in TAG_KINDS]
        if not disk.has(mark) and all(disk.get(tag) is None for tag in tags):
            return False
        disk.touch_after(self._stamp_key(path), [mark, *tags])
        return True

    def insert(
        self, path: str, stamp: str, size: int, offset: int, data: bytes | memoryview
    ) -> None:
        """Keep the whole blocks inside bytes fetched some other way (a suffix
        read), under the stamp taken before they were asked for: in memory,
        and in the disk tier where it lacks them (a shard's last block may
        be read only through its tail, and a warmup must leave it behind)."""
        bs = self.config.block_size
        end = offset + len(data)
        pieces = {}
        for block in range(-(-offset // bs), (end + bs - 1) // bs):
            start, stop = block * bs, min(size, (block + 1) * bs)
            if stop <= end:
                pieces[block] = bytes(data[start - offset : stop - offset])
                self._keep((path, stamp, size, block), pieces[block])
        if self._disk is not None and pieces:
            self._to_disk(path, stamp, size, pieces, replace=False)

    async def forget(self, path: str) -> None:
        """``path`` was just rewritten: give it a new stamp, so no block of an
        older version (cached, or still arriving) is served again. Memory
        blocks of the old stamp are dropped now; disk entries age out."""
        stamp = self._stamps[path] = uuid.uuid4().hex
        for key in [key for key in self._blocks if key[0] == path]:
            self._bytes -= len(self._blocks.pop(key))
        disk = self._disk
        if disk is not None:
            key, untagged = self._stamp_key(path), self.untagged_key(path, stamp)

            def store() -> None:
                disk.put(untagged, b"")  # before the stamp, as ``stamp`` does
                disk.put(key, stamp.encode())

            await asyncio.get_running_loop().run_in_executor(None, store)
            self.note(key)

    def clear(self) -> None:
        """Forget the memory tier (benchmarks start each configuration cold)."""
        self._blocks.clear()
        self._bytes = 0

    async def drain(self) -> None:
        """Wait for pending disk-tier writes (before exit, or in tests).
        Fetches in flight are not waited for."""
        while self._background:
            await asyncio.gather(*list(self._background), return_exceptions=True)

    async def missing_on_disk(
        self, path: str, size: int, ranges: Iterable[tuple[int, int]]
    ) -> tuple[int, int, int]:
        """(missing, blocks, held): how many of the blocks holding ``ranges`` of
        ``path`` the disk tier lacks under the stamp this cache reads it by,
        of how many, and the bytes of those it holds. All are missing when
        that stamp's own entry is gone or another: no other store finds the
        blocks kept under it."""
        blocks = sorted({b for offset, length in ranges for b in self._span(offset, length)})
        disk, stamp = self._disk, self._stamps.get(path)
        if disk is None or not blocks:
            return 0, len(blocks), 0

        def held() -> list[int]:
            if stamp is None or disk.get(self._stamp_key(path)) != stamp.encode():
                return []
            return [b for b in blocks if disk.has(self._disk_key(path, stamp, size, b))]

        found = await asyncio.get_running_loop().run_in_executor(None, held)
        nbytes = sum(self._block_length(size, b) for b in found)
        return len(blocks) - len(found), len(blocks), nbytes

    def note(self, key: str) -> None:
        """``key`` names a disk entry other than a block that this cache read or
        wrote: one a later run over the same objects reads too
        (``missing_entries``)."""
        self._entries.add(key)

    async def missing_entries(self) -> tuple[int, int]:
        """(missing, entries): how many of the entries ``note``d are no longer
        in the disk tier (another process's smaller size limit evicts the
        oldest first, and these were made when the objects were opened), of
        how many."""
        disk, keys = self._disk, list(self._entries)
        if disk is None:
            return 0, 0
        held = await asyncio.get_running_loop().run_in_executor(
            None, lambda: sum(map(disk.has, keys))
        )
        return len(keys) - held, len(keys)

    # -- planning -------------------------------------------------------------

    def _span(self, offset: int, length: int) -> range:
        if length == 0:
            return range(0)
        bs = self.config.block_size
        return range(offset // bs, (offset + length - 1) // bs + 1)

    def _runs(self, blocks: list[int]) -> Iterator[tuple[int, int]]:
        """Coalesce sorted block numbers into (first, last) request runs."""
        bs = self.config.block_size
        gap, longest = self.config.coalesce_gap // bs, self.config.max_request // bs
        run: list[int] = []
        for block in blocks:
            if run and (block - run[-1] - 1 > gap or block - run[0] + 1 > longest):
                yield run[0], run[-1]
                run = []
            run.append(block)
        if run:
            yield run[0], run[-1]

    def _assemble(self, found: dict[int, bytes], offset: int, length: int) -> memoryview:
        bs = self.config.block_size
        blocks = self._span(offset, length)
        if len(blocks) <= 1:
            if not blocks:
                return memoryview(b"")
            start = offset - blocks[0] * bs
            return memoryview(found[blocks[0]])[start : start + length]
        parts = []
        for block in blocks:
            start = max(offset, block * bs)
            stop = min(offset + length, (block + 1) * bs)
            parts.append(memoryview(found[block])[start - block * bs : stop - block * bs])
        return memoryview(b"".join(parts))  # one copy, into memory not zeroed first

    # -- fetching -------------------------------------------------------------

    def _start_fetch(
        self, path: str, stamp: str, size: int, first: int, last: int
    ) -> dict[int, _Run]:
        """Fetch blocks ``first..last`` (none in flight); returns the fetch."""
        loop = asyncio.get_running_loop()
        run = _Run(path, stamp, size)
        for block in range(first, last + 1):
            run.futures[block] = loop.create_future()
            self._inflight[(path, stamp, size, block)] = run
        run.task = loop.create_task(self._fetch_run(run, first, last))
        self._fetching.add(run.task)
        run.task.add_done_callback(self._fetching.discard)
        return dict.fromkeys(run.futures, run)

    async def _fetch_run(self, run: _Run, first: int, last: int) -> None:
        bs = self.config.block_size
        path, stamp, size = run.path, run.stamp, run.size
        start, end = first * bs, min(size, (last + 1) * bs)
        try:
            data = await self._fetch(path, start, end, size)
        except BaseException as exc:
            self._settle(run, exc)
            if not isinstance(exc, (Exception, asyncio.CancelledError)):
                raise
            return
        pieces = {
            block: bytes(data[(block - first) * bs : (block - first + 1) * bs])
            for block in range(first, last + 1)
        }
        for block, piece in pieces.items():
            self._keep((path, stamp, size, block), piece)
        self._settle(run, pieces)
        if self._disk is not None:
            self._to_disk(path, stamp, size, pieces)

    def _settle(self, run: _Run, outcome: dict[int, bytes] | BaseException) -> None:
        """Hand a fetch's blocks (or its failure) to its readers; forget it."""
        if isinstance(outcome, asyncio.CancelledError):
            outcome = StorageError(f"fetch of {redact(run.path)} cancelled: {run.why}")
        self._forget(run)
        for block, future in run.futures.items():
            if future.done():
                continue
            if isinstance(outcome, BaseException):
                future.set_exception(outcome)
                future.add_done_callback(retrieve_outcome)  # no reader may be left
            else:
                future.set_result(outcome[block])

    def _abandon(self, run: _Run, why: str) -> None:
        """Cancel a fetch in flight. Its readers get the error now (a task
        cancelled before its first step never runs ``_fetch_run``, so its
        futures would never be settled), and it is forgotten at once, so a
        reader arriving meanwhile starts a new fetch instead of joining a
        dying one."""
        if run.task is None or run.task.done():
            return
        run.why = why
        self._settle(run, asyncio.CancelledError())
        run.task.cancel()

    def _forget(self, run: _Run) -> None:
        """Stop offering ``run``'s blocks to new readers."""
        for block in run.futures:
            key = (run.path, run.stamp, run.size, block)
            if self._inflight.get(key) is run:
                del self._inflight[key]

    def _keep(self, key: _Key, data: bytes) -> None:
        """Put a block in the memory tier, evicting least recently used ones."""
        if len(data) > self.config.cache_bytes:
            return
        old = self._blocks.pop(key, None)
        if old is not None:
            self._bytes -= len(old)
        self._blocks[key] = data
        self._bytes += len(data)
        while self._bytes > self.config.cache_bytes:
            _, evicted = self._blocks.popitem(last=False)
            self._bytes -= len(evicted)

    # -- disk tier ------------------------------------------------------------

    def disk_key(self, kind: str, path: str, *fields: object) -> str:
        """The disk-tier key of a ``kind`` entry about the object ``path``
        (``fields`` tell its entries of that kind apart): every entry of the
        store's is keyed here, by the object's cache name, never its path
        (a presigned URL's signature changes with every signing)."""
        return "\0".join([self._namespace, kind, self._name(path), *map(str, fields)])

    def _disk_key(self, path: str, stamp: str, size: int, block: int) -> str:
        return self.disk_key("block", path, stamp, size, self.config.block_size, block)

    def _stamp_key(self, path: str) -> str:
        return self.disk_key("stamp", path)

    def tag_key(self, path: str, stamp: str, kind: str) -> str:
        """The entry of the first version tag of ``kind`` (``TAG_KINDS``) the
        server sent for ``path`` under ``stamp`` (``RemoteStore._first_tag``)."""
        return self.disk_key("tag", path, stamp, kind)

    def untagged_key(self, path: str, stamp: str) -> str:
        """The entry marking a new ``stamp`` of ``path`` as having no version
        tags yet: ``RemoteStore._first_tag`` drops it once one is kept."""
        return self.disk_key("untagged", path, stamp)

    def _block_length(self, size: int, block: int) -> int:
        bs = self.config.block_size
        return min(size, (block + 1) * bs) - block * bs

    async def _from_disk(
        self, path: str, stamp: str, size: int, blocks: list[int], found: dict[int, bytes]
    ) -> list[int]:
        """Move disk-tier hits into ``found`` and memory; return the still missing."""
        disk = self._disk
        assert disk is not None

        def lookup() -> dict[int, bytes | None]:
            return {
                b: disk.get(self._disk_key(path, stamp, size, b), self._block_length(size, b))
                for b in blocks
            }

        results = await asyncio.get_running_loop().run_in_executor(None, lookup)
        missing = []
        for block, data in results.items():
            if data is None:
                missing.append(block)
                continue
            found[block] = data
            self._keep((path, stamp, size, block), data)
            self._stats.disk_hits += 1
        return missing

    def _to_disk(
        self, path: str, stamp: str, size: int, pieces: dict[int, bytes], *, replace: bool = True
    ) -> None:
        """Write blocks to the disk tier in the background; unless ``replace``,
        only those it has no entry for."""
        disk = self._disk
        assert disk is not None

        def store() -> None:
            for block, data in pieces.items():
                key = self._disk_key(path, stamp, size, block)
                if replace or not disk.has(key):
                    disk.put(key, data)

        future = asyncio.get_running_loop().run_in_executor(None, store)
        self._background.add(future)
        future.add_done_callback(self._background.discard)
