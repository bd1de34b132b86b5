"""One pass over (the rest of) an epoch: planner -> prefetch -> decode -> in-order queue.

Everything here runs on the store loop (``storage.loop``), where the block
cache and connection pools live, so prefetching awaits the cache directly.
The stages, each bounded:

* the planner walks the epoch's order from the resume position and takes a
  *slot* per crop (at most ``prefetch`` crops are between planning and the
  consumer);
* slots go in *batches* of up to ``MAX_BATCH`` (``batch_size``): each batch
  gets a task that plans its crops, prefetches their bytes (remote shards)
  and hands them to one decode worker in one message, which answers them in
  one (the parent's cost per crop is mostly per message and wake-up, so a
  batch divides it). With a remote source crops are
  planned in threads, concurrently: planning may open a shard or read an
  index from the store, and one crop waiting on that must not hold up the
  crops behind it on shards already open. With local sources only
  (``plan_in_loop``) a crop is planned on the loop itself: it reads memory
  maps, and a hop to a thread and back would cost more than the plan;
* the emitter hands decoded crops to a bounded memory stream strictly in
  plan order (the order is part of the determinism contract, and resuming is
  then a single position), freeing the slot. Ready results go over without
  a pause between them, so the consumer takes a batch in one hop.

A slow consumer fills the stream, the emitter blocks, slots run out and the
planner stops: nothing is fetched or decoded beyond ``prefetch + queue_size``
crops (and a batch taken by the consumer's side) ahead of the consumer.

Failures come in two kinds. Whatever goes wrong with one crop (its plan,
its bytes, its decode, whatever the exception) becomes that crop's
``Failure``, handed over in its place; the consumer decides what to do with
it. Whatever goes wrong with the machinery itself (the worker pool past its
restart budget, a bug in a stage) ends the pass: the crops already handed
over stay handed over, and ``next()`` raises that error once the crops
before it are consumed, never an early end of the pass. A store that gave
up on an outage (``StoreUnavailable``, after its ``give_up_after``) ends the
pass the same way, as soon as any stage or worker meets it: the outage
must end the iteration within the one budget, not wait for the crops before
it in plan order, retried meanwhile by other processes on clocks of their
own (``tasks.end_if_store_gave_up``).
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import TypeVar

import anyio
import anyio.to_thread

from ..decode.crop import Crop, CropJob
from ..formats.job import DecodeStats
from ..storage.loop import CallGroup, retrieve_outcome
from ..storage.retry import StoreUnavailable
from .pool import WorkerPool
from .stages import is_mapped, prefetch
from .stats import StreamerStats
from .tasks import Failure, Task, attempt, end_if_store_gave_up, failure_of, first_error
from .turns import Turns

__all__ = ["CLOSED", "Item", "Run"]

log = logging.getLogger(__name__)

T = TypeVar("T")

#: What a consumer of a pass that ``stop`` ended gets (``Streamer.close()``
#: from another thread while a loop runs).
CLOSED = "the Streamer was closed in the middle of a pass"


#: The most crops in one batch (one message to a decode worker and one back).
MAX_BATCH = 4

#: How long a stopped pass waits for its in-process decoding thread to
#: finish its crop (one crop: a remote one may wait on its store) before
#: it logs what still runs and returns.
DECODING_STOP_TIMEOUT = 3.0


def batch_size(prefetch: int, workers: int) -> int:
    """Crops per batch. The parent's cost is mostly per batch (a message each
    way, a wake-up, a task), so bigger batches cost it less per crop; but the
    crops in flight (``prefetch``) must hold two batches per worker, one
    being decoded and the next ready, or workers wait between batches (and
    a batch never needs more room than ``prefetch``: no deadlock)."""
    return max(1, min(MAX_BATCH, prefetch // (2 * max(workers, 1))))


class _DecodingThread:
    """The thread of a pass that decodes in-process (no worker pool): one
    crop at a time, started at the pass's first batch, gone when the pass is.

    A stopped pass waits for it (``close``), bounded: a pass left with
    ``break`` (or closed) used to leave its crop decoding in an abandoned
    worker thread a moment after the loop was left, and a fork then (a
    DataLoader's workers starting) copied FFmpeg's state mid-call. Between
    the crops of a batch it looks at ``stopping``: a stopped pass waits for
    the crop under way, not the batch."""

    _numbers = itertools.count(1)

    def __init__(self) -> None:
        self.name = f"streamer-decode-{next(self._numbers)}"
        self.stopping = threading.Event()
        self.doing = ""  # what the thread decodes now, for the warning
        self._jobs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._exited: concurrent.futures.Future[None] = concurrent.futures.Future()

    async def run(self, function: Callable[[], T]) -> T:
        """``function()`` in the thread; cancelling the caller abandons it
        (the thread finishes it, or its crop under way, and discards it)."""
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[T] = loop.create_future()

        def job() -> None:
            try:
                outcome: tuple[T | None, BaseException | None] = (function(), None)
            except BaseException as exc:
                outcome = (None, exc)
            with contextlib.suppress(RuntimeError):  # the loop is gone: nobody waits
                loop.call_soon_threadsafe(_settle, answer, outcome)

        if self._thread is None:
            self._thread = threading.Thread(target=self._serve, name=self.name, daemon=True)
            self._thread.start()
        self._jobs.put(job)
        return await answer

    def finish(self) -> None:
        """No more jobs: the thread ends after the one under way."""
        if self._thread is not None:
            self._jobs.put(None)

    async def close(self, timeout: float) -> None:
        """Wait (up to ``timeout`` seconds) until the thread has ended; a
        WARNING names what it still decodes if it has not."""
        if self._thread is None:
            return
        self.stopping.set()
        self.finish()
        exited = asyncio.wrap_future(self._exited)
        if not (await asyncio.wait([exited], timeout=timeout))[0]:
            log.warning(
                "the pass stopped, but its decoding thread %s still runs after %g s: %s",
                self.name,
                timeout,
                self.doing or "between crops",
            )
            return
        self._thread.join()  # it has returned from its last job: a moment at most

    def _serve(self) -> None:
        try:
            while (job := self._jobs.get()) is not None:
                job()
        finally:
            self._exited.set_result(None)


def _settle(answer: asyncio.Future[T], outcome: tuple[T | None, BaseException | None]) -> None:
    if answer.cancelled():
        return
    result, error = outcome
    if error is not None:
        answer.set_exception(error)
    else:
        answer.set_result(result)  # type: ignore[arg-type]


def _attempt_all(
    tasks: list[Task], thread: _DecodingThread
) -> list[tuple[Crop | Failure, DecodeStats]]:
    """In-process decoding of a batch: one hop to a thread for all of it; a
    store that gave up ends it (``end_if_store_gave_up``), so does a pass
    that stopped (the batch is discarded)."""
    done = []
    for task in tasks:
        if thread.stopping.is_set():
            break
        thread.doing = _crop_name(task.job)
        done.append(attempt(task, copy=True))
        thread.doing = ""
        end_if_store_gave_up(done[-1][0])
    return done


def _crop_name(job: CropJob) -> str:
    return f"the crop of {job.request.key!r} in shard {job.episode.shard!r}"


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
        plan_in_loop: bool = False,
    ) -> None:
        self._plan_at = plan_at
        self._plan_in_loop = plan_in_loop
        # In-process decoding (no pool) runs one crop at a time: PyAV holds
        # the GIL, so decoding threads only contend for it (measured: 1.3-1.7x
        # the CPU of a plain read_crop loop with a prefetch of 8).
        self._in_process = Turns(1)
        self._decoding = _DecodingThread()
        self._first, self._last = first, last
        self._pool = pool
        self._batch = batch_size(prefetch, pool.size if pool is not None else 1)
        self._stats = stats
        self._room = anyio.Semaphore(prefetch)
        self._slots_in, self._slots_out = anyio.create_memory_object_stream[_Slot](prefetch)
        self._out_in, self._out = anyio.create_memory_object_stream[Item](queue_size)
        self._ready: collections.deque[Item] = collections.deque()
        self._error: BaseException | None = None
        self._task: asyncio.Task[None] | None = None
        self._received = first  # the position after the last item received
        #: The receive under way from ``_out``, kept across a cancelled ``next``.
        self._receiving: asyncio.Future[Item] | None = None
        #: The planners' store calls, cancelled when the pass ends: a planner
        #: abandoned by a pass that failed or was closed kept retrying its
        #: request (a shard's footer) for the whole outage budget.
        self._calls = CallGroup()

    def start(self) -> None:
        if self._pool is not None:
            self._pool.renew_budget()
        self._task = asyncio.get_running_loop().create_task(self._main())

    async def next(self) -> Item | None:
        """The next crop or failure in plan order; None at the end of the pass.
        Raises the error that ended the pass early, after the crops before it
        (a ``RuntimeError`` when it ended early without one: a pass cut
        short must never look like the end of the epoch).
        The items already handed over behind it are taken along (up to a
        batch), for ``take_ready``."""
        if self._ready:
            return self._ready.popleft()
        try:
            item = await self._receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            # The stream is closed only once the error (if any) is recorded.
            if self._error is None and self._received != self._last:
                self._error = RuntimeError(
                    f"the crop pipeline ended at position {self._received} of "
                    f"[{self._first}, {self._last}) without an error"
                )
            if self._error is not None:
                raise self._error from None
            return None
        self._received = item.position + 1
        while len(self._ready) < self._batch:
            try:
                ready = self._out.receive_nowait()
            except (anyio.WouldBlock, anyio.EndOfStream, anyio.ClosedResourceError):
                break
            self._ready.append(ready)
            self._received = ready.position + 1
        return item

    async def _receive(self) -> Item:
        """The next item of ``_out``. A wait for it runs in a task of its own,
        which a cancelled caller leaves going: the next call takes what it
        received. anyio's ``receive`` hands an item to the waiting receiver
        and drops it when the receiver is cancelled before it wakes, and a
        consumer's cancellation reaches this loop from its own thread at any
        moment (``run_async``): a crop was lost, never yielded nor skipped,
        and the epoch ended as if complete."""
        if self._receiving is None:
            try:
                return self._out.receive_nowait()
            except anyio.WouldBlock:
                pass
            self._receiving = asyncio.ensure_future(self._out.receive())
            self._receiving.add_done_callback(retrieve_outcome)  # its caller may be gone
        receiving = self._receiving
        try:
            item = await asyncio.shield(receiving)
        except asyncio.CancelledError:
            # The caller was cancelled: the receive goes on for the next call
            # (unless it was the one cancelled, the loop shutting down).
            if receiving.cancelled():
                self._receiving = None
            raise
        except BaseException:
            self._receiving = None
            raise
        self._receiving = None
        return item

    def take_ready(self) -> Item | None:
        """The next item if ``next`` already took it (None: ask ``next``).
        Safe from the consumer's thread: a crop already received is handed
        over without a hop to the loop (a wake-up of each thread per crop)."""
        try:
            return self._ready.popleft()
        except IndexError:
            return None

    async def stop(self) -> None:
        """Cancel every stage and wait until they are gone (workers mid-crop are
        killed). A consumer still waiting (``close()`` from another thread)
        gets an error, not the end of the pass, also when every crop is
        decoded and queued (the end would drop them, and the pass was over)."""
        if self._error is None:
            self._error = RuntimeError(CLOSED)
        if self._task is not None and not self._task.done():
            self._task.cancel()
            await asyncio.wait([self._task])
        self._out.close()
        # A crop being decoded in-process ends before the pass does: nothing
        # of the pass runs once the loop is left (a fork next copies no thread
        # mid-FFmpeg call).
        await self._decoding.close(DECODING_STOP_TIMEOUT)

    # -- stages ---------------------------------------------------------------

    async def _main(self) -> None:
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(self._emit)
                async with self._slots_in:
                    for first in range(self._first, self._last, self._batch):
                        slots = []
                        for position in range(first, min(first + self._batch, self._last)):
                            await _acquire(self._room)
                            slot = _Slot(position)
                            self._slots_in.send_nowait(slot)  # room for every slot with room
                            slots.append(slot)
                        group.start_soon(self._work, slots)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # a planner's SystemExit too: the consumer gets it
            self._error = first_error(exc)
            if isinstance(self._error, StoreUnavailable):  # the store said so (WARNING)
                log.debug("the pass ends: the store gave up: %s", self._error)
            else:
                name = type(self._error).__name__
                log.error("the crop pipeline failed: %s: %s", name, self._error)
        finally:
            self._calls.cancel()
            self._decoding.finish()
            self._out_in.close()

    async def _work(self, slots: list[_Slot]) -> None:
        """Fill ``slots`` with their results. A batch that raises (or is
        cancelled) leaves them unfinished: its error ends the pass, and the
        task group cancels ``_emit``, which must not wake to a slot without
        a result (it did, when a Ctrl-C cancelled the batch first, and the
        pass was logged as failed with an empty ``AssertionError``)."""
        results = await self._produce([slot.position for slot in slots])
        now = time.perf_counter()
        for slot, result in zip(slots, results, strict=True):
            slot.result, slot.latency = result, now - slot.began
            slot.done.set()

    async def _produce(self, positions: list[int]) -> list[Crop | Failure]:
        """The crops at ``positions`` (one batch), or their failures; raises
        only for the machinery. With local sources they are planned one after
        the other on the loop; otherwise concurrently, each in a thread (a
        crop waiting on its shard's opening must not hold up the others)."""
        if self._pool is None and self._plan_in_loop:
            return await self._in_thread(positions)
        results: list[Crop | Failure | Task | None] = [None] * len(positions)
        if self._plan_in_loop:
            for number, position in enumerate(positions):
                results[number] = await self._prepare(position)
        else:

            async def prepare(number: int, position: int) -> None:
                results[number] = await self._prepare(position)
                end_if_store_gave_up(results[number])  # cancels the batch's other crops

            async with anyio.create_task_group() as group:
                for number, position in enumerate(positions):
                    group.start_soon(prepare, number, position)
        tasks = [(number, task) for number, task in enumerate(results) if isinstance(task, Task)]
        if tasks:
            answers = await self._decode([task for _, task in tasks], rank=positions[0])
            for (number, _), (result, decoded) in zip(tasks, answers, strict=True):
                self._stats.decode.add(decoded)
                results[number] = result
            for result, _ in answers:
                end_if_store_gave_up(result)
        done = [result for result in results if isinstance(result, Crop | Failure)]
        assert len(done) == len(positions)  # every crop is planned, then decoded or failed
        return done

    async def _in_thread(self, positions: list[int]) -> list[Crop | Failure]:
        """In-process decoding of local crops: each planned and decoded in the
        decoding thread, the batch in one hop. Planned on the loop instead,
        every crop would have the two threads take turns at the GIL
        (measured: 0.3-0.4 ms of CPU per crop on the loop's side)."""

        thread = self._decoding

        def plan_and_decode() -> list[tuple[Crop | Failure, DecodeStats, int]]:
            done = []
            for position in positions:
                if thread.stopping.is_set():
                    break  # the pass stopped: the batch is discarded
                job = self._planned(position)
                if isinstance(job, Failure):
                    done.append((job, DecodeStats(), 0))
                    continue
                # The task reads its bytes itself: a failed read is the crop's failure.
                thread.doing = _crop_name(job)
                result, decoded = attempt(Task(job), copy=True)
                thread.doing = ""
                done.append((result, decoded, job.nbytes if is_mapped(job) else 0))
            return done

        async with self._in_process.turn(positions[0]):
            answers = await thread.run(plan_and_decode)
        for _, decoded, mapped in answers:
            self._stats.decode.add(decoded)
            self._stats.bytes_read += mapped
        return [result for result, _, _ in answers]

    def _planned(self, position: int) -> CropJob | Failure:
        """The crop's plan, or its failure (a planner that raised included)."""
        try:
            return self._plan_at(position)
        except Exception as exc:
            return failure_of(exc, None, None)

    async def _prepare(self, position: int) -> Task | Failure:
        """The decode task of the crop at ``position`` (its bytes prefetched), or its failure."""
        if self._plan_in_loop:
            job = self._planned(position)
        else:
            planned = self._calls.bind(self._planned)
            job = await anyio.to_thread.run_sync(planned, position, abandon_on_cancel=True)
        if isinstance(job, Failure):
            return job
        try:
            task = await prefetch(job)
        except Exception as exc:
            return failure_of(exc, job.request.key, job.episode.shard)
        if is_mapped(job):
            self._stats.bytes_read += job.nbytes
        return task

    async def _decode(
        self, tasks: list[Task], *, rank: int
    ) -> list[tuple[Crop | Failure, DecodeStats]]:
        if self._pool is None:  # waited for when stopped (``_DecodingThread``)
            async with self._in_process.turn(rank):
                return await self._decoding.run(partial(_attempt_all, tasks, self._decoding))
        return await self._pool.run_batch(tasks, rank=rank)

    async def _emit(self) -> None:
        """Hand the slots' results over in plan order. Results that are
        ready go over without a pause between them (the ``nowait`` calls
        do not yield to the loop), so a batch reaches the consumer at once
        and is taken in one hop (``next``)."""
        with self._slots_out:
            while True:
                try:
                    slot = self._slots_out.receive_nowait()
                except anyio.WouldBlock:
                    try:
                        slot = await self._slots_out.receive()
                    except anyio.EndOfStream:
                        return
                except anyio.EndOfStream:
                    return
                if not slot.done.is_set():
                    await slot.done.wait()
                assert slot.result is not None
                item = Item(slot.position, slot.result, slot.latency)
                try:
                    self._out_in.send_nowait(item)
                except anyio.WouldBlock:
                    await self._out_in.send(item)
                self._room.release()


async def _acquire(semaphore: anyio.Semaphore) -> None:
    """Take ``semaphore``, yielding to the loop only when it must wait."""
    try:
        semaphore.acquire_nowait()
    except anyio.WouldBlock:
        await semaphore.acquire()
