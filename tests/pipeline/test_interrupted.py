"""A consumer interrupted while a crop is being handed to it (a cancelled
task, a timeout, Ctrl-C) loses no crop: the crop the pass took for it is
held for its next request, and ``state_dict()`` does not count it. It used
to be dropped between the store loop and the caller, with the position
already past it: a resumed run never saw that crop."""

from __future__ import annotations

import asyncio
import random
import signal
import threading
import time
from pathlib import Path

import anyio
import pytest
from helpers import gone, signature

import streamer
from streamer import RandomCrops, Streamer
from streamer.decode.crop import Crop
from streamer.pipeline.streamer import _on_store_loop
from streamer.storage.loop import background_loop

SAMPLER = RandomCrops(0.5, per_episode=2)  # 14 crops over the 7 episodes of ``packed``


class Handing(Streamer):
    """A Streamer that calls ``handing()`` on the store loop each time it hands a crop over."""

    handing = staticmethod(lambda: None)

    def _accept(self, item):  # type: ignore[no-untyped-def]
        crop = super()._accept(item)
        if crop is not None:
            self.handing()
        return crop


@pytest.fixture(scope="module")
def everything(packed: Path) -> list[tuple[str, float, float]]:
    return signature(list(Streamer(streamer.open_dataset(packed), SAMPLER, workers=0)))


def resumed(packed: Path, state: dict) -> list[Crop]:  # type: ignore[type-arg]
    rest = Streamer(streamer.open_dataset(packed), SAMPLER, workers=0)
    rest.load_state_dict(state)
    return list(rest)


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.mark.timeout(60)
@pytest.mark.anyio
@pytest.mark.parametrize("workers", [0, 1])
async def test_a_consumer_cancelled_as_its_crop_arrives_loses_no_crop(
    packed: Path, everything: list, workers: int
) -> None:
    s = Handing(streamer.open_dataset(packed), SAMPLER, workers=workers)
    got: list[Crop] = []
    async with s:
        async for crop in s:
            got.append(crop)
            if len(got) == 3:
                break
        handed, go_on = threading.Event(), threading.Event()

        def handing() -> None:  # the store loop waits here, the crop taken
            handed.set()
            go_on.wait()

        s.handing = handing
        async with anyio.create_task_group() as group:

            async def consume() -> None:
                got.append(await s.__anext__())

            group.start_soon(consume)
            await anyio.to_thread.run_sync(handed.wait)
            go_on.set()
            group.cancel_scope.cancel()  # the consumer is cancelled as its crop comes
        s.handing = lambda: None
        assert len(got) == 3 and s.state_dict()["position"] == 3
        state = s.state_dict()
        got.append(await s.__anext__())  # the held crop, then the rest of the pass
        got += [crop async for crop in s]
    assert signature(got) == everything
    assert s.stats.yielded == len(everything)
    assert signature(got[:3] + resumed(packed, state)) == everything


@pytest.mark.timeout(60)
def test_ctrl_c_as_a_crop_arrives_loses_no_crop(packed: Path, everything: list) -> None:
    """SIGINT lands on the waiting ``for`` loop while the store loop hands its
    crop over: the checkpoint taken in the handler resumes with that crop."""
    interrupted = threading.Event()

    def on_sigint(*_: object) -> None:
        interrupted.set()
        raise KeyboardInterrupt

    def interrupt() -> None:  # on the store loop, as the fourth crop is handed over
        if s.stats.yielded == 4:
            signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)  # type: ignore[arg-type]
            interrupted.wait()

    s = Handing(streamer.open_dataset(packed), SAMPLER, workers=0, prefetch=1, queue_size=1)
    got: list[Crop] = []
    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        s.handing = interrupt
        with pytest.raises(KeyboardInterrupt):
            for crop in s:
                got.append(crop)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert len(got) == 3 and s.state_dict()["position"] == 3
    assert signature(got + resumed(packed, s.state_dict())) == everything


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_burst_of_ctrl_cs_leaves_the_streamer_usable(packed: Path) -> None:
    """Ctrl-C every 3-30 ms for 30 s at a loop inside ``with``: each is a
    ``KeyboardInterrupt`` and the next loop starts. One landing while the
    loop waited for the store loop to settle the crop the one before cut
    off broke that wait ("release unlocked lock" from ``Condition.wait``),
    and the next loop started while the store loop still handed the crop
    over: refused as "already being iterated" (21 times in 90 s). The wait
    now holds interrupts. Random by nature, so ``slow``: run it with ``-m
    slow`` when touching ``Streamer.__iter__``."""
    sampler = RandomCrops(0.5, per_episode=200, min_duration=0.2)
    s = Streamer(streamer.open_dataset(packed), sampler, workers=2, seed=1)
    main, rng = threading.main_thread().ident, random.Random(0)
    armed, stop = threading.Event(), threading.Event()

    def interrupt() -> None:
        while not stop.is_set():
            time.sleep(rng.uniform(0.003, 0.03))
            if armed.is_set():
                signal.pthread_kill(main, signal.SIGINT)  # type: ignore[arg-type]

    threading.Thread(target=interrupt, daemon=True).start()
    interrupts, refused = 0, []
    deadline = time.monotonic() + 30
    try:
        with s:
            while time.monotonic() < deadline and s.epoch == 0:
                armed.set()
                try:
                    try:
                        for _ in s:
                            pass
                    finally:
                        armed.clear()
                except KeyboardInterrupt:
                    interrupts += 1
                except RuntimeError as exc:
                    refused.append(str(exc))
                    time.sleep(0.2)
    finally:
        stop.set()
    assert interrupts > 100 and refused == []


@pytest.mark.timeout(120)
@pytest.mark.anyio
async def test_a_watchdog_shorter_than_the_workers_start_gets_every_crop(
    packed: Path, everything: list
) -> None:
    """A consumer that gives up waiting after a while and asks again (a
    data-stall watchdog), outside ``async with``: each wait that timed out
    while the decode workers started closed them, and the next started two
    new ones, so a watchdog shorter than their start never got a crop. The
    start now goes on: one pool, every crop."""
    s = Streamer(streamer.open_dataset(packed), SAMPLER, workers=2)
    got: list[Crop] = []
    timeouts = 0
    pools: list[object] = []  # each pool the pass had, in order (none until made)
    loop = aiter(s)
    while len(got) < len(everything):
        with anyio.move_on_after(0.02) as scope:
            got.append(await anext(loop))
        timeouts += scope.cancelled_caught
        assert timeouts < 20_000, "no crop came"
        pool = s._resources.pool
        if pool is not None and (not pools or pools[-1] is not pool):
            pools.append(pool)
        assert len(pools) <= 1, "the workers were started again"
    assert timeouts and signature(got) == everything and s.stats.worker_restarts == 0
    await s.aclose()


@pytest.mark.timeout(120)
@pytest.mark.anyio
@pytest.mark.parametrize("workers", [0, 2])
async def test_many_short_waits_lose_no_crop(packed: Path, workers: int) -> None:
    """A consumer that waits a moment for each crop and gives up (a short
    ``move_on_after`` around each ``anext``, inside ``async with``): one
    cancellation landing as the pass handed its waiting request a crop
    dropped the crop, never yielded nor skipped, and the epoch ended as
    if complete (a crop or two of 192 in most epochs)."""
    sampler = RandomCrops(0.25, per_episode=24)

    def uninterrupted(epoch: int) -> list[tuple[str, float, float]]:
        reference = Streamer(streamer.open_dataset(packed), sampler, workers=0)
        reference.set_epoch(epoch)
        return signature(list(reference))

    s = Streamer(streamer.open_dataset(packed), sampler, workers=workers)
    cancels = 0
    async with s:
        for epoch in range(3):
            expected = uninterrupted(epoch)
            got: list[Crop] = []
            loop = aiter(s)
            while True:
                with anyio.move_on_after(0.001) as scope:
                    try:
                        got.append(await anext(loop))
                    except StopAsyncIteration:
                        break
                cancels += scope.cancelled_caught
            assert signature(got) == expected, f"epoch {epoch}: {len(got)} of {len(expected)}"
            assert not s.stats.skipped and s.epoch == epoch + 1
    assert cancels > 0


@pytest.mark.timeout(60)
def test_a_second_ctrl_c_as_the_loop_ends_leaves_the_streamer_usable(
    packed: Path, everything: list, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second of two quick Ctrl-Cs lands while the ending loop stops the
    workers: the Streamer refused every later loop ("already being
    iterated"), ``close()`` did not mend it."""
    s = Streamer(streamer.open_dataset(packed), SAMPLER, workers=1)
    end = Streamer._end_iteration

    def interrupted(self: Streamer) -> None:
        monkeypatch.setattr(Streamer, "_end_iteration", end)
        end(self)
        raise KeyboardInterrupt

    monkeypatch.setattr(Streamer, "_end_iteration", interrupted)
    got: list[Crop] = []
    with pytest.raises(KeyboardInterrupt):
        for crop in s:
            got.append(crop)
    assert signature(got) == everything
    s.epoch = 0
    assert signature(list(s)) == everything  # a new loop, the pass again


@pytest.mark.timeout(60)
def test_a_shutdown_interrupted_still_stops_the_workers(
    packed: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C cancels the shutdown on the store loop (``_blocking``) while the
    pass stops: the workers are stopped all the same. The pool was detached
    first and left open: its workers outlived the Streamer."""
    s = Streamer(streamer.open_dataset(packed), SAMPLER, workers=1)
    crops = iter(s)
    next(crops)
    pids = s.worker_pids
    assert pids

    async def slow_stop() -> None:
        await asyncio.sleep(30)

    monkeypatch.setattr(s, "_stop_run", slow_stop)
    stopping = asyncio.run_coroutine_threadsafe(_on_store_loop(s._shutdown()), background_loop())
    time.sleep(0.3)
    stopping.cancel()  # as _blocking does when Ctrl-C interrupts its wait
    deadline = time.monotonic() + 10
    while not all(gone(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert all(gone(pid) for pid in pids)
    monkeypatch.undo()
    crops.close()
