"""A decode worker that hangs (SIGSTOP, a debugger, a deadlock) owes an answer
that will never come: it is killed once it has used no CPU for the stall
timeout, its crops are retried on a replacement like a dead worker's, and the
restart budget bounds how often. Real worker processes, real SIGSTOP."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest
from helpers import gone

import streamer
from streamer import RandomCrops, Streamer, WorkerDied
from streamer.pipeline import pool

SAMPLER = RandomCrops(0.5, per_episode=4)  # 28 crops over the 7 episodes of ``packed``


@pytest.fixture(autouse=True)
def short_stall(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pool, "STALL_TIMEOUT", 0.5)
    monkeypatch.setattr(pool, "_STALL_CHECK", 0.1)


def stop_all(pids: list[int]) -> None:
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("workers", [1, 2])
def test_stopped_workers_are_replaced_and_lose_no_crop(packed: Path, workers: int) -> None:
    dataset = streamer.open_dataset(packed)
    reference = list(Streamer(dataset, SAMPLER, seed=3, workers=0))
    s = Streamer(dataset, SAMPLER, seed=3, workers=workers)
    crops, seen = [], []
    began = time.monotonic()
    with s:
        for crop in s:
            crops.append(crop)
            if len(crops) in (2, 10):  # twice, the second time their replacements
                seen += s.worker_pids
                stop_all(s.worker_pids)
    assert time.monotonic() - began < 30
    assert len(crops) == len(reference) == 28 and not s.stats.skipped
    for a, b in zip(reference, crops, strict=True):
        assert (a.key, a.start) == (b.key, b.start)
        np.testing.assert_array_equal(a.audio, b.audio)
    assert s.stats.worker_restarts >= 2
    assert all(gone(pid) for pid in seen)


@pytest.mark.timeout(60)
def test_a_stopped_worker_past_the_budget_raises_saying_it_hung(packed: Path) -> None:
    s = Streamer(streamer.open_dataset(packed), SAMPLER, workers=1, max_worker_restarts=0)
    taken = 0
    with pytest.raises(WorkerDied, match=r"hung \(no CPU used for 0.5 s\).*restart budget"):
        for _ in s:
            taken += 1
            if taken == 1:
                pids = s.worker_pids
                stop_all(pids)
    assert 1 <= taken < 28 and s.state_dict()["position"] == taken
    assert all(gone(pid) for pid in pids)
