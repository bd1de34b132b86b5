"""An epoch's order: fixed by (seed, epoch), grouped by shard, shuffled in a window."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
from helpers import plan_rows, signature

import streamer
from streamer import RandomCrops, Streamer
from streamer.pipeline import order
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


def test_seeds_and_epochs_past_32_bits_plan_their_own_epoch(packed: Path) -> None:
    """A 64-bit seed (``torch.initial_seed()``) or a negative one is not cut
    to its low 32 bits: ``s`` and ``s + 2**32`` planned the same crops."""
    dataset = streamer.open_dataset(packed)
    sampler = RandomCrops(0.5, per_episode=2)

    def digest(seed: int, epoch: int = 0) -> str:
        return Streamer(dataset, sampler, seed=seed, epoch=epoch, workers=0).digest()

    seeds = [0, 1, 2**32 - 1, 2**32, 2**32 + 1, -1, -(2**32), 2**63 + 5, 2**64]
    assert len({digest(seed) for seed in seeds}) == len(seeds)
    assert digest(3, epoch=2**32 + 1) != digest(3, epoch=1)


def test_seeds_under_32_bits_keep_the_plans_they_always_had() -> None:
    """A checkpoint of such a seed resumes in the same order (its ``plan`` digest)."""
    for words in [(0, 0, 0, 0), (7, 3, 1, 2, 4), (2**32 - 1, 5, 0, 1)]:
        then = np.random.default_rng(np.random.SeedSequence(list(words)))
        assert order._rng(*words).random(4).tolist() == then.random(4).tolist()


def test_the_plan_is_the_same_in_another_process(packed: Path) -> None:
    """No ``hash()`` of a string, set order or listing order decides the plan:
    processes with other hash seeds, the manifest or a listing, plan the same."""
    script = (
        "import sys, streamer\n"
        "from streamer.dataset import Dataset\n"
        "data = Dataset(sys.argv[1], manifest=sys.argv[2] == 'manifest')\n"
        "mix = streamer.Mix([(data, 2, 'a'), (streamer.open_dataset(sys.argv[1]), 1, 'b')])\n"
        "for sampler in (streamer.RandomCrops(0.4, per_hour=9000.0), "
        "streamer.SequentialCrops(0.7, hop=0.3)):\n"
        "    for source in (data, mix):\n"
        "        s = streamer.Streamer(source, sampler, seed=2**40 + 9, workers=0, "
        "crops_per_epoch=300)\n"
        "        plan = s.plan()\n"
        "        keys = [s.episodes()[i].keys[e] for i, e in zip(plan.source, plan.episode)]\n"
        "        print(s.digest(), keys, plan.start.tolist())\n"
    )
    outputs = set()
    for hash_seed, layout in [("0", "listing"), ("1", "manifest"), ("4242", "listing")]:
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        run = subprocess.run(
            [sys.executable, "-c", script, str(packed), layout],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        outputs.add(run.stdout)
    assert len(outputs) == 1
