"""What a Streamer leaves behind: a dropped one stops its workers, a forked
child does not touch its parent's, and many in a row leak nothing."""

from __future__ import annotations

import gc
import weakref
from pathlib import Path

import pytest
from helpers import gone

import streamer
from streamer import RandomCrops, Streamer

SAMPLER = RandomCrops(0.5, per_episode=10)


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.mark.timeout(60)
@pytest.mark.anyio
async def test_a_streamer_dropped_in_the_middle_of_a_pass_stops_its_workers(
    packed: Path,
) -> None:
    """A bare ``async for`` whose body raises leaves the pass open (Python
    gives async iterators no prompt finalizer); dropping the Streamer then
    stops it and its workers. The pass and the pool held the Streamer
    (bound methods), so it was never collected: workers idle until exit."""
    s = Streamer(streamer.open_dataset(packed), SAMPLER, workers=1)
    with pytest.raises(ZeroDivisionError):
        async for _ in s:
            pids = s.worker_pids
            1 / 0  # noqa: B018
    dropped = weakref.ref(s)
    del s
    gc.collect()
    assert dropped() is None
    assert pids and all(gone(pid) for pid in pids)
