"""One pass over (the rest of) an epoch: planner -> prefetch -> decode -> in-order queue.

Everything here runs on the store loop (``storage.loop``), where the block
cache and connection pools live, so prefetching awaits the cache directly.
The stages, each bounded:

* the planner walks the epoch's order from the resume position and takes a
  *slot* per crop (at most ``prefetch`` crops are between planning and the
  consumer);
* each slot gets a task that plans its crop in a thread, prefetches its
  bytes (remote shards) and waits for a decode worker. Crops are planned
  concurrently: planning may open a shard or read an index from the store,
  and one crop waiting on that must not hold up the crops behind it on
  shards already open;
* the emitter hands decoded crops to a bounded memory stream strictly in
  plan order (the order is part of the determinism contract, and resuming is
  then a single position), freeing the slot.

A slow consumer fills the stream, the emitter blocks, slots run out and the
planner stops: nothing is fetched or decoded beyond ``prefetch + queue_size``
crops ahead of the consumer.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import anyio
import anyio.to_thread

from ..decode.crop import Crop, CropJob
from ..errors import StreamerError
from ..formats.job import DecodeStats
from .pool import WorkerPool
from .stages import is_mapped, prefetch
from .stats import StreamerStats
from .tasks import Failure, Task, attempt

__all__ = ["Item", "Run"]

log = logging.getLogger(__name__)


@dataclass
class _Slot:
    position: int
    began: float = field(default_factory=time.perf_counter)
    done: anyio.Event = field(default_factory=anyio.Event)
    result: Crop | Failure | None = None
    latency: float = 0.0


@dataclass(frozen=True)
class Item:
    """What the consumer receives, in plan order."""

    position: int
    result: Crop | Failure
    latency: float


class Run:
    """The pipeline for plan positions ``[first, last)``; ``plan_at(position)`` plans one."""

    def __init__(
        self,
        plan_at: Callable[[int], CropJob | Failure],
        first: int,
        last: int,
        *,
        pool: WorkerPool | None,
        prefetch: int,
        queue_size: int,
        stats: StreamerStats,
    ) -> None:
        self._plan_at = plan_at
        self._first, self._last = first, last
        self._pool = pool
        self._stats = stats
        self._room = anyio.Semaphore(prefetch)
        self._slots_in, self._slots_out = anyio.create_memory_object_stream[_Slot](prefetch)
        self._out_in, self._out = anyio.create_memory_object_stream[Item](queue_size)
        self._error: BaseException | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._main())

    async def next(self) -> Item | None:
        """The next crop or failure in plan order; None at the end of the pass."""
        try:
            return await self._out.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            if self._error is not None:
                raise self._error from None
            return None

    async def stop(self) -> None:
        """Cancel every stage and wait until they are gone (workers mid-crop are killed)."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
            await asyncio.wait([self._task])
        self._out.close()

    # -- stages ---------------------------------------------------------------

    async def _main(self) -> None:
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(self._emit)
                async with self._slots_in:
                    for position in range(self._first, self._last):
                        await self._room.acquire()
                        slot = _Slot(position)
                        await self._slots_in.send(slot)
                        group.start_soon(self._work, slot)
        except Exception as exc:
            log.error("the crop pipeline failed: %s", exc)
            self._error = exc
        finally:
            self._out_in.close()

    async def _work(self, slot: _Slot) -> None:
        job = await anyio.to_thread.run_sync(self._plan_at, slot.position)
        try:
            if isinstance(job, Failure):
                slot.result = job
                return
            if is_mapped(job):
                self._stats.bytes_read += job.nbytes
            slot.result, decoded = await self._decode(await prefetch(job))
            self._stats.decode.add(decoded)
        except StreamerError as exc:  # storage failures, a worker that died twice
            slot.result = Failure.of(exc, job.request.key)
        finally:
            slot.latency = time.perf_counter() - slot.began
            slot.done.set()

    async def _decode(self, task: Task) -> tuple[Crop | Failure, DecodeStats]:
        if self._pool is None:
            return await anyio.to_thread.run_sync(attempt, task)
        try:
            return await self._pool.run(task)
        finally:  # a crop that failed with WorkerDied replaced workers too
            self._stats.worker_restarts = self._pool.restarts

    async def _emit(self) -> None:
        async with self._out_in:
            async for slot in self._slots_out:
                await slot.done.wait()
                assert slot.result is not None
                await self._out_in.send(Item(slot.position, slot.result, slot.latency))
                self._room.release()
