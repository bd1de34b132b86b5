"""Prefetch-only runs: the Streamer's planner and prefetch stages, no decoding.

``warmup`` walks the same plan a Streamer would (same sampler, seed, epoch,
partition, sample rate) and fetches every planned byte through the store's
block cache; with a ``cache_dir`` the disk tier keeps them, together with
the listings and shard footers the dataset was opened with, so a later run
over the same plan and cache directory sends no request to the store.

As in the Streamer, a crop whose data is bad is skipped and counted, but a
store that fails (``StorageError``, after its retries) ends the warmup with
that error: an outage must not pass for a warm cache. Neither may a disk
tier that did not keep what the warmup fetched (disk full, or a size limit
smaller than the run): that is a ``StorageError`` too, once every crop is
fetched.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

import anyio
import anyio.to_thread

from ..decode.crop import CropJob
from ..errors import StorageError
from ..storage.base import Store
from ..storage.loop import run_sync
from ..storage.remote import RemoteReader
from .stages import is_mapped, plan, warm
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
    stores, planned = await _plan_all(streamer, concurrency)
    for failure in planned:
        if isinstance(failure, Failure) and failure.storage:
            raise failure.error()
    _check_room(stores, planned)
    jobs = [p for p in planned if isinstance(p, CropJob)]
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
    report.cached = await _check_kept(jobs)
    report.fetched = sum(store.stats.bytes_fetched for store in sources) - fetched_before
    report.seconds = asyncio.get_running_loop().time() - began
    return report


async def _check_kept(jobs: list[CropJob]) -> int:
    """The bytes of the blocks the disk tier holds for ``jobs``; fail unless it
    holds every block the warmup fetched: entries
    another process evicted (its smaller size limit) or removed (the
    directory cleared mid-run) are lost to the next run too, and this
    process's own ``disk_tier_problem`` knows nothing of them."""
    stores: dict[int, tuple[Store, dict[str, tuple[RemoteReader, list[tuple[int, int]]]]]] = {}
    for job in jobs:
        blob = job.episode.blob
        if not isinstance(blob.reader, RemoteReader):
            continue
        store, objects = stores.setdefault(id(blob.reader.store), (blob.reader.store, {}))
        _, ranges = objects.setdefault(blob.reader.path, (blob.reader, []))
        planned = job.plan.ranges if job.plan is not None else ((0, blob.length),)
        ranges.extend((blob.offset + at, n) for at, n in planned)
    cached = 0
    for store, objects in stores.values():
        tier = store.disk_tier()
        if tier is None:
            continue
        missing = blocks = 0
        for path, (reader, ranges) in objects.items():
            lacking, of, held = await store.missing_on_disk(path, await reader.size(), ranges)
            missing, blocks, cached = missing + lacking, blocks + of, cached + held
        if missing:
            raise StorageError(
                f"warmup incomplete: disk cache {tier[0]}: {missing} of {blocks} blocks "
                "fetched are not in it at the end (removed, or evicted by another process "
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


async def _plan_all(
    streamer: Streamer, concurrency: int
) -> tuple[list[Store], list[CropJob | Failure]]:
    """Every crop's plan and the store it reads from, in ``concurrency``
    threads: planning opens shards and reads indexes, one round trip after
    another for each new shard."""
    crops = await anyio.to_thread.run_sync(len, streamer)  # may open shards: blocking
    stores: list[Store | None] = [None] * crops
    out: list[CropJob | Failure | None] = [None] * crops
    positions = iter(range(crops))  # shared: each thread takes the next position

    def plan_some() -> None:
        for position in positions:
            dataset, request = streamer.request(position)
            stores[position], out[position] = dataset.store, plan(dataset, request)

    limiter = anyio.CapacityLimiter(concurrency)
    async with anyio.create_task_group() as group:
        for _ in range(min(concurrency, crops)):
            group.start_soon(partial(anyio.to_thread.run_sync, plan_some, limiter=limiter))
    return [s for s in stores if s is not None], [p for p in out if p is not None]


def _check_room(stores: list[Store], planned: list[CropJob | Failure]) -> None:
    """Fail before fetching anything when a store's disk tier is smaller than
    the distinct bytes its crops read: the warmup could only end in "its size
    limit evicted entries" after downloading them all."""
    jobs: dict[int, list[CropJob]] = defaultdict(list)
    for store, job in zip(stores, planned, strict=True):
        if isinstance(job, CropJob) and not is_mapped(job):
            jobs[id(store)].append(job)
    for store in {id(s): s for s in stores}.values():
        tier = store.disk_tier()
        if tier is None or not jobs[id(store)]:
            continue
        directory, limit = tier
        needed = _distinct_bytes(jobs[id(store)])
        if needed > limit:
            raise StorageError(
                f"warmup needs at least {needed} bytes of disk cache but {directory} "
                f"may hold {limit} (cache_dir_bytes, --cache-dir-bytes): "
                "raise the limit or warm fewer crops"
            )


def _distinct_bytes(jobs: list[CropJob]) -> int:
    """The bytes ``jobs`` read, each counted once (crops overlap, and share
    blobs): a lower bound of what a disk tier of aligned blocks keeps."""
    spans: dict[str | None, list[tuple[int, int]]] = defaultdict(list)
    for job in jobs:
        blob = job.episode.blob
        ranges = job.plan.ranges if job.plan is not None else ((0, blob.length),)
        spans[blob.shard].extend((blob.offset + at, blob.offset + at + n) for at, n in ranges)
    total = 0
    for intervals in spans.values():
        covered = 0  # the end of what is counted so far
        for start, end in sorted(intervals):
            total += max(0, end - max(start, covered))
            covered = max(covered, end)
    return total
