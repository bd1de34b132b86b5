"""One pass over an epoch (plan, prefetch, decode, in-order queue): backpressure, slow plans."""

from __future__ import annotations

import threading
import time
from pathlib import Path

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
