"""A Streamer serves one iteration at a time: a second one (another ``for``,
another thread, another task) is refused with a clear error, and the first
goes on untouched: every crop once, no worker left. Two consumers used to
take turns at one pass, restart it under each other and end with internal
errors (``list.remove(x): x not in list``, a closed pool, a bad descriptor)
or hand crops of the next epoch to the slower one."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest
from helpers import gone, signature

import streamer
from streamer import RandomCrops, Streamer

SAMPLER = RandomCrops(0.5, per_episode=6)  # 42 crops over the 7 episodes of ``packed``
BUSY = "already being iterated"


@pytest.fixture(scope="module")
def everything(packed: Path) -> list[tuple[str, float, float]]:
    return signature(list(Streamer(streamer.open_dataset(packed), SAMPLER, seed=2, workers=0)))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("workers", [0, 1, 2])
def test_a_second_loop_is_refused_and_the_first_goes_on(
    packed: Path, everything: list[tuple[str, float, float]], workers: int
) -> None:
    s = Streamer(streamer.open_dataset(packed), SAMPLER, seed=2, workers=workers)
    first = iter(s)
    taken = [next(first)]
    pids = s.worker_pids
    with pytest.raises(RuntimeError, match=BUSY):
        next(iter(s))
    taken += list(first)
    assert signature(taken) == everything and s.stats.yielded == len(everything)
    assert s.state_dict()["epoch"] == 1 and s.worker_pids == []
    assert all(gone(pid) for pid in pids)
    assert len(list(s)) == len(everything)  # once it is over, iterating again is a new pass


@pytest.mark.timeout(60)
@pytest.mark.parametrize("workers", [0, 1, 2])
def test_two_threads_iterating_get_every_crop_once_or_an_error(
    packed: Path, everything: list[tuple[str, float, float]], workers: int
) -> None:
    s = Streamer(streamer.open_dataset(packed), SAMPLER, seed=2, workers=workers)
    got: list[list[streamer.Crop]] = [[], []]
    errors: list[BaseException] = []
    begun = threading.Event()

    def consume(number: int) -> None:
        try:
            for crop in s:
                got[number].append(crop)
                begun.set()
                time.sleep(0.01)  # still under way when the other thread starts
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=consume, args=(n,)) for n in (0, 1)]
    threads[0].start()
    assert begun.wait(30)
    threads[1].start()
    for thread in threads:
        thread.join(30)
    assert not any(thread.is_alive() for thread in threads)
    assert all(isinstance(e, RuntimeError) and BUSY in str(e) for e in errors), errors
    assert len(errors) == 1
    assert signature(got[0] + got[1]) == everything and s.stats.yielded == len(everything)
    assert s.worker_pids == []


@pytest.mark.timeout(60)
@pytest.mark.parametrize("workers", [0, 2])
def test_two_tasks_awaiting_one_streamer(
    packed: Path, everything: list[tuple[str, float, float]], workers: int
) -> None:
    async def main() -> tuple[list[streamer.Crop], list[BaseException]]:
        s = Streamer(streamer.open_dataset(packed), SAMPLER, seed=2, workers=workers)
        async with s:
            # Both wait: the pass starts with the first (no crop is ready yet).
            results = await asyncio.gather(s.__anext__(), s.__anext__(), return_exceptions=True)
            crops = [r for r in results if isinstance(r, streamer.Crop)]
            crops += [crop async for crop in s]
            return crops, [r for r in results if isinstance(r, BaseException)]

    crops, errors = asyncio.run(main())
    assert len(errors) == 1 and isinstance(errors[0], RuntimeError) and BUSY in str(errors[0])
    assert signature(crops) == everything
