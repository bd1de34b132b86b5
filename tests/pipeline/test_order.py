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


def test_interleaving_spreads_each_episode_through_its_shard(packed: Path) -> None:
    """Within a shard, every stretch of crops holds its episodes in proportion:
    an episode's crops are spread out, in start order; the shards stay grouped."""
    dataset = streamer.open_dataset(packed)
    sampler = RandomCrops(0.2, per_episode=12)
    plan = Streamer(dataset, sampler, shuffle_window=0).plan()
    episodes = Episodes.of(dataset)
    shards = episodes.shard[plan.episode]
    assert (np.diff(shards) != 0).sum() == len(dataset.shard_names) - 1
    for shard in np.unique(shards):
        mine = plan.episode[shards == shard]
        count = len(set(mine.tolist()))
        for first in range(0, len(mine) - count + 1, count):  # each stretch: every episode
            assert len(set(mine[first : first + count].tolist())) >= count - 1
        for episode in set(mine.tolist()):
            assert (np.diff(plan.start[plan.episode == episode]) >= 0).all()
    back_to_back = Streamer(dataset, sampler, shuffle_window=0, interleave=False).plan()
    assert (np.diff(back_to_back.episode) != 0).sum() == len(episodes) - 1
    assert sorted(plan_rows_of(plan)) == sorted(plan_rows_of(back_to_back))


def plan_rows_of(plan) -> list:  # type: ignore[no-untyped-def]
    return list(zip(plan.episode.tolist(), plan.start.tolist(), strict=True))
