"""Prefetch-only runs: the Streamer's planner and prefetch stages, no decoding.

``warmup`` walks the same plan a Streamer would (same sampler, seed, epoch,
partition, sample rate) and fetches every planned byte through the store's
block cache; with a ``cache_dir`` the disk tier keeps them, together with
the listings and shard footers the dataset was opened with, so a later run
over the same plan and cache directory sends no request to the store.

As in the Streamer, a crop whose data is bad is skipped and counted, but a
store that fails (``StorageError``, after its retries) ends the warmup with
that error: an outage must not pass for a warm cache. Neither may a disk
tier that did not keep what the warmup fetched or read (disk full, a size
limit smaller than the run, another process's smaller limit evicting its
blocks or the metadata of the dataset's opening): that is a
``StorageError`` too, once every crop is fetched.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial

import anyio
import anyio.to_thread

from ..decode.crop import CropJob
from ..errors import StorageError
from ..shard.decompressed import DecompressedValues
from ..storage.base import Store
from ..storage.loop import run_sync
from ..storage.remote import RemoteReader, RemoteStore
from .stages import is_mapped, warm
from .streamer import Streamer
from .tasks import Failure, first_error

__all__ = ["WarmupReport", "warmup"]

log = logging.getLogger(__name__)


@dataclass
class WarmupReport:
    """``crops`` warmed, the crops skipped for bad data by reason (the error's
    class name, as ``StreamerStats.skipped``), each also logged with its key
    and shard; ``bytes``: the crops' bytes (each crop's, overlaps counted
    again), ``fetched``: bytes the warmup fetched from the stores (metadata
    too; 0 when the directory held everything already), ``cached``: bytes
    of the blocks holding the crops that the disk tier holds at the end."""

    crops: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    bytes: int = 0
    seconds: float = 0.0
    fetched: int = 0
    cached: int = 0


def warmup(
    streamer: Streamer,
    *,
    concurrency: int = 16,
    progress: Callable[[int], None] | None = None,
    total: Callable[[int], None] | None = None,
) -> WarmupReport:
    """Fetch the bytes of every crop in ``streamer``'s current epoch (its
    partition) into the block cache, ``concurrency`` crops at a time.

    ``total(bytes)`` is called once the plan is known, ``progress(bytes)``
    after each crop: a progress bar's hooks.
    """
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, not {concurrency}")
    return run_sync(_warmup(streamer, concurrency, progress, total))


async def _warmup(
    streamer: Streamer,
    concurrency: int,
    progress: Callable[[int], None] | None,
    total: Callable[[int], None] | None,
) -> WarmupReport:
    report = WarmupReport()
    began = asyncio.get_running_loop().time()
    since = time.time()
    sources = {id(d.store): d.store for d, _ in streamer.sources}.values()
    fetched_before = sum(store.stats.bytes_fetched for store in sources)
    try:
        planned = await _plan_all(streamer, concurrency)
    except Exception as exc:
        raise first_error(exc) from None
    for failure in planned:
        if isinstance(failure, Failure) and failure.storage:
            raise failure.error()
    jobs = [p for p in planned if isinstance(p, CropJob)]
    objects = _objects(jobs)
    await _check_room(objects)
    for failure in planned:
        if isinstance(failure, Failure):
            _skip(report, failure)
    if total is not None:
        total(sum(job.nbytes for job in jobs))
    pending = iter(jobs)

    async def fetch_some() -> None:  # ``concurrency`` of these share ``pending``
        for job in pending:
            nbytes = 0 if is_mapped(job) else await warm(job)
            report.crops += 1
            report.bytes += nbytes
            if progress is not None:
                progress(job.nbytes)

    try:
        async with anyio.create_task_group() as group:
            for _ in range(min(concurrency, len(jobs))):
                group.start_soon(fetch_some)
    except Exception as exc:
        raise first_error(exc) from None
    for store in sources:
        await store.drain()
        problem = store.disk_tier_problem(since)
        if problem is not None:
            raise StorageError(f"warmup incomplete: {problem}")
    report.cached = await _check_kept(sources, objects)
    report.fetched = sum(store.stats.bytes_fetched for store in sources) - fetched_before
    report.seconds = asyncio.get_running_loop().time() - began
    return report


#: Per store (by id): the store, and per object path its reader and the
#: absolute byte ranges the crops read.
_Objects = dict[int, tuple[RemoteStore, dict[str, tuple[RemoteReader, list[tuple[int, int]]]]]]


def _objects(jobs: list[CropJob]) -> _Objects:
    """The byte ranges ``jobs`` read from network stores, by store and object."""
    objects: _Objects = {}
    for job in jobs:
        fetched = _fetched(job)
        if fetched is None:
            continue  # mapped (or in memory): nothing to fetch or cache
        reader, read = fetched
        store = reader.store
        _, by_path = objects.setdefault(id(store), (store, {}))
        _, ranges = by_path.setdefault(reader.path, (reader, []))
        ranges.extend(read)
    return objects


def _fetched(job: CropJob) -> tuple[RemoteReader, list[tuple[int, int]]] | None:
    """The network object ``job``'s bytes come from and its absolute ranges
    that reading them fetches, or ``None`` for bytes fetched from no store.
    A cell of an IPC-compressed shard is read from its record batch's
    decompressed values: what is fetched is that whole compressed buffer of
    the shard, whatever part of the cell the crop reads."""
    blob = job.episode.blob
    reader = blob.reader
    if isinstance(reader, DecompressedValues):
        if not isinstance(reader.source, RemoteReader):
            return None
        return reader.source, [(reader.offset, reader.length)]
    if not isinstance(reader, RemoteReader):
        return None
    planned = job.read_ranges if job.plan is not None else ((0, blob.length),)
    return reader, [(blob.offset + at, n) for at, n in planned]


async def _check_kept(sources: Iterable[Store], objects: _Objects) -> int:
    """The bytes of the blocks the disk tier holds for the crops; fail unless
    it holds every block the warmup fetched and every other entry its
    stores read or wrote (stamps, listings, shard tails and footers, made
    when the dataset was opened: the oldest, so the first a size limit
    evicts): entries another process evicted (its smaller size limit) or
    removed (the directory cleared mid-run) are lost to the next run too,
    which would ask the store for them, and this process's own
    ``disk_tier_problem`` knows nothing of them."""
    cached = 0
    for store in sources:
        tier = store.disk_tier()
        if tier is None:
            continue
        missing = blocks = 0
        _, by_path = objects.get(id(store), (store, {}))
        for path, (reader, ranges) in by_path.items():
            lacking, of, held = await store.missing_on_disk(path, await reader.size(), ranges)
            missing, blocks, cached = missing + lacking, blocks + of, cached + held
        lost, entries = await store.missing_metadata_on_disk()
        if missing or lost:
            raise StorageError(
                f"warmup incomplete: disk cache {tier[0]}: {missing} of {blocks} blocks "
                f"fetched and {lost} of {entries} other entries (stamps, listings, shard "
                "footers) are not in it at the end (removed, or evicted by another process "
                "with a smaller cache_dir_bytes): run the warmup again, with nothing else "
                "clearing or shrinking the directory"
            )
    return cached


def _skip(report: WarmupReport, failure: Failure) -> None:
    report.skipped[failure.reason] = report.skipped.get(failure.reason, 0) + 1
    log.warning(
        "warmup: skipping a crop of key %r (shard %s): %s: %s",
        failure.key,
        failure.shard or "unknown",
        failure.reason,
        failure.message,
    )


async def _plan_all(streamer: Streamer, concurrency: int) -> list[CropJob | Failure]:
    """Every crop's plan, in ``concurrency`` threads: planning opens shards and
    reads indexes, one round trip after another for each new shard. A store
    that gave up (``StoreUnavailable``) ends it at once: the other threads
    went on planning, each shard's opening one more request to the dead
    store, and the warmup raised only once they all had."""
    crops = await anyio.to_thread.run_sync(len, streamer)  # may open shards: blocking
    out: list[CropJob | Failure | None] = [None] * crops
    positions = iter(range(crops))  # shared: each thread takes the next position
    ended = threading.Event()

    def plan_some() -> None:
        for position in positions:
            if ended.is_set():
                return
            result = out[position] = streamer.job(position)
            if isinstance(result, Failure) and result.store_gave_up:
                ended.set()
                raise result.error()

    limiter = anyio.CapacityLimiter(concurrency)
    run = partial(anyio.to_thread.run_sync, plan_some, limiter=limiter, abandon_on_cancel=True)
    try:
        async with anyio.create_task_group() as group:
            for _ in range(min(concurrency, crops)):
                group.start_soon(run)
    finally:
        ended.set()  # the threads left behind take no more positions
    return [p for p in out if p is not None]


async def _check_room(objects: _Objects) -> None:
    """Fail before fetching anything when a store's disk tier is smaller than
    the blocks holding the bytes its crops read: the warmup could only end
    in "its size limit evicted entries" after downloading them all."""
    for store, by_path in objects.values():
        tier = store.disk_tier()
        if tier is None:
            continue
        directory, limit = tier
        needed = 0
        for reader, ranges in by_path.values():
            needed += _block_bytes(ranges, await reader.size(), store.cache_config.block_size)
        if needed > limit:
            raise StorageError(
                f"warmup needs at least {needed} bytes of disk cache but {directory} "
                f"may hold {limit} (cache_dir_bytes, --cache-dir-bytes): "
                "raise the limit or warm fewer crops"
            )


def _block_bytes(ranges: list[tuple[int, int]], size: int, block_size: int) -> int:
    """The bytes of the aligned blocks of an object of ``size`` bytes that
    hold ``ranges``, each counted once (crops overlap, and share blocks): a
    lower bound of what the disk tier keeps for them."""
    bs = block_size
    blocks = {b for at, n in ranges if n for b in range(at // bs, (at + n - 1) // bs + 1)}
    return sum(min(size, (b + 1) * bs) - b * bs for b in blocks)
