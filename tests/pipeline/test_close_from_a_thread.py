"""``Streamer.close()`` from another thread while a ``for crop in s`` loop
runs ends that loop with ``RuntimeError("the Streamer was closed ...")``:
it used to start the pass again from where it was (a new pass, new worker
processes) and end normally, as if nothing had been closed, or, with the
pass's last crops decoded and queued, to drop them and move on to the next
epoch without a word."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import anyio
import pytest
from helpers import gone

import streamer
from streamer import RandomCrops, Streamer

CLOSED = "the Streamer was closed"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("workers", [0, 1])
def test_close_between_crops_ends_the_loop(packed: Path, workers: int) -> None:
    s = Streamer(streamer.open_dataset(packed), RandomCrops(0.5, per_episode=6), workers=workers)
    total = len(s)
    taken = []
    with pytest.raises(RuntimeError, match=CLOSED):
        for crop in s:
            taken.append(crop)
            if len(taken) == 3:
                pids = s.worker_pids
                closer = threading.Thread(target=s.close)
                closer.start()
                closer.join()
    assert len(taken) < total and s.state_dict()["epoch"] == 0  # not a new pass, nor the next
    assert s.worker_pids == [] and all(gone(pid) for pid in pids)
    assert s.state_dict()["position"] == 3
    assert len(list(s)) == total - 3  # a new loop: the rest of the pass


@pytest.mark.timeout(60)
def test_close_while_the_loop_waits_ends_it(packed: Path) -> None:
    """Closed while the loop is blocked on the next crop (a real worker
    decoding) or at any moment of a running loop: it ends with the error,
    never with the end of the pass."""
    s = Streamer(
        streamer.open_dataset(packed), RandomCrops(0.25, per_episode=200), workers=1, seed=3
    )
    total = len(s)
    taken = 0
    started = threading.Event()
    closer = threading.Thread(target=lambda: (started.wait(), s.close()))
    closer.start()
    with pytest.raises(RuntimeError, match=CLOSED):
        for _ in s:
            taken += 1
            started.set()
    closer.join()
    assert taken < total and s.state_dict()["epoch"] == 0


@pytest.mark.timeout(60)
def test_close_with_the_rest_of_the_pass_queued_ends_the_loop(packed: Path) -> None:
    """The pass has decoded its last crops into the queue when ``close()``
    comes: the loop gets the error, not the end of the pass (which dropped
    the queued crops and started the next epoch)."""
    s = Streamer(
        streamer.open_dataset(packed),
        RandomCrops(0.25, per_episode=2),
        workers=0,
        queue_size=64,
        prefetch=64,
    )
    it = iter(s)
    next(it)
    run = s._resources.run
    assert run is not None
    deadline = time.monotonic() + 30
    while not run._task.done():  # every crop of the pass is decoded and waiting
        assert time.monotonic() < deadline
        time.sleep(0.01)
    closer = threading.Thread(target=s.close)
    closer.start()
    closer.join()
    with pytest.raises(RuntimeError, match=CLOSED):
        list(it)
    assert (s.state_dict()["epoch"], s.state_dict()["position"]) == (0, 1)


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.mark.timeout(60)
@pytest.mark.anyio
async def test_aclose_from_another_task_ends_its_async_for(packed: Path) -> None:
    """The same for ``async for``: another task's ``aclose()`` between two
    crops made the loop's next step start the pass again and run to its
    end. A new ``async for`` goes on from the last crop yielded."""
    s = Streamer(streamer.open_dataset(packed), RandomCrops(0.5, per_episode=6), workers=1)
    total = len(s)
    taken = []
    closed = anyio.Event()

    async def close_after_three() -> None:
        while len(taken) < 3:
            await anyio.sleep(0.01)
        await s.aclose()
        closed.set()

    ended: list[BaseException] = []
    async with anyio.create_task_group() as group:
        group.start_soon(close_after_three)
        try:
            async for crop in s:
                taken.append(crop)
                if len(taken) == 3:
                    await closed.wait()
        except RuntimeError as error:
            ended.append(error)
    assert [str(e) for e in ended] == ["the Streamer was closed in the middle of a pass"]
    assert len(taken) == 3 and s.state_dict()["epoch"] == 0 and s.worker_pids == []
    rest = [crop async for crop in s]
    assert len(rest) == total - 3 and s.epoch == 1


@pytest.mark.timeout(60)
@pytest.mark.anyio
async def test_after_aclose_the_streamer_goes_on_and_only_the_closed_loop_ends(
    packed: Path,
) -> None:
    """An ``async for`` left with ``break``, then ``aclose()``: a bare
    ``await anext(s)`` raised "closed in the middle of a pass" (the Streamer
    took it for the closed loop's next step), while a new ``async for``
    went on. Now the Streamer itself goes on from the last crop yielded, as
    after ``close()`` a new ``for`` does; the loop that was under way (an
    ``aiter(s)`` of its own, or one closed from its own body) ends, as a
    ``for`` loop's iterator does."""
    sampler = RandomCrops(0.5, per_episode=6)
    whole = [(c.key, c.start) for c in Streamer(streamer.open_dataset(packed), sampler, workers=0)]
    s = Streamer(streamer.open_dataset(packed), sampler, workers=0)
    got = []
    async for crop in s:
        got.append(crop)
        break
    await s.aclose()
    got.append(await anext(s))  # the Streamer itself: the next crop
    assert s.state_dict()["position"] == 2
    await s.aclose()
    got.append(await anext(s))  # and again, after a bare anext
    loop = aiter(s)
    got.append(await anext(loop))
    await s.aclose()
    with pytest.raises(RuntimeError, match=CLOSED):
        await anext(loop)  # the loop under way ends, as a for loop's iterator does
    with pytest.raises(RuntimeError, match=CLOSED):
        async for crop in s:
            got.append(crop)
            await s.aclose()  # from the loop's own body: its next step ends it
    got += [crop async for crop in s]
    assert [(c.key, c.start) for c in got] == whole and s.epoch == 1
