"""The Streamer over local shards: read_crop's crops, resumption, bounded memory, async."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers import gone, signature

import streamer
from streamer import RandomCrops, Streamer


def test_crops_match_read_crop(packed: Path) -> None:
    dataset = streamer.open_dataset(packed)
    for crop in Streamer(dataset, RandomCrops(0.5), sample_rate=16000, mono=True, workers=1):
        expected = dataset.read_crop(crop.key, crop.start, crop.end, 16000, mono=True)
        assert crop.sample_rate == 16000 and crop.audio.shape == expected.shape == (1, 8000)
        np.testing.assert_array_equal(crop.audio, expected, err_msg=crop.key)


# -- resumption ------------------------------------------------------------------------


@pytest.mark.parametrize("workers", [0, 2])
def test_resume_repeats_nothing_and_skips_nothing(packed: Path, workers: int) -> None:
    dataset = streamer.open_dataset(packed)

    def make() -> Streamer:
        return Streamer(dataset, RandomCrops(0.5, per_episode=3), seed=2, workers=workers)

    everything = signature(list(make()))
    first = make()
    taken = []
    for crop in first:
        taken.append(crop)
        if len(taken) == 8:
            break
    state = first.state_dict()
    assert state["position"] == 8 and state["epoch"] == 0
    second = make()
    second.load_state_dict(state)
    assert signature(taken) + signature(list(second)) == everything
    assert second.epoch == 1  # a completed pass advances the epoch
    with pytest.raises(ValueError, match="state is for"):
        Streamer(dataset, RandomCrops(0.5), seed=9).load_state_dict(state)


# -- memory ----------------------------------------------------------------------------


@pytest.mark.slow
def test_peak_memory_stays_bounded_over_10000_crops(packed: Path) -> None:
    from helpers import rss_kib

    s = Streamer(streamer.open_dataset(packed), RandomCrops(0.05, per_episode=1430), workers=2)
    peak = start = 0
    with s:
        for n, _ in enumerate(s):
            if n == 500:
                start = rss_kib()
            peak = max(peak, rss_kib()) if n % 100 == 0 else peak
    assert s.stats.yielded == 10010
    assert peak - start < 64 * 1024, f"RSS grew by {(peak - start) // 1024} MiB"


# -- async, asyncio and trio -----------------------------------------------------------


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.mark.anyio
async def test_async_iteration_matches_sync(packed: Path) -> None:
    dataset = streamer.open_dataset(packed)
    sampler = RandomCrops(0.5, per_episode=2)
    expected = signature(list(Streamer(dataset, sampler, workers=0)))
    s = Streamer(dataset, sampler, workers=1)
    async with s:
        got = [crop async for crop in s]
        pids = s.worker_pids
    assert signature(got) == expected
    assert all(gone(pid) for pid in pids)
    bare = Streamer(dataset, sampler, workers=0)
    assert signature([crop async for crop in bare]) == expected


@pytest.mark.anyio
async def test_async_break_then_aclose(packed: Path) -> None:
    s = Streamer(streamer.open_dataset(packed), RandomCrops(0.5, per_episode=10), workers=1)
    async for _ in s:
        pids = s.worker_pids
        break
    assert s.state_dict()["position"] == 1
    await s.aclose()
    assert s.worker_pids == [] and all(gone(pid) for pid in pids)
