"""One pass over an epoch (plan, prefetch, decode, in-order queue): backpressure, slow plans."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import streamer
from streamer import RandomCrops, Streamer
from streamer.pipeline.run import Item, Run
from streamer.pipeline.stats import StreamerStats
from streamer.pipeline.tasks import Failure
from streamer.storage.loop import run_sync


def test_a_slow_consumer_stops_the_pipeline(packed: Path) -> None:
    s = Streamer(
        streamer.open_dataset(packed),
        RandomCrops(0.2, per_episode=10),
        workers=0,
        prefetch=3,
        queue_size=2,
    )
    with s:
        iterator = iter(s)
        next(iterator)
        time.sleep(1.0)
        decoded = s.stats.decode.crops
        iterator.close()
    assert decoded <= 1 + 3 + 2


def test_a_crop_waiting_on_its_plan_does_not_hold_up_the_crops_behind_it() -> None:
    """Planning may wait on the store (opening a shard, reading an index):
    the crops behind it are planned meanwhile, and still come out in order."""
    second_planned = threading.Event()

    def plan_at(position: int) -> Failure:
        if position == 0:
            waited = second_planned.wait(timeout=10)
            return Failure("Planned" if waited else "PlannedSerially", "", key="first")
        second_planned.set()
        return Failure("Planned", "", key="second")

    async def both() -> list[Item | None]:
        run = Run(plan_at, 0, 2, pool=None, prefetch=2, queue_size=2, stats=StreamerStats())
        run.start()
        items = [await run.next(), await run.next()]
        await run.stop()
        return items

    items = run_sync(both())
    assert [(item.position, item.result.key, item.result.reason) for item in items] == [
        (0, "first", "Planned"),
        (1, "second", "Planned"),
    ]


class Abort(BaseException):
    pass


def _planning_until(last: int) -> Callable[[int], Failure]:
    """A planner of stand-in failures (no data needed) that raises ``Abort`` at ``last``."""

    def plan_at(position: int) -> Failure:
        if position == last:
            raise Abort
        return Failure("Planned", "", key=str(position))

    return plan_at


async def _drain(run: Run, then: Callable[[Run], None] = lambda run: None) -> list[int]:
    run.start()
    then(run)
    got = []
    try:
        while (item := await run.next()) is not None:
            got.append(item.position)
    finally:
        await run.stop()
    return got


def test_a_planner_raising_a_base_exception_ends_the_pass_with_it() -> None:
    """A ``BaseException`` that is not an ``Exception`` (``SystemExit`` in a
    sampler) escaped the pipeline's error handling: the pass looked ended,
    the epoch was cut short without a word."""
    run = Run(_planning_until(3), 0, 8, pool=None, prefetch=1, queue_size=1, stats=StreamerStats())
    with pytest.raises(Abort):
        run_sync(_drain(run))


def test_a_pass_cut_short_without_an_error_raises_instead_of_ending() -> None:
    """However the pipeline's task ends before the last position without an
    error recorded (cancelled from outside, not by ``stop``), the consumer
    gets an error, never what looks like the end of the epoch."""

    def cancel_soon(run: Run) -> None:
        asyncio.get_running_loop().call_later(0.05, run._task.cancel)  # type: ignore[union-attr]

    run = Run(
        _planning_until(-1), 0, 10**6, pool=None, prefetch=1, queue_size=1, stats=StreamerStats()
    )
    with pytest.raises(
        RuntimeError, match=r"ended at position \d+ of \[0, 1000000\) without an error"
    ):
        run_sync(_drain(run, cancel_soon))


def test_a_consumer_cancelled_as_its_item_is_handed_over_loses_no_item() -> None:
    """The consumer's cancellation reaches the store loop from its own thread
    (``run_async``) at any moment, also between the emitter handing the
    waiting ``next()`` its item and that task waking up: anyio's
    ``receive`` then dropped the item, never yielded nor skipped, and the
    pass went on as if it had been consumed. Here each cancellation lands
    in exactly that moment; the item is the next call's."""
    total, cancelled = 8, 5
    go = [threading.Event() for _ in range(total)]

    def plan_at(position: int) -> Failure:
        go[position].wait(timeout=10)
        return Failure("Planned", "", key=str(position))

    async def waiting(run: Run) -> None:
        while run._out.statistics().tasks_waiting_receive == 0:
            await asyncio.sleep(0.001)

    def cancel_on_handover(run: Run, task: asyncio.Task[Item | None]) -> None:
        """Cancel ``task`` once its receive was handed an item, before it wakes."""
        if task.done():
            return
        if run._out.statistics().tasks_waiting_receive == 0:
            task.cancel()
            return
        asyncio.get_running_loop().call_soon(cancel_on_handover, run, task)

    async def consume() -> tuple[list[int], int]:
        run = Run(plan_at, 0, total, pool=None, prefetch=2, queue_size=1, stats=StreamerStats())
        run.start()
        got, interrupted = [], 0
        try:
            for position in range(cancelled):
                task = asyncio.ensure_future(run.next())
                await waiting(run)
                go[position].set()
                cancel_on_handover(run, task)
                try:
                    item = await task
                except asyncio.CancelledError:
                    interrupted += 1
                    try:  # held: no wait for the next position's plan
                        item = await asyncio.wait_for(run.next(), 2.0)
                    except TimeoutError:
                        pytest.fail(f"the item at position {position} was lost")
                assert item is not None
                got.append(item.position)
            for event in go:
                event.set()
            while (item := await run.next()) is not None:
                got.append(item.position)
        finally:
            for event in go:
                event.set()
            await run.stop()
        return got, interrupted

    got, interrupted = run_sync(consume())
    assert interrupted == cancelled  # each cancellation landed as its item was handed over
    assert got == list(range(total))
