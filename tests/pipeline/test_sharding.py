"""Partitions of an epoch among ranks and DataLoader workers: disjoint, complete, from env."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import plan_rows

import streamer
from streamer import RandomCrops, Streamer


@pytest.mark.parametrize(("world_size", "num_workers"), [(1, 1), (2, 1), (3, 2), (4, 3)])
def test_partitions_are_disjoint_and_complete(packed: Path, world_size, num_workers) -> None:  # type: ignore[no-untyped-def]
    dataset = streamer.open_dataset(packed)
    sampler = RandomCrops(0.5, per_episode=5)
    whole = plan_rows(Streamer(dataset, sampler, seed=3, rank=0, world_size=1))
    parts = [
        plan_rows(
            Streamer(
                dataset,
                sampler,
                seed=3,
                rank=rank,
                world_size=world_size,
                worker=worker,
                num_workers=num_workers,
            )
        )
        for rank in range(world_size)
        for worker in range(num_workers)
    ]
    assert [row for part in parts for row in part] == whole  # disjoint, complete, in order
    assert max(map(len, parts)) - min(map(len, parts)) <= 1


def test_rank_from_the_environment(packed: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    s = Streamer(streamer.open_dataset(packed), RandomCrops(0.5))
    assert (s.partition.rank, s.partition.world_size) == (1, 2)
    assert Streamer(streamer.open_dataset(packed), RandomCrops(0.5), rank=0).partition.rank == 0
