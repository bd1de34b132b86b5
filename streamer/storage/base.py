"""The interfaces every store implements: byte range readers and the stores they come from.

Everything above the storage layer (shards, indexes, decoders) reads bytes only
through a ``RangeReader``, and finds objects only through a ``Store``, so local
files, object stores and HTTP servers are interchangeable. Nothing in this
package knows about audio.
"""

from __future__ import annotations

import abc
import contextlib
import dataclasses
import os
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NamedTuple

from ..errors import ReadOnlyURLError, StorageError
from .stats import StoreStats

__all__ = ["COPY_CHUNK", "Entry", "NotFound", "RangeReader", "Source", "Stat", "Store"]

#: The largest request of a bulk copy (``RangeReader.read_into_sync``).
COPY_CHUNK = 8 << 20

#: What ``Store.put_sync`` stores: the bytes themselves, or a finished local file.
Source = bytes | bytearray | memoryview | str | os.PathLike[str]


class NotFound(StorageError):
    """A 404 (``NoSuchKey``, ``NoSuchBucket``, a file system's ``FileNotFoundError``):
    the object is not there."""

    failure_reason = "not found"  # as ``StoreStats.failure_reasons`` counts it


class RangeReader(abc.ABC):
    """Random access to the bytes of one object (a file, an S3 key, a URL).

    ``read`` returns exactly ``length`` bytes or raises ``StorageError``; it
    never returns a short buffer. Implementations may return a zero-copy view
    (local files return a slice of the memory map), so treat the result as
    read-only.

    The ``*_sync`` forms are for callers that cannot await: file-like
    consumers such as FFmpeg and the index parsers, which run in worker
    processes or threads.
    """

    #: Where the bytes live, safe to log: never carries credentials.
    url: str
    #: Reads are views of a local memory map, free in any process: the reader
    #: pickles as the file's path and each process maps the file itself, so a
    #: decode worker reads its planned bytes straight from its own mapping.
    #: Other readers pickle by their store's options and fetch through it.
    mapped: bool = False

    @abc.abstractmethod
    async def size(self) -> int:
        """Total size of the object in bytes."""

    @abc.abstractmethod
    async def read(self, offset: int, length: int) -> memoryview:
        """Exactly ``length`` bytes starting at ``offset``."""

    @abc.abstractmethod
    def size_sync(self) -> int:
        """Blocking form of ``size``."""

    async def stat(self) -> Stat:
        """The object's size and version (``Stat``); by default no version
        (a local file's is its mtime, which whoever needs it stats)."""
        return Stat(await self.size())

    @abc.abstractmethod
    def read_sync(self, offset: int, length: int) -> memoryview:
        """Blocking form of ``read``."""

    async def read_many(self, ranges: Sequence[tuple[int, int]]) -> list[memoryview]:
        """Several ``(offset, length)`` ranges at once, in order.

        Remote readers plan them together, so nearby ranges share requests
        and the rest are fetched concurrently.
        """
        return [await self.read(offset, length) for offset, length in ranges]

    def read_many_sync(self, ranges: Sequence[tuple[int, int]]) -> list[memoryview]:
        """Blocking form of ``read_many``."""
        return [self.read_sync(offset, length) for offset, length in ranges]

    def fetch_many_sync(self, ranges: Sequence[tuple[int, int]]) -> list[memoryview]:
        """Exactly these ranges, past any block cache: for one-off reads (shard
        metadata) that should cost what they read and not displace cached data.
        Remote readers still group nearby ranges into one request."""
        return self.read_many_sync(ranges)

    def read_into_sync(self, target: memoryview, offset: int = 0) -> None:
        """Fill ``target`` with the object's bytes from ``offset``: a bulk copy
        (``streamer pack`` reads its source files so), past any block cache,
        in requests of at most ``COPY_CHUNK`` bytes, which remote readers
        send a few at a time, so memory stays bounded by ``target``."""
        for start in range(0, len(target), COPY_CHUNK):
            length = min(COPY_CHUNK, len(target) - start)
            target[start : start + length] = self.fetch_many_sync([(offset + start, length)])[0]

    def read_tail_sync(self, length: int) -> tuple[int, memoryview]:
        """The last ``min(length, size)`` bytes and the offset they start at.

        Remote readers do this in one suffix request (``bytes=-N``) that also
        tells them the object's size: how a shard is opened in one round trip.
        """
        size = self.size_sync()
        start = max(0, size - length)
        return start, self.read_sync(start, size - start)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"


class Stat(NamedTuple):
    """What a size request says of an object: its size, and its version
    where the answer names one (its ``ETag``, else its modification time;
    ``None`` when it names neither), which a rewrite at the same size
    changes (``streamer pack`` hashes it into its plan fingerprint)."""

    size: int
    version: str | None = None


@dataclasses.dataclass(frozen=True)
class Entry:
    """One child of a listed directory or prefix. ``size`` is ``None`` when
    unknown; ``version`` is what the listing says of an object's version,
    which a rewrite at the same size changes (S3's ETag; an fsspec file
    system's ETag, else its modification time), ``None`` when it says
    nothing (an HTTP index page; a local folder, whose files whoever needs
    it stats)."""

    name: str
    is_dir: bool
    size: int | None = None
    version: str | None = None


class Store(abc.ABC):
    """Where readers come from: one connection pool, cache and ``stats`` per store.

    Paths are the store's own (``bucket/key`` for S3, a full URL for HTTP, a
    file path locally), joined with ``/``. One store serves every shard of
    every dataset opened through it, so they share connections and cache.

    Stores are read-mostly: ``put_sync`` writes one whole object (what
    ``streamer index`` needs for ``seek_index/`` shards), atomically.

    Code above the storage layer asks a store what it needs to know
    (``is_remote``, ``drain``, ``clear_memory_cache``) instead of checking
    its class.
    """

    #: The store itself (scheme and endpoint), safe to log.
    url: str
    stats: StoreStats
    #: Why this store cannot be written, or ``None`` when ``put_sync`` works.
    read_only: str | None = None

    @classmethod
    def canonical_options(cls, options: Mapping[str, Any]) -> dict[str, Any]:
        """``options`` in the one form this store keeps them in: options that
        configure a store the same way come out equal (the registry shares one
        store per scheme and canonical options)."""
        return dict(options)

    @abc.abstractmethod
    def reader(self, path: str, size: int | None = None) -> RangeReader:
        """A reader of the object at ``path``; ``size`` spares a request when known."""

    @abc.abstractmethod
    def list_sync(self, path: str) -> list[Entry]:
        """The children of a directory or prefix, sorted by name."""

    @abc.abstractmethod
    def put_sync(self, path: str, source: Source) -> None:
        """Store ``source`` (bytes, or the path of a finished local file) at ``path``.

        Atomic for readers: they see the previous object or the whole new
        one, never a part. Afterwards readers made by this store (and new
        listings) see the new object. Raises ``ReadOnlyURLError`` on a read-only
        store (``read_only`` says why).
        """

    def move_in_sync(self, path: str, local_file: str) -> None:
        """Store the finished local file ``local_file`` at ``path`` (atomically,
        as ``put_sync``) and remove it: uploaded by a network store, renamed
        by the local one when both sit on one file system (no copy)."""
        try:
            self.put_sync(path, local_file)
        finally:
            os.remove(local_file)

    @contextlib.contextmanager
    def staged_sync(self, path: str) -> Iterator[str]:
        """A local file path to write the object ``path`` into, piece by piece.

        When the ``with`` block ends normally the file is stored at ``path``
        (``put_sync``); when it raises, nothing is stored. The file is
        removed either way. Fails before the block runs on a read-only store,
        so no work is done for an object that could not be stored.
        """
        self.check_writable(path)
        suffix = os.path.splitext(path)[1]
        handle, temp = tempfile.mkstemp(prefix="streamer-", suffix=suffix)
        os.close(handle)
        try:
            yield temp
            self.put_sync(path, temp)
        finally:
            os.remove(temp)

    @property
    def is_remote(self) -> bool:
        """Whether reads go over a network (each one a request, worth
        prefetching and caching) rather than to bytes this machine can map."""
        return False

    async def drain(self) -> None:
        """Wait until writes the store does in the background are done (a block
        cache's disk tier; call on the store loop, ``loop.py``). Nothing here."""
        return None

    def disk_tier(self) -> tuple[str, int] | None:
        """The disk tier's directory and size limit (``cache_dir``,
        ``cache_dir_bytes``), or None: a store without a disk tier."""
        return None

    def disk_tier_problem(self, since: float) -> str | None:
        """Why the disk tier may have lost what was cached since ``since``
        (``time.time()``: writes failed, or its size limit evicted it), or
        None. Nothing here: a store without a disk tier."""
        return None

    async def missing_on_disk(
        self, path: str, size: int, ranges: Sequence[tuple[int, int]]
    ) -> tuple[int, int, int]:
        """(missing, blocks, held): of the disk-tier blocks that hold ``ranges``
        of the object ``path`` of ``size`` bytes, how many are not in the
        directory for the next run to find (removed, evicted by another
        process), of how many, and the bytes of those that are (call on the
        store loop). Nothing here: no disk tier."""
        return 0, 0, 0

    async def missing_metadata_on_disk(self) -> tuple[int, int]:
        """(missing, entries): of the disk-tier entries other than blocks that
        this store read or wrote in this process (objects' stamps, listings,
        shard tails and footers, sizes), how many are not in the directory
        for the next run to find, of how many (call on the store loop).
        Nothing here: no disk tier."""
        return 0, 0

    def clear_memory_cache(self) -> None:
        """Drop this process's in-memory cached blocks (a disk tier stays), so the
        next reads start cold. Nothing here: a store without a cache of its own."""
        return None

    def check_writable(self, path: str) -> None:
        """Raise ``ReadOnlyURLError`` (saying why) unless objects can be stored under ``path``."""
        if self.read_only is not None:
            raise ReadOnlyURLError(f"{self.display(path)}: {self.read_only}")

    def path_of(self, scheme: str, rest: str) -> str:
        """The store path of the URL ``scheme://rest``."""
        return rest

    def join(self, path: str, *names: str) -> str:
        """``path/name/...``: store paths are ``/``-separated everywhere."""
        return "/".join([path.rstrip("/"), *names])

    def display(self, path: str) -> str:
        """``path`` as a URL that is safe to log (what errors and reprs show)."""
        return path

    def basename(self, path: str) -> str:
        """The last name of ``path``, as a listing of its folder names it
        (``join``'s inverse): what a manifest records a shard's file by."""
        return path.rstrip("/").rsplit("/", 1)[-1]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"
