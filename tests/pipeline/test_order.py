"""An epoch's order: fixed by (seed, epoch), grouped by shard, shuffled in a window."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from helpers import plan_rows, signature

import streamer
from streamer import RandomCrops, Streamer
from streamer.pipeline.episodes import Episodes


def test_order_is_deterministic_and_workers_do_not_change_it(packed: Path) -> None:
    dataset = streamer.open_dataset(packed)
    sampler = RandomCrops(1.0, per_episode=3)
    threads = list(Streamer(dataset, sampler, seed=5, workers=0))
    processes = list(Streamer(dataset, sampler, seed=5, workers=2))
    assert signature(threads) == signature(processes)
    assert [c.shard for c in threads] == [c.shard for c in processes]
    assert signature(list(Streamer(dataset, sampler, seed=6, workers=0))) != signature(threads)
    assert plan_rows(Streamer(dataset, sampler, seed=5, epoch=1)) != plan_rows(
        Streamer(dataset, sampler, seed=5)
    )


def test_locality_groups_shards_and_the_window_shuffles(packed: Path) -> None:
    dataset = streamer.open_dataset(packed)
    sampler = RandomCrops(0.5, per_episode=6)
    grouped = Streamer(dataset, sampler, shuffle_window=0).plan()
    shards = Episodes.of(dataset).shard[grouped.episode]
    assert (np.diff(shards) != 0).sum() == len(dataset.shard_names) - 1  # one run per shard
    shuffled = Streamer(dataset, sampler, shuffle_window=50).plan()
    assert (np.diff(Episodes.of(dataset).shard[shuffled.episode]) != 0).sum() > len(
        dataset.shard_names
    )
