"""What every network store shares: readers, the block cache, retries, limits.

A backend (``s3.py``, ``http.py``, ``fsspec.py``) subclasses ``RemoteStore``
and implements a handful of async primitives — one ranged GET, one suffix
GET, a size query, a listing and, if it can write, one whole-object PUT —
against its client. Everything else is here,
once: ``RemoteReader`` (the ``RangeReader`` of one object), the per-store
block cache and concurrency limit, request timeouts, retries and hedges,
the outage gate (``health.py``), body length and object version checks,
and stats. All of it runs on the background store loop (``loop.py``),
which is how one connection pool serves every shard, every caller's event
loop and every blocking caller of the process.
"""

from __future__ import annotations

import abc
import asyncio
import atexit
import contextlib
import dataclasses
import json
import os
import struct
import weakref
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, NamedTuple, cast

from ..errors import StorageError
from ..timing import record
from ._bounds import check_range
from ._urls import install_log_redaction, redact
from .base import COPY_CHUNK, Entry, NotFound, RangeReader, Source, Stat, Store
from .cache import BlockCache, CacheConfig
from .health import StoreHealth
from .loop import ProcessLocal, run_async, run_sync
from .retry import RetryPolicy, TransientError, call_with_retries
from .stats import StoreStats
from .throttle import Slot, Throttle

__all__ = [
    "Answer",
    "MissingBucket",
    "RangeNotSatisfiable",
    "RemoteReader",
    "RemoteStore",
    "check_length",
]

#: Requests of one bulk copy (``RangeReader.read_into_sync``) in flight at once.
COPY_IN_FLIGHT = 4
#: Uncached reads this close together share one request.
EXACT_GAP = 4096
#: Requests one read may take when the server answers each with fewer bytes
#: than asked (it caps range sizes): 16 MiB (``max_request``) in pieces of 64 KiB.
MAX_PIECES = 256
_TAIL_HEAD = struct.Struct("<qq")  # start, object size: before a remembered tail's body
#: A remembered tail of an object that is not there: its head, then the 404's message.
_NO_TAIL = _TAIL_HEAD.pack(-1, -1)

#: Option groups that take an object or its fields: option -> (class, field names).
_GROUPS: dict[str, tuple[type, set[str]]] = {
    "cache": (CacheConfig, {f.name for f in dataclasses.fields(CacheConfig)}),
    "retry": (RetryPolicy, {f.name for f in dataclasses.fields(RetryPolicy)}),
}
#: Options every network store takes itself (``RemoteStore``); the rest go to its backend.
GENERIC_OPTIONS = ("cache", "retry", "max_concurrency", "max_rps", "adaptive")
_live_stores: weakref.WeakSet[RemoteStore] = weakref.WeakSet()


class Answer(NamedTuple):
    """A ranged GET's bytes, and what the answer said of the object they are
    from: its size (``Content-Range``; ``None`` when it did not say) and its
    version tags, strongest first (``"ETag <etag>"``, ``"Last-Modified
    <date>"``: each one the answer carried)."""

    body: bytes
    size: int | None = None
    tags: tuple[str, ...] = ()


class RangeNotSatisfiable(StorageError):
    """416: the range lies past the object's end. For a suffix ``bytes=-N``
    that means the object is shorter than ``N`` bytes, which some servers
    (rclone's S3 server) refuse to serve instead of sending it whole; for
    a range inside the size a reader knows, that the object shrank.
    ``size``: the object's size, when the answer said it."""

    failure_reason = "range not satisfiable"  # as ``StoreStats.failure_reasons`` counts it

    def __init__(self, message: str, size: int | None = None) -> None:
        super().__init__(message)
        self.size = size


class MissingBucket(NotFound):
    """404 ``NoSuchBucket``: the bucket itself is not there (an object store's
    prefix is never missing; a bucket is), unlike a folder not made yet."""


@dataclasses.dataclass
class _ProcessState:
    """A store's per-process, per-loop machinery (rebuilt after ``fork``)."""

    cache: BlockCache
    limit: asyncio.Semaphore
    client: Any = None
    connecting: asyncio.Lock = dataclasses.field(default_factory=asyncio.Lock)
    health: dict[str, StoreHealth] = dataclasses.field(default_factory=dict)
    throttles: dict[str, Throttle] = dataclasses.field(default_factory=dict)
    #: path -> (stamp, tag kind) -> the version tag the first answer about it carried.
    tags: dict[str, dict[tuple[str, str], str]] = dataclasses.field(default_factory=dict)


class RemoteStore(Store):
    """Base of network stores. Generic options (any backend):

    * cache: ``cache=CacheConfig(...)``, or its fields as options of their
      own: ``block_size``, ``cache_bytes``, ``coalesce_gap``, ``max_request``,
      ``cache_dir``, ``cache_dir_bytes``;
    * faults: ``retry=RetryPolicy(...)``, or its fields: ``attempts``,
      ``timeout``, ``backoff``, ``max_backoff``, ``max_retry_after``,
      ``give_up_after``, ``connect_timeout``, ``read_timeout``,
      ``hedge_after``, ``hedge_factor``;
    * ``max_concurrency``: requests in flight at once for this store, and the
      most each endpoint/prefix's adaptive limit rises to (``throttle.py``);
      ``adaptive=False`` keeps that limit fixed; ``max_rps``: requests per
      second per endpoint/prefix (default: no cap).

    Every other option goes to the backend.
    """

    def __init__(self, scheme: str, options: Mapping[str, Any]) -> None:
        self.scheme = scheme
        self._phase = f"fetch_{scheme}"  # the profiler times requests per store kind
        options = self.canonical_options(options)
        self._options = dict(options)
        rest = dict(options)
        self.cache_config: CacheConfig = rest.pop("cache")
        self.retry: RetryPolicy = rest.pop("retry")
        self.max_concurrency = int(rest.pop("max_concurrency", 32))
        max_rps = rest.pop("max_rps", None)
        self.max_rps = None if max_rps is None else float(max_rps)
        self.adaptive = bool(rest.pop("adaptive", True))
        self.backend_options = rest
        self.stats = StoreStats()
        self._state = ProcessLocal(self._new_state)
        _live_stores.add(self)
        install_log_redaction()

    @classmethod
    def canonical_options(cls, options: Mapping[str, Any]) -> dict[str, Any]:
        """``options`` with the cache and retry settings as one ``cache=CacheConfig``
        and one ``retry=RetryPolicy``, however they were given (an object, or
        flat options of the same names as its fields; not both)."""
        rest = dict(options)
        for name, (kind, fields) in _GROUPS.items():
            flat = _pop(rest, fields)
            given = rest.pop(name, None)
            if given is None:
                rest[name] = kind(**flat)
            elif not isinstance(given, kind):
                raise TypeError(f"{name}= takes a {kind.__name__}, not {type(given).__name__}")
            elif flat:
                raise ValueError(
                    f"{name}={kind.__name__}(...) and the options {sorted(flat)} both give "
                    f"{name} settings: give them all in the {kind.__name__}, or none of it"
                )
            else:
                rest[name] = given
        return rest

    def __reduce__(self) -> tuple[Any, ...]:
        # Worker processes rebuild the store (and its pool) from its options.
        from .registry import get_store

        return get_store, (self.scheme, self._options)

    # -- backend primitives ---------------------------------------------------

    @abc.abstractmethod
    async def _connect(self) -> Any:
        """A new client (session, connection pool), made on the store loop."""

    @abc.abstractmethod
    async def _disconnect(self, client: Any) -> None:
        """Close a client made by ``_connect``."""

    @abc.abstractmethod
    async def _get_range(self, client: Any, path: str, start: int, end: int) -> Answer:
        """One request for the bytes ``[start, end)``: an answer whose body holds
        them all, or, when the server said it sent fewer (a 206 whose
        ``Content-Range`` ends early), the first of them; the caller asks
        for the rest. A body of another length than the answer named is
        the backend's to refuse (``TransientError``).

        Raise ``TransientError`` for what is worth retrying, ``StorageError``
        for what is not (missing object, denied, Range unsupported),
        ``RangeNotSatisfiable`` for a 416.
        """

    @abc.abstractmethod
    async def _get_tail(self, client: Any, path: str, length: int) -> tuple[int, Answer]:
        """One request for the last ``length`` bytes: (start, answer), the
        answer's ``size`` being the object's (never ``None``); its body may
        stop early as ``_get_range``'s may, or start later than the suffix
        asked, where the answer says so (``_tail`` asks for the rest). A
        416 (some servers' answer to a suffix longer than the object) raises
        ``RangeNotSatisfiable``: ``_suffix`` reads the object's bytes
        another way."""

    @abc.abstractmethod
    async def _get_stat(self, client: Any, path: str) -> Stat:
        """The object's size in bytes and its version, in one request."""

    async def _list(self, client: Any, path: str) -> list[Entry]:
        """Children of a directory or prefix (any order), in one request: what
        the default ``_list_all`` asks for. A backend whose listings come in
        pages overrides ``_list_all`` instead."""
        raise NotImplementedError(f"{type(self).__name__} lists through _list_all")

    async def _put(self, client: Any, path: str, body: bytes) -> None:
        """Store ``body`` as the whole object ``path`` in one atomic request.

        Backends that can write override this; read-only ones set
        ``read_only`` instead, so callers are refused before any work.
        """
        raise NotImplementedError(f"{type(self).__name__} has no write path")

    def _host(self, path: str) -> str:
        """The server behind ``path``, as logs may name it: requests to one
        server share an outage gate (``health.py``). One per store by default."""
        return self.url

    def cache_name(self, path: str) -> str:
        """The name of the object ``path`` in the disk tier's keys (blocks,
        stamps, version tags, remembered answers): ``path`` itself by
        default. A store whose paths carry credentials that change while
        the object does not (presigned URLs, signed anew for every job)
        names it without them, or every new signing would miss everything
        cached before."""
        return path

    def cache_namespace(self) -> str:
        """What keeps this store's disk-tier entries apart from other stores'
        sharing the directory: everything but the object's name that says
        which bytes a path reads (the scheme and endpoint; never credentials)."""
        return self.url

    def _throttle_key(self, path: str) -> str:
        """Which adaptive limit ``path``'s requests share (``throttle.py``),
        as stats may show it: one per server by default."""
        return self._host(path)

    # -- Store ----------------------------------------------------------------

    def reader(self, path: str, size: int | None = None) -> RemoteReader:
        return RemoteReader(self, path, size)

    @property
    def is_remote(self) -> bool:
        return True

    def list_sync(self, path: str) -> list[Entry]:
        return run_sync(self._listing(path))

    async def drain(self) -> None:
        """Wait until the blocks bound for the disk tier are written (call on the
        store loop: the end of a warmup)."""
        state = self._state.peek()
        if state is not None:
            await state.cache.drain()

    def disk_tier(self) -> tuple[str, int] | None:
        config = self.cache_config
        return (config.cache_dir, config.cache_dir_bytes) if config.cache_dir else None

    def disk_tier_problem(self, since: float) -> str | None:
        state = self._state.peek()
        disk = None if state is None else state.cache.disk
        return None if disk is None else disk.problem(since)

    async def missing_on_disk(
        self, path: str, size: int, ranges: Sequence[tuple[int, int]]
    ) -> tuple[int, int, int]:
        state = self._state.peek()
        if state is None or state.cache.disk is None:
            return 0, 0, 0
        return await state.cache.missing_on_disk(path, size, ranges)

    async def missing_metadata_on_disk(self) -> tuple[int, int]:
        state = self._state.peek()
        return (0, 0) if state is None else await state.cache.missing_entries()

    def clear_memory_cache(self) -> None:
        """Drop this process's in-memory blocks (the disk tier stays)."""
        run_sync(self._clear_on_loop())

    async def _clear_on_loop(self) -> None:
        state = self._state.peek()
        if state is not None:
            state.cache.clear()

    def put_sync(self, path: str, source: Source) -> None:
        """One request holding the whole object (objects are written once and
        read in ranges; ``seek_index/`` shards are megabytes, not gigabytes)."""
        self.check_writable(path)
        body = _body(source)
        run_sync(self._store(path, body))

    async def aclose(self) -> None:
        """Close this process's client; the store reconnects if used again."""
        await run_async(self._close_on_loop())

    # -- machinery (runs on the store loop) -----------------------------------

    def _new_state(self) -> _ProcessState:
        cache = BlockCache(
            self._fetch,
            config=self.cache_config,
            stats=self.stats,
            namespace=self.cache_namespace(),
            name=self.cache_name,
        )
        return _ProcessState(cache=cache, limit=asyncio.Semaphore(self.max_concurrency))

    async def _client(self) -> Any:
        state = self._state.get()
        if state.client is None:
            async with state.connecting:
                if state.client is None:
                    state.client = await self._connect()
        return state.client

    def _health(self, path: str) -> StoreHealth:
        """The shared state of the server behind ``path`` in this process."""
        healths, host = self._state.get().health, self._host(path)
        if host not in healths:
            healths[host] = StoreHealth(host, self.retry, self.stats)
        return healths[host]

    def _throttle(self, path: str) -> Throttle:
        """The adaptive limit of ``path``'s endpoint/prefix in this process."""
        throttles, key = self._state.get().throttles, self._throttle_key(path)
        if key not in throttles:
            throttles[key] = Throttle(
                key,
                max_concurrency=self.max_concurrency,
                stats=self.stats,
                max_rps=self.max_rps,
                adaptive=self.adaptive,
            )
        return throttles[key]

    async def _call(self, request: Any, what: str, path: str, *, hedge: bool = False) -> Any:
        """``request(client)`` under the adaptive limit of ``path``'s endpoint/prefix
        and the store's concurrency limit, timeouts, retries, the outage gate
        of ``path``'s server and, for reads (``hedge``), hedging."""
        client = await self._client()
        state = self._state.get()
        throttle = self._throttle(path)

        async def attempt() -> Any:
            self.stats.requests += 1
            with record(self._phase):
                return await request(client)

        return await call_with_retries(
            attempt,
            policy=self.retry,
            what=what,
            stats=self.stats,
            health=self._health(path),
            slot=lambda: _Place(throttle.slot(), state.limit),
            hedge=hedge,
        )

    async def _fetch(self, path: str, start: int, end: int, size: int) -> bytes:
        """Exactly ``[start, end)`` of the object of ``size`` bytes (``_fetch_from``)."""
        stamp = await self._state.get().cache.stamp(path)
        return await self._fetch_from(path, stamp, start, end, size)

    async def _fetch_from(self, path: str, stamp: str, start: int, end: int, size: int) -> bytes:
        """``[start, end)`` of the version ``stamp`` of the object of ``size`` bytes.

        An answer may carry fewer bytes than asked when it says so (HTTP lets a
        server cap range sizes, and some servers and CDNs do): the rest is
        asked for anew, each request with its own retries, at most
        ``MAX_PIECES`` in all. Wrong-length bodies count as transient
        failures, an answer from another version of the object
        (``_check_version``) as a permanent one."""
        pieces: list[bytes] = []
        at = start
        while at < end:
            if len(pieces) == MAX_PIECES:
                raise StorageError(
                    f"{self.display(path)}: the server answered {MAX_PIECES} range requests "
                    f"with at most {max(map(len, pieces))} bytes each, and bytes {at}-{end - 1} "
                    f"are still missing: set max_request (now {self.cache_config.max_request}) "
                    "nearer that size"
                )
            body = await self._fetch_piece(path, stamp, at, end, size)
            pieces.append(body)
            at += len(body)
            if at < end:
                self.stats.partial_answers += 1
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)

    async def _fetch_piece(self, path: str, stamp: str, start: int, end: int, size: int) -> bytes:
        """One GET of ``[start, end)``, retried: its bytes from ``start`` on, all of
        them or as many as the answer said it carries (never none)."""

        async def request(client: Any) -> bytes:
            try:
                answer = await self._get_range(client, path, start, end)
            except RangeNotSatisfiable as exc:  # past the end: of this version?
                await self._check_version(path, stamp, Answer(b"", exc.size), size)
                raise
            # Before the length: a shrunk object's short answer is no transient.
            await self._check_version(path, stamp, answer, size)
            if not 0 < len(answer.body) <= end - start:
                check_length(len(answer.body), end - start)
            return answer.body

        what = f"GET {self.display(path)} bytes={start}-{end - 1}"
        body = await self._call(request, what, path, hedge=True)
        self.stats.bytes_fetched += len(body)
        return cast(bytes, body)

    async def _check_version(self, path: str, stamp: str, answer: Answer, size: int) -> None:
        """Raise unless ``answer`` comes from the version of ``path`` read so far:
        the object has ``size`` bytes, and its tags agree with the first
        answers under this stamp (``_version_change``; kept in the disk tier,
        so a later run checks its requests against the bytes cached by
        earlier ones). An object replaced on the server behind the store's
        back would otherwise mix its new bytes with offsets (footers,
        indexes) and blocks of the old."""
        if answer.size not in (None, size):
            change: str | None = f"{size} bytes, now {answer.size}"
        else:
            change = await self._version_change(path, stamp, answer.tags)
        if change is None:
            return
        where = self.cache_config.cache_dir
        clear = f" and clear its cache directory {where}" if where else ""
        raise StorageError(
            f"{self.display(path)} changed on the server while it was being read "
            f"({change}): restart the reading process{clear}, so that no crop mixes "
            "bytes of the two versions"
        )

    async def _version_change(self, path: str, stamp: str, tags: tuple[str, ...]) -> str | None:
        """How an answer's ``tags`` (strongest first) say the object changed, or
        None. Each is compared with the first tag of its kind under ``stamp``
        (``_first_tag``), and the strongest kind an earlier answer carried too
        decides: an ``ETag`` that agrees names the same bytes, whatever the
        date (replicas' copies differ in mtime). Every kind is recorded from
        the first answer that carries it, the ``Last-Modified`` of an answer
        with an ``ETag`` too: a server that drops the ``ETag`` from later
        answers (some CDNs do) has them compared by that date, not take their
        date for the first. An answer that carries no kind an earlier one
        did has nothing to compare: its size alone is checked."""
        agreed = False
        for tag in tags:
            first, known = await self._first_tag(path, stamp, tag)
            if first != tag and not agreed:
                return f"version {first}, now {tag}"
            agreed = agreed or known
        return None

    async def _first_tag(self, path: str, stamp: str, tag: str) -> tuple[str, bool]:
        """The tag of the first answer about ``path`` under ``stamp`` that carried
        a tag of ``tag``'s kind (``ETag``, ``Last-Modified``): in this
        process, else the disk tier's (the first run's), else ``tag``, now
        recorded as the first; and whether an earlier answer carried one."""
        tags = self._state.get().tags.setdefault(path, {})
        kind = tag.partition(" ")[0]
        if (stamp, kind) in tags:
            return tags[(stamp, kind)], True
        first, known = tag, False
        disk = self._state.get().cache.disk
        if disk is not None:
            cache = self._state.get().cache
            key = cache.tag_key(path, stamp, kind)

            def lookup() -> tuple[bytes, bool]:
                found = disk.get(key)
                if found is None:
                    found = disk.get_or_add(key, tag.encode())  # another's, if it came first
                    known = found != tag.encode()
                else:
                    known = True
                disk.remove(cache.untagged_key(path, stamp))  # a tag is kept now
                return found, known

            found, known = await asyncio.get_running_loop().run_in_executor(None, lookup)
            first = found.decode()
        return tags.setdefault((stamp, kind), first), known

    def known_versions(self, path: str) -> dict[tuple[str, str], str]:
        """The version tags this process has seen for ``path`` (``_first_tag``),
        ``{(stamp, tag kind): tag}``: what a reader carries to another process."""
        state = self._state.peek()
        return dict(state.tags.get(path, {})) if state is not None else {}

    def learn_versions(self, path: str, versions: dict[tuple[str, str], str]) -> None:
        """Take ``versions`` (``known_versions`` of another process) as the
        first answers about ``path``, unless this process has its own (on
        the store loop)."""
        tags = self._state.get().tags.setdefault(path, {})
        for key, tag in versions.items():
            tags.setdefault(key, tag)

    async def _remembered(
        self,
        ask: Callable[[], Awaitable[bytes]],
        what: str,
        path: str,
        *fields: object,
        stamped: bool = True,
    ) -> bytes:
        """A metadata answer (listing, shard tail, footer read, size), kept in the
        disk tier when the store has one: a cache directory filled by ``streamer
        warmup`` then serves whole runs without a request. ``what`` and
        ``fields`` say which answer about ``path`` it is. An answer about an
        object is kept under its stamp, so a write through this store
        retires it with the blocks (``cache.py``); listings (not
        ``stamped``) are kept as they are until a write through this store
        into their folder (``_forget_listings``; delete the directory after
        changing a dataset some other way)."""
        cache = self._state.get().cache
        disk = cache.disk
        if disk is None:
            return await ask()
        stamp = await cache.stamp(path) if stamped else ""
        key = cache.disk_key(what, path, stamp, *fields)
        loop = asyncio.get_running_loop()
        found = await loop.run_in_executor(None, disk.get, key)
        if found is not None:
            self.stats.disk_hits += 1
            cache.note(key)
            return found
        answer = await ask()
        await loop.run_in_executor(None, disk.put, key, answer)
        cache.note(key)
        return answer

    async def _list_all(self, path: str) -> list[Entry]:
        """Every child of ``path``: one ``_list`` request, retried. A backend
        whose listings come in pages it must ask for one by one (``HTTPStore``'s
        index pages, ``S3Store``'s ``ListObjectsV2`` pages) overrides it: each
        page its own retried request."""
        what = f"list {self.display(path)}"
        return cast(list[Entry], await self._call(lambda c: self._list(c, path), what, path))

    async def _listing(self, path: str) -> list[Entry]:
        """The children of ``path``, remembered (``_remembered``), and so is a
        directory the store says is not there (``NotFound``: an HTTP 404, a
        file system's ``FileNotFoundError``), as an S3 prefix without keys
        is an empty listing: a warmed run of a dataset without
        ``seek_index/`` asks the store nothing. Failures a retry may mend
        are never kept."""

        async def ask() -> bytes:
            try:
                entries = await self._list_all(path)
            except NotFound as exc:
                bucket = isinstance(exc, MissingBucket)
                return json.dumps({"not found": redact(str(exc)), "bucket": bucket}).encode()
            return json.dumps([[e.name, e.is_dir, e.size, e.version] for e in entries]).encode()

        rows = json.loads(await self._remembered(ask, "list", path, stamped=False))
        if isinstance(rows, dict):
            raise (MissingBucket if rows["bucket"] else NotFound)(rows["not found"])
        # A name listed twice (pages that overlap) is one entry, the first:
        # twice, its shard was opened twice and every key in it doubled.
        entries = {row[0]: Entry(*row) for row in reversed(rows)}
        return sorted(entries.values(), key=lambda e: e.name)

    async def _tail(self, path: str, length: int) -> tuple[int, int, bytes]:
        """(start, object size, bytes from start to the end): the last ``length``
        bytes, or the whole object when it is shorter. An object that is not
        there is remembered as such too (a dataset's absent manifest: a
        warmed run asks the store nothing), until a write through the store
        gives it a new stamp."""

        async def request(client: Any) -> tuple[int, Answer]:
            start, answer = await self._suffix(client, path, length)
            assert answer.size is not None
            if len(answer.body) > answer.size - start or (not answer.body and start < answer.size):
                check_length(len(answer.body), answer.size - start)
            return start, answer

        async def ask() -> bytes:
            what = f"GET {self.display(path)} bytes=-{length}"
            try:
                start, answer = await self._call(request, what, path, hedge=True)
            except NotFound as exc:
                if isinstance(exc, MissingBucket):
                    raise
                return _NO_TAIL + redact(str(exc)).encode()
            size = answer.size
            assert size is not None
            await self._check_version(path, stamp, answer, size)
            self.stats.bytes_fetched += len(answer.body)
            body, got = answer.body, start + len(answer.body)
            if got < size:  # the answer said it carries less: the rest by ranges
                self.stats.partial_answers += 1
                body += await self._fetch_from(path, stamp, got, size, size)
            first = max(0, size - length)
            if start > first:  # it said it carries the last bytes alone: the front by ranges
                self.stats.partial_answers += 1
                body = await self._fetch_from(path, stamp, first, start, size) + body
                start = first
            return _TAIL_HEAD.pack(start, size) + body

        cache = self._state.get().cache
        stamp = await cache.stamp(path)  # before asking: the bytes are of this version
        answer = await self._remembered(ask, "tail", path, length)
        if answer.startswith(_NO_TAIL):
            raise NotFound(answer[len(_NO_TAIL) :].decode(errors="replace"))
        start, size = _TAIL_HEAD.unpack_from(answer)
        body = answer[_TAIL_HEAD.size :]
        cache.insert(path, stamp, size, start, body)
        return start, size, body

    async def _suffix(self, client: Any, path: str, length: int) -> tuple[int, Answer]:
        """``_get_tail``; when the server refuses a suffix longer than the object
        with 416 (rclone's S3 server, Ceph), the same bytes by the object's
        size: the 416's own (SeaweedFS, plain HTTP servers), else
        ``_get_stat``'s (moto and rclone name none). Never the whole object
        blindly: a 416 for another reason must not read gigabytes."""
        try:
            return await self._get_tail(client, path, length)
        except RangeNotSatisfiable as refused:
            size = refused.size
            if size is None:
                size = (await self._get_stat(client, path)).size
        start = max(0, size - length)
        if start == size:  # an empty object
            return start, Answer(b"", size)
        answer = await self._get_range(client, path, start, size)
        return start, answer if answer.size is not None else answer._replace(size=size)

    async def _stat(self, path: str) -> Stat:
        """``_get_stat``, remembered (``_remembered``) as ``[size, version]``
        under the kind ``stat``: the ``size`` entries an earlier streamer
        kept (the size alone) are left unread, never taken for an answer
        without a version (one request each, once)."""

        async def ask() -> bytes:
            what = f"size {self.display(path)}"
            stat = await self._call(lambda c: self._get_stat(c, path), what, path)
            return json.dumps(list(stat)).encode()

        size, version = json.loads(await self._remembered(ask, "stat", path))
        return Stat(int(size), version)

    async def _fetch_exact(self, path: str, start: int, end: int, size: int) -> bytes:
        """``_fetch`` for one-off metadata reads: remembered, never block-cached."""
        return await self._remembered(
            lambda: self._fetch(path, start, end, size), "range", path, start, end
        )

    async def _store(self, path: str, body: bytes) -> None:
        what = f"PUT {self.display(path)} ({len(body)} bytes)"
        await self._call(lambda c: self._put(c, path, body), what, path)
        self.stats.bytes_stored += len(body)
        # Blocks of an object this store replaced must not be served again,
        # nor listings of the folders it is in (a new object, or folder).
        await self._state.get().cache.forget(path)
        await self._forget_listings(path)

    async def _forget_listings(self, path: str) -> None:
        """Drop the disk tier's listings of each folder above ``path``: a
        listing is remembered as it was (``_listing``), and after a write the
        folder holds another object, its parent perhaps another folder (a
        job's last check listed a ``seek_index/`` it had just written as
        missing, and wrote no manifest)."""
        cache = self._state.get().cache
        disk = cache.disk
        if disk is None:
            return
        keys = []
        while "/" in path.rstrip("/"):
            path = path.rstrip("/").rsplit("/", 1)[0]
            keys += [cache.disk_key("list", path, ""), cache.disk_key("list", path + "/", "")]
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, lambda: [disk.remove(key) for key in keys])

    async def _read(self, path: str, size: int, ranges: Sequence[tuple[int, int]]) -> list:
        return await self._state.get().cache.read(path, size, ranges)

    async def _close_on_loop(self) -> None:
        """Fail the fetches still in flight (at exit nobody waits for them, and
        their retries must not hold the process), finish the disk-tier
        writes, then close the client."""
        state = self._state.peek()
        if state is not None and state.client is not None:
            await state.cache.cancel_fetches()
            await state.cache.drain()
            client, state.client = state.client, None
            await self._disconnect(client)


class RemoteReader(RangeReader):
    """One object of a ``RemoteStore``, read through the store's block cache."""

    def __init__(self, store: RemoteStore, path: str, size: int | None = None) -> None:
        self._store: RemoteStore | None = store
        self._recipe = (store.scheme, store._options)
        self.path = path
        self.url = store.display(path)
        self._known_size = size
        #: Version tags from the process that pickled it, not yet given to the store.
        self._carried: dict[tuple[str, str], str] = {}

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled with its size and the version tags this process has seen:
        a decode worker checks its answers against them. (It took its own
        first answer for the version: an object replaced between the
        parent's reads of its footer and the worker's of its bytes was read
        without a word, offsets of one version over bytes of the other.)"""
        versions = {**self._carried}
        if self._store is not None:
            versions.update(self._store.known_versions(self.path))
        return _unpickled_reader, (self._recipe, self.path, self.url, self._known_size, versions)

    @property
    def store(self) -> RemoteStore:
        """The reader's store; in another process, rebuilt from its options on
        first use. A decode worker handed a crop's bytes never reads through
        the store, and building one imports its client library (aiohttp and
        aiobotocore: 150 ms, which every worker's first remote crop paid)."""
        if self._store is None:
            from .registry import get_store

            self._store = cast(RemoteStore, get_store(*self._recipe))
        return self._store

    async def size(self) -> int:
        return await run_async(self._size_on_loop())

    async def stat(self) -> Stat:
        """As its size request says them (one request, or the disk tier's
        answer): for a source file of ``streamer pack`` known by its URL
        alone, whose version no listing said."""
        return await run_async(self._stat_on_loop())

    def size_sync(self) -> int:
        return run_sync(self._size_on_loop())

    async def read(self, offset: int, length: int) -> memoryview:
        return (await self.read_many([(offset, length)]))[0]

    def read_sync(self, offset: int, length: int) -> memoryview:
        return self.read_many_sync([(offset, length)])[0]

    async def read_many(self, ranges: Sequence[tuple[int, int]]) -> list[memoryview]:
        return await run_async(self._read_on_loop(ranges))

    def read_many_sync(self, ranges: Sequence[tuple[int, int]]) -> list[memoryview]:
        return run_sync(self._read_on_loop(ranges))

    def fetch_many_sync(self, ranges: Sequence[tuple[int, int]]) -> list[memoryview]:
        return run_sync(self._fetch_on_loop(ranges))

    def read_into_sync(self, target: memoryview, offset: int = 0) -> None:
        run_sync(self._copy_on_loop(target, offset))

    def read_tail_sync(self, length: int) -> tuple[int, memoryview]:
        start, _, body = run_sync(self._tail_on_loop(length))
        return start, memoryview(body).toreadonly()

    def _give_versions(self) -> None:
        if self._carried:
            self.store.learn_versions(self.path, self._carried)
            self._carried = {}

    async def _size_on_loop(self) -> int:
        self._give_versions()  # a size carried from another process: its versions too
        if self._known_size is None:
            await self._stat_on_loop()
        assert self._known_size is not None
        return self._known_size

    async def _stat_on_loop(self) -> Stat:
        self._give_versions()
        stat = await self.store._stat(self.path)
        self._known_size = stat.size
        return stat

    async def _tail_on_loop(self, length: int) -> tuple[int, int, bytes]:
        self._give_versions()
        start, size, body = await self.store._tail(self.path, length)
        self._known_size = size
        return start, size, body

    async def _read_on_loop(self, ranges: Sequence[tuple[int, int]]) -> list[memoryview]:
        size = await self._checked(ranges)
        return await self.store._read(self.path, size, ranges)

    async def _fetch_on_loop(self, ranges: Sequence[tuple[int, int]]) -> list[memoryview]:
        size = await self._checked(ranges)
        groups = _group(sorted(set(ranges)), EXACT_GAP)
        bodies = await asyncio.gather(
            *(self.store._fetch_exact(self.path, start, end, size) for start, end, _ in groups)
        )
        found = {}
        for (start, _, members), body in zip(groups, bodies, strict=True):
            view = memoryview(body).toreadonly()
            for offset, length in members:
                found[offset, length] = view[offset - start : offset - start + length]
        return [found[r] for r in ranges]

    async def _copy_on_loop(self, target: memoryview, offset: int) -> None:
        """``COPY_CHUNK`` requests, ``COPY_IN_FLIGHT`` at a time, each copied
        into its place in ``target`` as it arrives (never block-cached)."""
        size = await self._checked([(offset, len(target))])
        gate = asyncio.Semaphore(COPY_IN_FLIGHT)

        async def chunk(start: int) -> None:
            end = min(start + COPY_CHUNK, len(target))
            async with gate:
                body = await self.store._fetch(self.path, offset + start, offset + end, size)
            target[start:end] = body

        tasks = [asyncio.ensure_future(chunk(s)) for s in range(0, len(target), COPY_CHUNK)]
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:  # one failed: the others stop writing into ``target``
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _checked(self, ranges: Sequence[tuple[int, int]]) -> int:
        size = await self._size_on_loop()
        for offset, length in ranges:
            check_range(self.url, offset, length, size)
        return size


class _Place:
    """One request's place: a slot of its endpoint/prefix's ``Throttle``, then
    one of the store's ``max_concurrency``."""

    __slots__ = ("_limit", "_slot")

    def __init__(self, slot: Slot, limit: asyncio.Semaphore) -> None:
        self._slot = slot
        self._limit = limit

    async def __aenter__(self) -> None:
        await self._slot.__aenter__()
        try:
            await self._limit.acquire()
        except BaseException as exc:
            await self._slot.__aexit__(type(exc), exc, exc.__traceback__)
            raise

    async def __aexit__(self, kind: type | None, error: BaseException | None, tb: object) -> None:
        self._limit.release()
        await self._slot.__aexit__(kind, error, tb)


def _group(ranges: list[tuple[int, int]], gap: int) -> list[tuple[int, int, list[tuple[int, int]]]]:
    """Sorted ranges -> (start, end, members) groups whose members are at most ``gap`` apart."""
    groups: list[tuple[int, int, list[tuple[int, int]]]] = []
    for offset, length in ranges:
        if groups and offset - groups[-1][1] <= gap:
            start, end, members = groups[-1]
            groups[-1] = (start, max(end, offset + length), [*members, (offset, length)])
        else:
            groups.append((offset, offset + length, [(offset, length)]))
    return groups


def _body(source: Source) -> bytes:
    """The bytes to store: ``source`` itself, or the contents of the file it names."""
    if isinstance(source, (str, os.PathLike)):
        with open(source, "rb") as file:
            return file.read()
    return bytes(source)


def _pop(options: dict[str, Any], names: set[str]) -> dict[str, Any]:
    return {name: options.pop(name) for name in names & options.keys()}


def check_length(got: int, expected: int) -> None:
    """A body of ``got`` bytes where ``expected`` were due: a transient failure."""
    if got != expected:
        kind = "short" if got < expected else "over-long"
        raise TransientError(f"{kind} body: {got} bytes instead of {expected}")


@atexit.register
def _close_all() -> None:
    """Close open clients at exit, so aiohttp does not warn about open sessions."""
    for store in list(_live_stores):
        if store._state.peek() is not None:
            # Exiting anyway: a failed close must not mask the exit status.
            with contextlib.suppress(Exception):
                run_sync(store._close_on_loop())


def _unpickled_reader(
    recipe: tuple[str, dict[str, Any]],
    path: str,
    url: str,
    size: int | None,
    versions: dict[tuple[str, str], str] | None = None,
) -> RemoteReader:
    """A ``RemoteReader`` from its pickle: the store stays unbuilt until used."""
    reader = RemoteReader.__new__(RemoteReader)
    reader._store, reader._recipe = None, recipe
    reader.path, reader.url, reader._known_size = path, url, size
    reader._carried = dict(versions or {})
    return reader
