"""``streamer.Streamer``: crops of an epoch, decoded in worker processes, as an iterator.

The pipeline itself (``run.py``) always runs on the process's store loop, a
background thread; ``async for`` (asyncio, trio) awaits its results without
blocking the caller's loop, and ``for`` blocks on them. So the same object
works in a script, under an async framework and in Jupyter (whose own loop
is already running).

Lifetime: worker processes start with the first crop (or on entering
``with`` / ``async with``) and stop when the context exits, when a plain
``for`` loop ends, raises or is broken out of, when ``async for`` raises, or
on ``close()`` / ``aclose()``. A bare ``async for`` that stops early leaves
them idle until ``aclose()`` (or garbage collection, or exit): prefer
``async with``. An iterator abandoned until the interpreter exits is closed
at exit without waiting on the store loop (whose thread is gone by then).

Every crop of the plan is yielded, counted in ``stats.skipped`` (a data
failure under ``on_error="skip"``), or the iteration raises; ``position``
counts only the crops handed over, so resuming after an error redoes the
rest.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import sys
import threading
import time
import weakref
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Mapping, Sequence
from typing import Any, Generic, Literal, TypeVar

import anyio
import anyio.to_thread
import numpy as np
import sniffio

from ..dataset.dataset import Dataset
from ..decode.crop import Crop, CropJob, CropRequest
from ..decode.resample import DEFAULT_QUALITY, check_quality, check_sample_rate
from ..interrupts import interrupts_held
from ..storage.base import Store
from ..storage.loop import background_loop, run_async
from ..timing import record
from .arguments import whole_number
from .episodes import Episodes
from .keywords import check_keywords, checked_keywords, keyword_names
from .metadata import EpisodeFields
from .mix import Mix, check_allow_incomplete, check_storage_options, open_source
from .order import EpochPlan, plan_epoch
from .pool import WorkerPool, check_workers, default_restart_budget
from .run import CLOSED, Item, Run
from .samplers import Sampler
from .sharding import Intervals, Partition, Split, merge_intervals, resolve_partition
from .stages import plan
from .stats import StreamerStats
from .streaks import FAILURES_IN_A_ROW, FailureStreaks
from .tasks import Failure, failure_of

__all__ = ["Streamer", "check_mix", "check_order", "check_streamer_options"]

log = logging.getLogger(__name__)

T = TypeVar("T")
_END = object()


class Streamer:
    """An epoch of crops from a dataset (or a ``Mix``), chosen by a sampler.

    ``data`` is a ``Dataset``, a URL (opened with ``storage_options``, the
    store options of ``streamer.open_dataset``, and ``allow_incomplete``:
    serve a dataset whose pack left planned shards missing, with a warning,
    instead of raising ``IncompleteDatasetError``) or a ``Mix``; an open
    ``Dataset`` or a ``Mix`` takes neither (``ValueError``).
    Crops are ``Crop`` objects (``audio`` float32 ``(channels,
    samples)``, ``key``, ``start``, ``end``, ``sample_rate``, ``shard``) at
    ``sample_rate`` (default: each episode's own; libsoxr at
    ``resample_quality``), downmixed with ``mono``, zero-padded to full
    length with ``pad``.

    Crops carry labels: ``columns`` names fields of the dataset's other
    column directories (``"speaker"``, or ``"labels/speaker"``), joined to
    each crop's episode (``crop.fields``); ``supervisions`` names a column
    of segments (``start``, ``end``, any other fields, optional ``words``
    with their own times) of which those overlapping the crop come with it,
    times relative to its start (``crop.supervisions``). ``crop.source``
    names its dataset (a ``Mix``'s item name, else its URL).

    The order is a function of (seed, epoch) and this consumer's partition:
    ``rank``/``world_size`` (default: torch.distributed, else ``RANK`` /
    ``WORLD_SIZE``, else one rank) and ``worker``/``num_workers`` (default:
    the DataLoader worker). Every rank gets the same number of crops
    (``even``; the remainder is dropped, or with ``drop_last=False`` filled
    by repeating crops) and DataLoader workers take turns by whole batches
    of ``loader_batch_size`` (the DataLoader's), so the batches come out in
    the rank's order (``sharding.py``). Within a shard, episodes' crops are
    interleaved (``interleave``) and ``shuffle_window`` trades locality for
    more mixing (see ``order.py``); ``max_crops`` keeps only the epoch's first
    crops; ``crops_per_epoch`` fixes the epoch's length with any sampler
    (more rounds of it when it gives fewer).

    ``workers`` decode processes (0: decode in threads of this process);
    ``prefetch`` crops may be planned, fetched or decoded ahead of the
    consumer, plus ``queue_size`` decoded ones waiting for it (default:
    ``default_prefetch``, deeper when a source is remote).
    ``on_error="skip"`` logs and counts a crop whose data failed
    (``stats.skipped``, by the error's class name) and goes on; ``"raise"``
    raises its error. A store that fails (``StorageError``, after its own
    retries) is not bad data: its error is raised either way; nor is a run
    of ``max_failures_in_a_row`` skipped crops of one source with none
    yielded between them (``TooManyFailures``; None: no limit). The workers
    are restarted when they die, up to ``max_worker_restarts`` deaths per
    pass over an epoch (default ``default_restart_budget(workers)``) plus
    one per 1000 crops decoded; past that the iteration raises
    ``WorkerDied``.

    Each completed pass advances ``epoch`` by one; ``state_dict()`` /
    ``load_state_dict()`` resume in the middle of one (docs/pipeline.md).

    ``on_skip``, when set, is called with the position (in this consumer's
    plan) and reason of every crop skipped, once ``state_dict()`` has moved
    past it: a consumer that must keep every crop's place (a DataLoader's
    batches, ``streamer.torch``) learns of the ones that will not come.
    """

    @checked_keywords
    def __init__(
        self,
        data: Dataset | str | os.PathLike[str] | Mix,
        sampler: Sampler,
        *,
        sample_rate: int | None = None,
        mono: bool = False,
        pad: bool = False,
        resample_quality: str = DEFAULT_QUALITY,
        workers: int | None = None,
        prefetch: int | None = None,
        queue_size: int = 16,
        seed: int = 0,
        epoch: int = 0,
        rank: int | None = None,
        world_size: int | None = None,
        worker: int | None = None,
        num_workers: int | None = None,
        even: bool = True,
        drop_last: bool = True,
        loader_batch_size: int = 1,
        shuffle_window: int = 1000,
        interleave: bool = True,
        max_crops: int | None = None,
        crops_per_epoch: int | None = None,
        on_error: Literal["skip", "raise"] = "skip",
        max_failures_in_a_row: int | None = FAILURES_IN_A_ROW,
        max_worker_restarts: int | None = None,
        storage_options: Mapping[str, Any] | None = None,
        allow_incomplete: bool = False,
        columns: Sequence[str] = (),
        supervisions: str | None = None,
    ) -> None:
        prefetch, max_crops, crops_per_epoch, max_worker_restarts = _counts(
            prefetch=prefetch,
            max_crops=max_crops,
            crops_per_epoch=crops_per_epoch,
            max_worker_restarts=max_worker_restarts,
        )
        queue_size = whole_number("queue_size", queue_size, 0)
        shuffle_window = whole_number("shuffle_window", shuffle_window, 0)
        loader_batch_size = whole_number("loader_batch_size", loader_batch_size, 1)
        rank, world_size, worker, num_workers = _counts(
            rank=rank, world_size=world_size, worker=worker, num_workers=num_workers
        )
        if on_error not in ("skip", "raise"):
            raise ValueError(f"on_error must be 'skip' or 'raise', not {on_error!r}")
        check_storage_options(data, storage_options)
        check_allow_incomplete(data, allow_incomplete)
        if isinstance(data, Mix):
            self.sources, self.source_names = data.sources, data.names
            self.mix: list[list[Any]] | None = data.items
        else:
            self.sources = [(open_source(data, storage_options, allow_incomplete), 1.0)]
            self.source_names = [self.sources[0][0].url]
            self.mix = None
        if isinstance(columns, str):
            raise TypeError(f"columns is a list of names, not the string {columns!r}")
        self.columns, self.supervisions = list(columns), supervisions
        self._fields: list[EpisodeFields] | None = None
        self._carried: dict[int, tuple[dict[str, Any], Any]] = {}
        self.sampler = sampler
        self.sample_rate, self.mono, self.pad = check_sample_rate(sample_rate), mono, pad
        self.resample_quality = check_quality(resample_quality)
        self.workers = default_workers() if workers is None else check_workers(workers)
        self._stores = _remote_stores(self.sources)
        self.prefetch = prefetch or default_prefetch(self.workers, remote=bool(self._stores))
        self.queue_size = queue_size
        self.seed, self.epoch = whole_number("seed", seed), whole_number("epoch", epoch, 0)
        self.partition: Partition = resolve_partition(rank, world_size, worker, num_workers)
        self.split = Split(even=even, drop_last=drop_last, batch_size=loader_batch_size)
        self.shuffle_window, self.interleave = shuffle_window, interleave
        self.max_crops = max_crops
        if crops_per_epoch is not None and max_crops is not None:
            raise ValueError("give max_crops or crops_per_epoch, not both")
        self.crops_per_epoch = crops_per_epoch
        self.on_error = on_error
        if max_failures_in_a_row is not None:
            max_failures_in_a_row = whole_number("max_failures_in_a_row", max_failures_in_a_row, 1)
        self._streaks = FailureStreaks(max_failures_in_a_row)
        self.max_worker_restarts = (
            default_restart_budget(self.workers)
            if max_worker_restarts is None
            else max_worker_restarts
        )
        self._position = 0
        self._dropped_noted = False
        self.on_skip: Callable[[int, str], None] | None = None
        self._episodes: list[Episodes] | None = None
        self._plans: dict[int, tuple[EpochPlan, np.ndarray]] = {}
        self._epochs: dict[int, tuple[int, str]] = {}  # epoch -> (total, digest)
        self._stats = StreamerStats()
        self._baseline = {id(s): s.stats.snapshot() for s in self._stores}
        self._entered = False
        self._pool_ready: asyncio.Future[None] | None = None  # its start (``_start_pool``)
        self._iteration: object | None = None  # the sync iteration under way
        # The ``async for`` that asked for the last crop (None: a bare ``anext(s)``)
        self._async_loop: weakref.ref[_AsyncLoop] | None = None
        self._closed_under: object | None = None  # the ``for`` loop ``close()`` ended
        self._claiming = threading.Lock()
        self._taking = False  # a crop is being awaited (on the store loop)
        self._held: Crop | object | None = None  # taken, not received (``_hold``)
        self._resources = _Resources()
        weakref.finalize(self, self._resources.close_soon)

    def __repr__(self) -> str:
        return (
            f"Streamer({self.sources[0][0].url if len(self.sources) == 1 else 'Mix'}, "
            f"{self.sampler!r}, epoch={self.epoch}, partition={self.partition})"
        )

    # -- the plan ---------------------------------------------------------------

    def plan(self, epoch: int | None = None) -> EpochPlan:
        """This consumer's crops of ``epoch`` (default: the current one), in order."""
        return self._consumer_plan(epoch)[0]

    def _consumer_plan(self, epoch: int | None = None) -> tuple[EpochPlan, np.ndarray]:
        """This consumer's crops and, for each, its index in the rank's share."""
        epoch = self.epoch if epoch is None else epoch
        if epoch not in self._plans:
            whole = self._whole_plan(epoch)
            positions, share_index = self.split.positions(len(whole), self.partition)
            self._plans = {epoch: (whole[positions], share_index)}
        return self._plans[epoch]

    def _whole_plan(self, epoch: int) -> EpochPlan:
        """Every rank's crops of ``epoch``; its size and digest are noted as it
        is planned (``total``, ``digest``)."""
        whole = plan_epoch(
            [
                (episodes, weight)
                for episodes, (_, weight) in zip(self.episodes(), self.sources, strict=True)
            ],
            self.sampler,
            seed=self.seed,
            epoch=epoch,
            window=self.shuffle_window,
            max_crops=self.max_crops,
            crops_per_epoch=self.crops_per_epoch,
            interleave=self.interleave,
            warn=self.partition.slot == 0,
            names=self.source_names,
        )
        self._epochs[epoch] = (len(whole), whole.digest(self.episodes(), self.mix))
        return whole

    def total(self, epoch: int | None = None) -> int:
        """Crops in the whole of ``epoch`` (every rank's), before the split."""
        return self._epoch(epoch)[0]

    def digest(self, epoch: int | None = None) -> str:
        """A digest of the whole of ``epoch``'s order (``EpochPlan.digest``)."""
        return self._epoch(epoch)[1]

    def _epoch(self, epoch: int | None) -> tuple[int, str]:
        epoch = self.epoch if epoch is None else epoch
        if epoch == self.epoch:
            self._consumer_plan(epoch)  # plans the whole epoch once for both
        if epoch not in self._epochs:
            self._whole_plan(epoch)
        return self._epochs[epoch]

    def __len__(self) -> int:
        """Crops in this consumer's share of the current epoch."""
        return len(self.plan())

    def episodes(self) -> list[Episodes]:
        """Each source's episodes (read once: keys, shards, durations)."""
        if self._episodes is None:
            warn = self.partition.slot == 0  # every process reads them: the first says it
            self._episodes = [
                Episodes.of(dataset, self.sample_rate, warn=warn) for dataset, _ in self.sources
            ]
        return self._episodes

    def request(self, position: int, epoch: int | None = None) -> tuple[Dataset, CropRequest]:
        """The dataset and crop request at ``position`` of this consumer's plan
        (a ``ValueError`` when the planned times make no request: ``CropRequest``)."""
        source, key, start, end = self._planned(position, epoch)
        return self.sources[source][0], self._request(key, start, end)

    def _request(self, key: str, start: float, end: float) -> CropRequest:
        return CropRequest(
            key,
            start,
            end,
            sample_rate=self.sample_rate,
            mono=self.mono,
            pad=self.pad,
            resample_quality=self.resample_quality,
        )

    def _planned(self, position: int, epoch: int | None = None) -> tuple[int, str, float, float]:
        """The source, key, start and end planned at ``position``: what a
        skipped crop's log line names even when they make no request."""
        plan = self.plan(epoch)
        source, row = int(plan.source[position]), int(plan.episode[position])
        key = self.episodes()[source].keys[row]
        return source, key, float(plan.start[position]), float(plan.end[position])

    def source_of(self, position: int) -> str:
        """The source (``crop.source``) of the crop at ``position`` of this
        consumer's plan: a ``Mix`` item's name, else the dataset's URL."""
        return self.source_names[int(self.plan().source[position])]

    def job(self, position: int) -> CropJob | Failure:
        """The crop at ``position`` planned (``stages.plan``), or why it cannot
        be. Times that make no request (a segment or manifest row ending at
        1e12 s) are that crop's failure, with its key and shard, as bad data
        is: raised from the middle of a pass, they ended it under
        ``on_error="skip"`` after being counted as skipped."""
        source, key, start, end = self._planned(position)
        dataset = self.sources[source][0]
        try:
            request = self._request(key, start, end)
        except ValueError as exc:
            return failure_of(exc, key, dataset.locate(key)[0])
        return plan(dataset, request)

    def _plan_at(self, position: int) -> CropJob | Failure:
        """Plan the crop at ``position`` and read what it carries (in a planner
        thread when a source is remote: a remote column is a request; on the
        store loop when all are local, ``Run``'s ``plan_in_loop``). A crop whose labels cannot be
        read fails like one whose audio cannot."""
        job = self.job(position)
        if isinstance(job, Failure):
            return job
        try:
            self._carried[position] = self._carry(position)
        except Exception as exc:
            return failure_of(exc, job.request.key, job.episode.shard)
        return job

    def _carry(self, position: int) -> tuple[dict[str, Any], list[dict[str, Any]] | None]:
        """The fields and supervisions of the crop at ``position``."""
        plan = self.plan()
        source, row = int(plan.source[position]), int(plan.episode[position])
        fields: dict[str, Any] = {}
        if plan.fields is not None and plan.fields[position]:
            fields |= plan.fields[position]
        if self._fields is None:
            return fields, None
        episode = self._fields[source]
        fields |= episode.fields(row)
        start, end = float(plan.start[position]), float(plan.end[position])
        return fields, episode.overlapping(row, start, end)

    def _prepare(self) -> int:
        """The plan's length, with the columns to join found (a thread's work)."""
        if self._fields is None and (self.columns or self.supervisions):
            self._fields = [
                EpisodeFields(episodes, self.columns, self.supervisions)
                for episodes in self.episodes()
            ]
        length = len(self.plan())
        if not self._dropped_noted:
            self._dropped_noted = True
            self._note_dropped()
        return length

    def _note_dropped(self) -> None:
        """Count the crops of this pass that no rank serves (``stats.dropped``)
        or that are served twice to fill the ranks (``stats.repeated``), on
        the last rank's first worker only: every rank would count the same
        ones. Say so when the dropped ones are all this rank had: a rank
        whose epoch is empty must not look like one that finished it."""
        p = self.partition
        if p.worker:
            return
        total = self.total()
        dropped = self.split.dropped(total, p.world_size)
        if p.rank == p.world_size - 1:
            self._stats.dropped += dropped
            self._stats.repeated += self.split.repeated(total, p.world_size)
        if not dropped:
            return
        if not len(self.split.rank_share(total, p.rank, p.world_size)):
            log.warning(
                "epoch %d: %d crops left for %d ranks: the even split (drop_last=True) "
                "leaves them all out, rank %d serves none; drop_last=False repeats crops "
                "to fill every rank, even=False serves them on fewer ranks",
                self.epoch,
                dropped,
                p.world_size,
                p.rank,
            )

    # -- state ------------------------------------------------------------------

    def set_epoch(self, epoch: int) -> None:
        """Start ``epoch`` from its beginning on the next iteration."""
        self._require_idle()
        self._start_pass(whole_number("epoch", epoch, 0), 0, (), 0)

    def _start_pass(self, epoch: int, position: int, done: Intervals, consumed: int) -> None:
        self.epoch, self._position = epoch, position
        self.split = dataclasses.replace(self.split, done=done, consumed=consumed)
        self._plans, self._carried = {}, {}
        self._dropped_noted = False

    def state_dict(self) -> dict[str, Any]:
        """Where this consumer is: every crop before ``position`` of ``epoch`` was
        yielded (or skipped, or raised under ``on_error="raise"``), none after.
        Crops prefetched but not yet consumed are not counted, so resuming
        repeats none and skips none; after a storage or pipeline error the
        crops from the one that failed on are still to do, and ``epoch``
        advances only when a pass reaches its end.

        ``done`` (global positions consumed before this pass) and ``start``
        (crops of the rank's share consumed before it) say where the pass
        began; ``consumed`` counts the rank's crops up to the last one this
        consumer handed over. ``total`` and ``plan`` (``digest()``) say
        which order these are places in."""
        p = self.partition
        return {
            "seed": self.seed,
            "epoch": self.epoch,
            "total": self.total(),
            "plan": self.digest(),
            "position": self._position,
            "rank": p.rank,
            "world_size": p.world_size,
            "worker": p.worker,
            "num_workers": p.num_workers,
            "batch_size": self.split.batch_size,
            "even": self.split.even,
            "drop_last": self.split.drop_last,
            "done": [list(run) for run in self.split.done],
            "start": self.split.consumed,
            "consumed": self.consumed(),
            "mix": self.mix,
        }

    def consumed(self, position: int | None = None) -> int:
        """Crops of this rank's share handed over once this consumer has handed
        over its first ``position`` (default: as many as it has)."""
        position = self._position if position is None else position
        if not position:
            return self.split.consumed
        return int(self._consumer_plan()[1][position - 1]) + 1

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from a ``state_dict()`` taken by the same consumer (same seed
        and partition; the sampler and data must be the same too)."""
        self._require_idle()
        _check_keys(state)
        p = self.partition
        mine = {"seed": self.seed, "rank": p.rank, "world_size": p.world_size}
        mine |= {"worker": p.worker, "num_workers": p.num_workers}
        mine |= {"batch_size": self.split.batch_size}
        mine |= {"even": self.split.even, "drop_last": self.split.drop_last}
        defaults = {"batch_size": 1, "even": True, "drop_last": True}
        theirs = {name: state.get(name, defaults.get(name)) for name in mine}
        differ = [name for name in mine if theirs[name] != mine[name]]
        if differ:

            def settings(of: dict[str, Any]) -> str:
                return ", ".join(f"{name}={of[name]!r}" for name in differ)

            raise ValueError(
                f"state was taken with {settings(theirs)}, this Streamer has "
                f"{settings(mine)}: resume with {settings(theirs)}, as it was taken (a state "
                "resumed under other settings would repeat or skip crops)"
            )
        epoch = whole_number("the state's epoch", state["epoch"], 0)
        check_mix(state, self.mix)
        total = self.total(epoch)
        check_order(state, total, self.digest(epoch))
        done = merge_intervals(state.get("done", ()))
        position = whole_number("the state's position", state["position"])
        start = whole_number("the state's start", state.get("start", 0))
        self._check_within(total, done, start, position)
        self._start_pass(epoch, position, done, start)

    def _check_within(self, total: int, done: Intervals, start: int, position: int) -> None:
        """Refuse a resume point outside its epoch (an edited state): a
        position before 0 repeated crops, a ``start`` or ``done`` past the
        epoch ended it at once as if served."""
        if any(not 0 <= first < last <= total for first, last in done):
            raise ValueError(f"state's done intervals lie outside the epoch's {total} crops")
        p = self.partition
        split = dataclasses.replace(self.split, done=done, consumed=max(start, 0))
        share = len(split.rank_share(total, p.rank, p.world_size))
        if not 0 <= start <= share:
            raise ValueError(
                f"state says {start} crops of this rank's share were consumed before "
                f"its pass, but it has {share}"
            )
        mine = len(split.positions(total, p)[0])
        if not 0 <= position <= mine:
            raise ValueError(f"state is at crop {position} of this consumer's {mine}")

    @property
    def stats(self) -> StreamerStats:
        """Counters so far (see ``StreamerStats``)."""
        requests = bytes_fetched = hits = 0
        for store in self._stores:
            now, then = store.stats.snapshot(), self._baseline[id(store)]
            requests += now["requests"] - then["requests"]
            bytes_fetched += now["bytes_fetched"] - then["bytes_fetched"]
            hits += now["hits"] + now["disk_hits"] - then["hits"] - then["disk_hits"]
        stats = self._stats
        stats.requests, stats.cache_hits = requests, hits
        if self._episodes is not None:  # the shards were opened: the bad ones are known
            stats.skipped_shards = {
                name: dataset.bad_shards
                for name, (dataset, _) in zip(self.source_names, self.sources, strict=True)
                if dataset.bad_shards
            }
        view = StreamerStats(**{**stats.__dict__, "bytes_read": stats.bytes_read + bytes_fetched})
        return view

    @property
    def worker_pids(self) -> list[int]:
        """Process ids of the decode workers running now."""
        pool = self._resources.pool
        return pool.pids if pool is not None else []

    # -- async use --------------------------------------------------------------

    def __aiter__(self) -> AsyncIterator[Crop]:
        """An ``async for``'s own iterator over the pass: ``aclose()`` while
        it is under way ends it (its next step raises ``RuntimeError``),
        while the Streamer goes on (a new ``async for``, or ``anext(s)``)."""
        return _AsyncLoop(self)

    async def __anext__(self) -> Crop:
        """The next crop (``await anext(s)``): the Streamer itself is no loop
        that ``aclose()`` ends; it goes on from the last crop yielded."""
        return await self._anext(None)

    async def _anext(self, loop: _AsyncLoop | None) -> Crop:
        """The next crop for ``loop`` (None: a bare ``anext(s)``)."""
        self._async_loop = None if loop is None else weakref.ref(loop)  # see ``_mark_closed``
        if self._iteration is not None:
            raise RuntimeError(_BUSY)
        handover = _Handover()
        try:
            item = await _awaiting(self._next(handover))
        except BaseException:
            if self._unreceived(handover):
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(handover.settled.wait)
            raise
        if item is _END:
            self._async_loop = None
            if not self._entered:
                await _awaiting(self._shutdown())
            raise StopAsyncIteration
        return item  # type: ignore[return-value]

    async def __aenter__(self) -> Streamer:
        self._entered = True
        await _awaiting(self._start_pool())
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self._entered = False
        await self.aclose()

    async def aclose(self) -> None:
        """Stop the pipeline and every worker process; the ``async for`` under
        way (the one that asked for the last crop: another task's, or this
        one's own) ends with ``RuntimeError``, as ``close`` says. The
        Streamer goes on: a new ``async for`` or ``anext(s)`` continues
        from the last crop yielded."""
        self._mark_closed()
        await _awaiting(self._shutdown())

    # -- sync use ---------------------------------------------------------------

    def __iter__(self) -> Iterator[Crop]:
        """The crops of the pass. One iteration at a time: a second one
        started while this one is under way (another ``for``, thread or
        task) raises ``RuntimeError`` and leaves this one as it was."""
        iteration = self._claim()
        try:
            while True:
                item = self._ready_crop()
                if item is None:
                    handover = _Handover()
                    try:
                        item = _blocking(self._next(handover))
                    except BaseException:
                        if self._unreceived(handover):
                            # Held: a Ctrl-C inside ``Condition.wait`` breaks
                            # its lock ("release unlocked lock"), and a wait cut
                            # short let the next loop start while this one's
                            # request still ran (refused as already iterated).
                            with interrupts_held():
                                handover.settled.wait()
                        raise
                if item is _END:
                    return
                yield item  # type: ignore[misc]
        finally:
            try:
                self._end_iteration()
            finally:  # a second Ctrl-C in there: the Streamer refused every loop after
                self._iteration = None if self._iteration is iteration else self._iteration
                if self._closed_under is iteration:
                    self._closed_under = None

    def _claim(self) -> object:
        """Mark a sync iteration as under way (``RuntimeError`` if one is):
        two consumers would take turns at one pass's crops and restart it
        under each other (the pool closed under a batch, crops of the next
        epoch handed to the one still in this one)."""
        with self._claiming:
            if self._iteration is not None or self._taking:
                raise RuntimeError(_BUSY)
            self._iteration = object()
            return self._iteration

    def _ready_crop(self) -> Crop | None:
        """The next crop if the pass already received it (``Run.take_ready``),
        handed over on the consumer's thread: no hop to the store loop and
        back, which costs both threads a wake-up. None: ask the loop."""
        run = self._resources.run
        if run is not None and self._held is not None:
            return self._take_held()  # type: ignore[return-value]
        while run is not None:
            item = run.take_ready()
            if item is None:
                return None
            try:
                crop = self._accept(item)
            except Exception:
                _blocking(self._stop_run() if self._entered else self._shutdown())
                raise
            if crop is not None:
                return crop
        return None

    def _end_iteration(self) -> None:
        """Stop the pass (and the workers, outside ``with``) when a ``for``
        loop ends. Waiting on the store loop is impossible when the generator
        is finalized during interpreter shutdown (that thread no longer runs:
        an abandoned iterator would hang the exit) or on that loop's own
        thread (a garbage collection there): then stop without waiting."""
        if self._resources.run is None and self._resources.pool is None:
            # Nothing of this process's to stop (a pass that ended, or a
            # parent's iteration inherited by a fork and collected here):
            # the store loop is not needed, and a collection while this
            # process starts that loop would wait on it.
            self._held = None
            return
        if sys.is_finalizing() or _on_store_thread():
            self._resources.close_soon()
            return
        _blocking(self._shutdown() if not self._entered else self._stop_run())

    def __enter__(self) -> Streamer:
        self._entered = True
        _blocking(self._start_pool())
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._entered = False
        self.close()

    def close(self) -> None:
        """Stop the pipeline and every worker process. A ``for`` loop under
        way (another thread's) ends with ``RuntimeError``: it used to start
        the pass again, with new workers, as if nothing had been closed. A
        new loop goes on from where that one stopped."""
        self._mark_closed()
        _blocking(self._shutdown())

    def _mark_closed(self) -> None:
        """Note the loop under way (``for`` or ``async for``) as closed: its
        next request raises instead of starting the pass again (``_take``)."""
        if self._iteration is not None:
            self._closed_under = self._iteration
            return
        loop = self._async_loop() if self._async_loop is not None else None
        if loop is not None:
            loop.closed = True

    def _asker_closed(self) -> bool:
        """Whether the loop asking for a crop (the ``for`` loop, else the
        ``async for`` of the request) is one ``close()`` / ``aclose()`` ended."""
        if self._iteration is not None:
            return self._closed_under is self._iteration
        loop = self._async_loop() if self._async_loop is not None else None
        return loop is not None and loop.closed

    # -- on the store loop ------------------------------------------------------

    async def _next(self, handover: _Handover) -> Crop | object:
        """The next crop, or ``_END``. On an error the pass is stopped (and,
        outside ``with``, the workers): the caller is not coming back for it.
        Awaited by two consumers at once (tasks, threads) it raises
        ``RuntimeError`` for the second and leaves the pass alone.

        What is taken goes through ``handover``: a caller interrupted as it
        arrives (a cancelled task, a timeout, Ctrl-C) never receives it,
        so it is held for the caller's next request (``_unreceived``)."""
        if not handover.begin():
            return _END  # the caller gave up before this began: nobody looks
        try:
            if self._taking:
                raise RuntimeError(_BUSY)
            self._taking = True
            try:
                item = self._take_held()
                if item is None:
                    item = await self._take()
            except Exception:
                await (self._stop_run() if self._entered else self._shutdown())
                raise
            finally:
                self._taking = False
            if not handover.deliver(item):
                self._hold(item)
            return item
        finally:
            handover.settled.set()

    def _unreceived(self, handover: _Handover) -> bool:
        """The caller was interrupted while waiting for ``handover``: what
        the pass took for it, if anything, is held for its next request.
        True when the caller must wait for ``handover.settled`` (the request
        began on the store loop and may still be ending): until then the
        position, and a new request, would find it under way."""
        began, item = handover.abandon()
        if item is not None:
            self._hold(item)
        return began

    def _hold(self, item: Crop | object) -> None:
        """Keep a crop (or the end of the pass) that its caller never
        received, to hand over next: ``position`` goes back before it. A
        crop taken and dropped under a cancellation was lost to the consumer
        while ``state_dict()`` counted it as consumed."""
        if item is not _END:
            self._position -= 1
            self._stats.yielded -= 1
        self._held = item

    def _take_held(self) -> Crop | object | None:
        """The crop (or end) held by ``_hold``, handed over now; else None."""
        item, self._held = self._held, None
        if item is not None and item is not _END:
            self._position += 1
            self._stats.yielded += 1
        return item

    async def _take(self) -> Crop | object:
        resources = self._resources
        if resources.run is None:
            if self._asker_closed():
                raise RuntimeError(CLOSED)  # this loop's pass was closed: not a new one
            total = await anyio.to_thread.run_sync(self._prepare)
            await self._start_pool()
            resources.run = Run(
                _weakly(self._plan_at),
                self._position,
                total,
                pool=resources.pool,
                prefetch=self.prefetch,
                queue_size=self.queue_size,
                stats=self._stats,
                plan_in_loop=not self._stores,
            )
            resources.run.start()
        run = resources.run  # ``close()`` may drop it while this waits: its error says so
        while True:
            began = time.perf_counter()
            with record("queue_wait"):
                item = await run.next()
            self._stats.queue_wait_s += time.perf_counter() - began
            if item is None:
                await self._stop_run()
                self._start_pass(self.epoch + 1, 0, (), 0)
                return _END
            crop = self._accept(item)
            if crop is not None:
                return crop

    def _accept(self, item: Item) -> Crop | None:
        """Hand ``item`` over: the crop with what it carries, counted, and the
        position moved past it; None for a failure that is skipped (counted),
        raised for one that is not (``_fail``)."""
        carried = self._carried.pop(item.position, ({}, None))
        if isinstance(item.result, Failure):
            self._fail(item.position, item.result)
            return None
        self._position = item.position + 1
        self._stats.yielded += 1
        self._stats.add_latency(item.latency)
        crop = item.result
        share_index = self._consumer_plan()[1]
        crop.position, crop.epoch = int(share_index[item.position]), self.epoch
        crop.fields, crop.supervisions = carried
        crop.source = self.source_of(item.position)
        self._streaks.yielded(crop.source)
        return crop

    def _fail(self, position: int, failure: Failure) -> None:
        """Skip and count a crop whose data failed, or raise: a storage
        failure always (the crop stays to do: ``position`` stays on it), a
        data failure under ``on_error="raise"`` (handed over as the error)."""
        if failure.storage:
            raise failure.error()
        self._position = position + 1
        if self.on_error == "raise":
            raise failure.error()
        source = self.source_of(position)
        self._stats.count_skip(failure.reason, source)
        if self.on_skip is not None:
            self.on_skip(position, failure.reason)
        _, key, start, end = self._planned(position)  # a request: its error raised again
        log.warning(
            "skipping crop [%g, %g) s of key %r (%sshard %s): %s: %s",
            start,
            end,
            key,
            f"of source {source!r}, " if len(self.sources) > 1 else "",
            failure.shard or "unknown",
            failure.reason,
            failure.message,
        )
        self._streaks.failed(source, failure, named=len(self.sources) > 1)

    async def _start_pool(self) -> None:
        """Start the workers (once) and wait until they are ready. A caller
        that stops waiting (a timeout, a cancelled task) leaves the start
        going, and the next request waits for the same workers: cancelling
        the start closed them, so a consumer whose watchdog was shorter
        than their start (a second or more under load) never got a crop,
        each wait starting two new processes."""
        if not self.workers:
            return
        if self._resources.pool is None:
            pool = WorkerPool(
                self.workers,
                max_restarts=self.max_worker_restarts,
                on_restart=_weakly(self._restarted),
            )
            self._resources.pool = pool
            self._pool_ready = asyncio.ensure_future(self._started(pool))
            self._pool_ready.add_done_callback(_retrieved)
        assert self._pool_ready is not None
        await asyncio.shield(self._pool_ready)

    async def _started(self, pool: WorkerPool) -> None:
        """``pool`` started, or closed (and forgotten) when it cannot be."""
        try:
            await pool.start()
        except BaseException:
            if self._resources.pool is pool:
                self._resources.pool = None
            await pool.aclose()
            raise

    def _restarted(self) -> None:
        self._stats.worker_restarts += 1

    async def _stop_run(self) -> None:
        run, self._resources.run = self._resources.run, None
        self._held = None  # the next pass starts at ``position``: at the held crop
        if run is not None:
            await run.stop()

    async def _shutdown(self) -> None:
        """Stop the pass and the workers. The pool is closed whatever
        interrupts the rest (a second Ctrl-C cancelling this while the pass
        stops or the pool starts): it was detached first, and its workers
        outlived the Streamer, which ``close()`` no longer reached."""
        try:
            await self._stop_run()
            starting, self._pool_ready = self._pool_ready, None
            if starting is not None and not starting.done():
                starting.cancel()  # its workers are closed with it
                await asyncio.wait([starting])
        finally:
            pool, self._resources.pool = self._resources.pool, None
            if pool is not None:
                await pool.aclose()  # a thread's work: runs its course once begun

    def _require_idle(self) -> None:
        if self._resources.run is not None:
            raise RuntimeError("cannot change the epoch or state while iterating")


class _AsyncLoop:
    """What ``Streamer.__aiter__`` returns: one ``async for``. ``aclose()``
    while it is under way marks it ``closed``: its next step raises, as a
    ``for`` loop's iterator does after ``close()``. The Streamer holds it
    weakly: a loop left with ``break`` keeps the Streamer alive, never the
    other way round."""

    __slots__ = ("__weakref__", "_streamer", "closed")

    def __init__(self, streamer: Streamer) -> None:
        self._streamer, self.closed = streamer, False

    def __aiter__(self) -> _AsyncLoop:
        return self

    async def __anext__(self) -> Crop:
        if self.closed:
            raise RuntimeError(CLOSED)
        return await self._streamer._anext(self)


class _Handover:
    """What ``_next`` took for a caller, and whether the caller gave up on
    it; whichever side comes second (under the lock) knows what became of
    it, so nothing taken falls between the two threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._item: Crop | object | None = None
        self._began = self._abandoned = False
        self.settled = threading.Event()  # the request has ended on the store loop

    def begin(self) -> bool:
        """The request starts on the store loop; False when the caller is gone."""
        with self._lock:
            self._began = not self._abandoned
            return self._began

    def deliver(self, item: Crop | object) -> bool:
        """Record ``item`` for the caller; False when the caller is gone."""
        with self._lock:
            if self._abandoned:
                return False
            self._item = item
            return True

    def abandon(self) -> tuple[bool, Crop | object | None]:
        """The caller is gone: whether the request began, and what was
        delivered for it (None: nothing)."""
        with self._lock:
            self._abandoned = True
            item, self._item = self._item, None
            return self._began, item


class _OfThisProcess(Generic[T]):
    """An attribute that reads as None in a process forked after it was set:
    what it holds (workers, a pass) is the parent's (see ``_Resources``)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self._slot = f"_{name}_of_process"

    def __get__(self, holder: object, owner: type | None = None) -> T | None:
        value, pid = getattr(holder, self._slot, (None, 0))
        return value if pid == os.getpid() else None

    def __set__(self, holder: object, value: T | None) -> None:
        setattr(holder, self._slot, (value, os.getpid()))


class _Resources:
    """What must be stopped when a Streamer is dropped without being closed
    (garbage collection, interpreter exit).

    Both belong to the process that started them. In a child forked from it
    (a DataLoader worker, a ``multiprocessing`` child started by fork) they
    are the parent's: its workers, whose pipes the child shares, and a pass
    on the parent's store loop, which does not run here. The child forgets
    them without touching them and starts its own when it iterates; it used
    to wait forever on the parent's pass, and closing (or its exit hook)
    stopped the parent's workers under the parent's pass."""

    pool: _OfThisProcess[WorkerPool] = _OfThisProcess()
    run: _OfThisProcess[Run] = _OfThisProcess()

    def close_soon(self) -> None:
        """Stop the pass and the workers from any thread, at any time. The
        pass is waited for (briefly) when the store loop can still answer, so
        its stages end before their workers are killed under them. On the
        store loop itself (a Streamer whose last reference went there) both
        are stopped by a task, in that order: closing the pool at once
        blocked that loop while the workers left and killed them under the
        pass, which logged the pool's closing as a pipeline failure."""
        run, self.run = self.run, None
        pool, self.pool = self.pool, None
        if _on_store_thread():
            task = asyncio.get_running_loop().create_task(_stop(run, pool))
            _stopping.add(task)
            task.add_done_callback(_stopping.discard)
            return
        if run is not None and not sys.is_finalizing():
            stopping = asyncio.run_coroutine_threadsafe(run.stop(), background_loop())
            with contextlib.suppress(Exception):
                stopping.result(timeout=_STOP_TIMEOUT)
        if pool is not None:
            pool.close()


async def _stop(run: Run | None, pool: WorkerPool | None) -> None:
    """Stop ``run``, then close ``pool`` (``close_soon`` on the store loop)."""
    try:
        if run is not None:
            await run.stop()
    finally:
        if pool is not None:
            await pool.aclose()


#: The tasks of ``_stop`` under way (the loop keeps only weak references).
_stopping: set[asyncio.Task[None]] = set()


_BUSY = (
    "this Streamer is already being iterated (another for loop, thread or task): "
    "it serves one iteration at a time; give each consumer its own Streamer"
)

#: How long closing an abandoned Streamer waits for its pass to stop.
_STOP_TIMEOUT = 5.0


def _weakly(method: Callable[..., T]) -> Callable[..., T]:
    """``method`` without a strong reference to its Streamer, for the pass
    and the pool, which ``_Resources`` (kept by the Streamer's finalizer)
    holds: through them the Streamer kept itself alive, and one dropped in
    the middle of a pass (a bare ``async for`` left early) was never
    collected, its workers idle until the interpreter exited."""
    ref = weakref.WeakMethod(method)

    def call(*args: Any) -> T:
        bound = ref()
        if bound is None:
            raise RuntimeError("the Streamer of this pass was garbage collected")
        return bound(*args)

    return call


def _on_store_thread() -> bool:
    """Whether this thread runs the store loop (where waiting on it deadlocks)."""
    try:
        return asyncio.get_running_loop() is background_loop()
    except RuntimeError:
        return False


async def _on_store_loop(coroutine: Coroutine[Any, Any, T]) -> T:
    """``coroutine``, marked as running under asyncio: a task submitted from a
    trio thread inherits its context, which would make anyio pick trio."""
    sniffio.current_async_library_cvar.set("asyncio")
    return await coroutine


def _retrieved(future: asyncio.Future[None]) -> None:
    """Take a finished start's outcome (its waiters may all have gone):
    an error nobody retrieves is logged by asyncio with its traceback."""
    if not future.cancelled():
        future.exception()


async def _awaiting(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run on the store loop; the caller's loop (asyncio or trio) awaits it."""
    return await run_async(_on_store_loop(coroutine))


def _blocking(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run on the store loop and wait; an interrupt (Ctrl-C) cancels the coroutine."""
    future = asyncio.run_coroutine_threadsafe(_on_store_loop(coroutine), background_loop())
    try:
        return future.result()
    except BaseException:
        future.cancel()
        raise


def _counts(**counts: int | None) -> list[int | None]:
    """Each of ``counts`` (given or None: the default) as a whole number >= 0:
    ``max_crops=-1`` kept all crops but the last without a word (a slice), a
    negative ``prefetch`` failed at the first crop in anyio's words, a rank
    of 0.5 as slice indices."""
    return [
        None if value is None else whole_number(name, value, 0) for name, value in counts.items()
    ]


#: What every ``Streamer.state_dict()`` holds; the other fields have defaults.
_STATE_KEYS = ("seed", "epoch", "position", "rank", "world_size", "worker", "num_workers")


def _check_keys(state: Mapping[str, Any]) -> None:
    """Refuse a state that is not a Streamer's with a line naming what it
    lacks (a ``KeyError: 'position'`` from the middle of loading said nothing)."""
    if not isinstance(state, Mapping):
        raise TypeError(f"a Streamer state is a dict from state_dict(), not {type(state).__name__}")
    missing = [key for key in _STATE_KEYS if key not in state]
    if missing:
        hint = (
            ": a CropDataset's state (from CropDataset.state_dict) is loaded by "
            "CropDataset.load_state_dict"
            if "consumed" in state and "position" not in state
            else ""
        )
        raise ValueError(f"not a Streamer.state_dict(): it has no {', '.join(missing)}{hint}")


def check_order(state: Mapping[str, Any], total: int, digest: str) -> None:
    """Refuse a state taken in another order of its epoch than the one
    planned here (``total`` crops, ``digest``): other data, sampler or
    options. Its places would be other crops here, repeated or skipped
    without a word (a state without ``plan`` is not checked)."""
    if "plan" in state and state["plan"] != digest:
        raise ValueError(
            f"state is for another order of epoch {state['epoch']} "
            f"({state.get('total', '?')} crops), this dataset plans {total}: "
            "other data, sampler or options?"
        )


def check_mix(state: Mapping[str, Any], mix: list[list[Any]] | None) -> None:
    """Refuse a state of another mix than ``mix`` (``Mix.items``; None: a
    single dataset), naming both: items renamed or reordered, or other
    weights (the digest differs too, but says only "another order"). A
    state without ``mix`` is not checked."""
    if "mix" in state and state["mix"] != mix:
        raise ValueError(
            f"state is for {_mix_label(state['mix'])}, this is {_mix_label(mix)}: "
            "a resume needs the same items in the same order, with the same names "
            "and weights (its crops would be drawn from, or labelled as, other items)"
        )


def _mix_label(mix: Sequence[Sequence[Any]] | None) -> str:
    """A mix as errors name it: its items' names and shares of the weights."""
    if mix is None:
        return "a single dataset (no Mix)"
    items = ", ".join(
        f"({'item ' + str(n) + ' by its URL' if name is None else repr(name)}, {weight:.4g})"
        for n, (name, weight) in enumerate(mix)
    )
    return f"the Mix of items [{items}]"


def check_streamer_options(owner: str, data: object, options: Mapping[str, Any]) -> None:
    """Raise now what ``Streamer(data, sampler, **options)`` would raise for
    the names of ``options`` and for ``storage_options`` or
    ``allow_incomplete`` that ``data`` cannot take; for callers that make
    their Streamers later (``CropDataset``)."""
    check_keywords(owner, options, _STREAMER_KEYWORDS)
    check_storage_options(data, options.get("storage_options"))
    check_allow_incomplete(data, options.get("allow_incomplete", False))


def _remote_stores(sources: list[tuple[Dataset, float]]) -> list[Store]:
    unique = {id(d.store): d.store for d, _ in sources if d.store.is_remote}
    return list(unique.values())


def default_workers() -> int:
    """One decode process per CPU this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return os.cpu_count() or 1


def default_prefetch(workers: int, *, remote: bool) -> int:
    """Crops in flight ahead of the consumer when ``prefetch`` is not given.

    Locally a crop spends its time in a decoder, so a few per worker keep
    them busy: eight, so that each worker has two batches of four in flight
    (``run.batch_size``; a batch costs the parent one message for four
    crops). From an object store each crop also waits a round trip
    (20-100 ms to first byte) before it can decode; to keep every worker
    busy, about (crops/s) x (round trip + decode) crops must be in flight,
    which at two workers' full rate (~120 crops/s of 8 s crops here) and
    50 ms is ~12: four times the local depth leaves room for slower stores.
    Each slot holds at most its planned bytes and its decoded crop (~3 MB
    for 8 s of 44.1 kHz stereo), hence the cap of ``MAX_DEFAULT_PREFETCH``.
    """
    return min((16 if remote else 8) * max(workers, 2), MAX_DEFAULT_PREFETCH)


#: The most crops in flight by default, whatever the worker count (memory).
MAX_DEFAULT_PREFETCH = 128

#: What ``Streamer`` takes as keyword arguments besides ``data`` and ``sampler``.
_STREAMER_KEYWORDS = [n for n in keyword_names(Streamer.__init__) if n not in ("data", "sampler")]
