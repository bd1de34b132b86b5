"""Partitions of an epoch among ranks and DataLoader workers: disjoint, complete, from env."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import plan_rows

import streamer
from streamer import RandomCrops, Streamer


@pytest.mark.parametrize(("world_size", "num_workers"), [(1, 1), (2, 1), (3, 2), (4, 3)])
@pytest.mark.parametrize("even", [True, False])
def test_partitions_are_disjoint_and_complete(packed: Path, world_size, num_workers, even) -> None:  # type: ignore[no-untyped-def]
    """Ranks take contiguous runs of the order (equal ones with ``even``, the
    remainder dropped); a rank's workers take turns by batches of 2, so
    taking a batch from each in turn gives back the rank's run."""
    dataset = streamer.open_dataset(packed)
    sampler = RandomCrops(0.5, per_episode=5)
    whole = plan_rows(Streamer(dataset, sampler, seed=3, rank=0, world_size=1))
    ranks = []
    for rank in range(world_size):
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
                    even=even,
                    loader_batch_size=2,
                )
            )
            for worker in range(num_workers)
        ]
        batches = [part[i : i + 2] for i in range(0, max(map(len, parts)), 2) for part in parts]
        ranks.append([row for batch in batches for row in batch])
    assert [row for rank in ranks for row in rank] == whole[: sum(map(len, ranks))]
    sizes = [len(rank) for rank in ranks]
    if even:
        assert len(set(sizes)) == 1 and len(whole) - sum(sizes) < world_size
    else:
        assert sum(sizes) == len(whole) and max(sizes) - min(sizes) <= 1


def test_padding_repeats_crops_from_the_start(packed: Path) -> None:
    dataset = streamer.open_dataset(packed)
    sampler = RandomCrops(0.5, per_episode=5)  # 35 crops over 4 ranks: 9 each, one repeated
    whole = plan_rows(Streamer(dataset, sampler, seed=3))
    ranks = [
        plan_rows(Streamer(dataset, sampler, seed=3, rank=r, world_size=4, drop_last=False))
        for r in range(4)
    ]
    assert [len(r) for r in ranks] == [9] * 4
    assert [row for rank in ranks for row in rank] == whole + whole[:1]


def test_the_dropped_remainder_is_counted_and_an_empty_share_said(
    packed: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The even split leaves out the remainder: the last rank counts it in
    ``stats.dropped`` (once over the job), and a rank left with nothing
    because of it says so instead of ending its epoch as if it were done.
    With ``drop_last=False`` the crops served twice to fill the ranks are
    counted alike, in ``stats.repeated``."""
    dataset = streamer.open_dataset(packed)
    sampler = RandomCrops(0.5, per_episode=5)  # 35 crops

    def run(world_size: int, **options: object) -> list[tuple[int, int, int]]:
        counts = []
        for rank in range(world_size):
            s = Streamer(dataset, sampler, rank=rank, world_size=world_size, workers=0, **options)
            counts.append((len(list(s)), s.stats.dropped, s.stats.repeated))
        return counts

    with caplog.at_level("WARNING", logger="streamer.pipeline.streamer"):
        assert run(4) == [(8, 0, 0), (8, 0, 0), (8, 0, 0), (8, 3, 0)]
        assert run(2, drop_last=False) == [(18, 0, 0), (18, 0, 1)]
        assert run(4, drop_last=False, max_crops=2) == [(1, 0, 0)] * 3 + [(1, 0, 2)]
        assert run(4, even=False) == [(8, 0, 0), (9, 0, 0), (9, 0, 0), (9, 0, 0)]
        assert not caplog.records
        assert run(4, max_crops=3) == [(0, 0, 0), (0, 0, 0), (0, 0, 0), (0, 3, 0)]
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 4 and all("3 crops left for 4 ranks" in m for m in said)
    assert "rank 2 serves none" in said[2]


def test_rank_from_the_environment(packed: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    s = Streamer(streamer.open_dataset(packed), RandomCrops(0.5))
    assert (s.partition.rank, s.partition.world_size) == (1, 2)
    assert Streamer(streamer.open_dataset(packed), RandomCrops(0.5), rank=0).partition.rank == 0
