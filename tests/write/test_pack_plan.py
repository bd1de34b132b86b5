"""The pack plan: deterministic, and its partitions disjoint and complete."""

from __future__ import annotations

import numpy as np
import pytest

from streamer.errors import StreamerError
from streamer.storage import LocalStore
from streamer.write.plan import make_plan
from streamer.write.sources import SourceFile


def _listing(count: int, seed: int = 0) -> list[SourceFile]:
    """``count`` files of odd sizes (1 B .. 3 MB), sorted by name as a listing is."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 3_000_000, size=count) | 1
    store = LocalStore()
    files = [
        SourceFile(f"d{i % 3}/f{i:04d}.mp3", int(s), store, f"/x/{i}") for i, s in enumerate(sizes)
    ]
    return sorted(files, key=lambda f: f.source)


@pytest.mark.parametrize("mode", ["shards", "by_files"])
@pytest.mark.parametrize("count", range(1, 8))
def test_partitions_are_disjoint_and_complete(mode: str, count: int) -> None:
    listing = _listing(101)
    whole = make_plan(listing, shard_size=4_000_000, batch_size=4)
    parts = [
        make_plan(listing, shard_size=4_000_000, batch_size=4, **{mode: f"{i}/{count}"})
        for i in range(count)
    ]
    names = [s.name for p in parts for s in p.mine]
    files = [f.source for p in parts for s in p.mine for f in s.files]
    assert len(names) == len(set(names)), "two partitions share a shard name"
    assert sorted(files) == [f.source for f in listing], "a file is missing or packed twice"
    for part in parts:  # every partition knows the whole plan, the same one
        assert [s.name for s in part.every] == [s.name for s in parts[0].every]
        assert sorted(s.name for s in part.every) == sorted(names)
    if mode == "shards":  # the whole run's shards, dealt out
        assert sorted(names) == sorted(s.name for s in whole.every)
        assert {s.fingerprint for p in parts for s in p.mine} == {
            s.fingerprint for s in whole.every
        }


def test_the_plan_is_the_same_for_the_same_listing_and_cuts_by_size() -> None:
    listing = _listing(50, seed=3)
    first = make_plan(listing, shard_size=5_000_000, batch_size=2)
    again = make_plan(list(reversed(listing))[::-1], shard_size=5_000_000, batch_size=2)
    assert [(s.name, s.fingerprint) for s in first.every] == [
        (s.name, s.fingerprint) for s in again.every
    ]
    for shard in first.every[:-1]:  # a shard ends at the first batch that reaches the size
        assert len(shard.files) % 2 == 0
        assert shard.bytes >= 5_000_000 > shard.bytes - sum(f.size for f in shard.files[-2:])
    other = make_plan(listing, shard_size=5_000_000, batch_size=3)
    assert {s.fingerprint for s in other.every}.isdisjoint({s.fingerprint for s in first.every})


def test_files_partitions_name_their_shards_apart() -> None:
    listing = _listing(20)
    part = make_plan(listing, shard_size=1, batch_size=1, by_files="3/12")
    assert [s.name for s in part.mine] == ["shard-03of12-000000", "shard-03of12-000001"]
    assert [f.source for s in part.mine for f in s.files] == [f.source for f in listing[3::12]]


def test_a_taken_key_is_left_out_of_every_partition_and_reported_once() -> None:
    store = LocalStore()
    listing = [
        SourceFile("a/b.flac", 10, store, "1"),
        SourceFile("a/b.wav", 10, store, "2"),
        SourceFile("c.mp3", 10, store, "3"),
    ]
    parts = [make_plan(listing, shard_size=1, batch_size=1, by_files=f"{i}/2") for i in range(2)]
    packed = [f.source for p in parts for s in p.mine for f in s.files]
    assert packed == ["a/b.flac", "c.mp3"]
    assert [p.duplicates for p in parts] == [
        [("a/b.wav", "key 'a/b' is already taken by a/b.flac")],
        [],
    ]


@pytest.mark.parametrize("spec", ["3/3", "-1/2", "a/b", "1/0", "1", "1/2/3"])
@pytest.mark.parametrize("mode", ["shards", "by_files"])
def test_bad_partition_specs_are_refused_as_index_refuses_them(spec: str, mode: str) -> None:
    option = "--shards" if mode == "shards" else "--files"
    with pytest.raises(StreamerError, match=f"{option} '{spec}': expected i/n with 0 <= i < n"):
        make_plan(_listing(3), shard_size=1, batch_size=1, **{mode: spec})


@pytest.mark.timeout(10)  # the plan of --files 0/N looped over all N partitions
@pytest.mark.parametrize("count", [5, 10**18])
def test_more_partitions_than_files_leave_the_others_empty_however_many(count: int) -> None:
    listing = _listing(3)
    width = len(str(count))
    for i in (0, 2):
        part = make_plan(listing, shard_size=1, batch_size=1, by_files=f"{i}/{count}")
        assert [s.name for s in part.mine] == [f"shard-{i:0{width}d}of{count}-000000"]
        assert [f for s in part.mine for f in s.files] == [listing[i]]
        assert len(part.every) == 3
    for spec in (f"3/{count}", f"{count - 1}/{count}"):
        assert make_plan(listing, shard_size=1, batch_size=1, by_files=spec).mine == []
        assert make_plan(listing, shard_size=1, batch_size=1, shards=spec).mine == []


@pytest.mark.parametrize("mode", ["shards", "by_files"])
def test_a_partition_count_past_any_job_is_refused(mode: str) -> None:
    spec = f"0/{10**18 + 1}"
    with pytest.raises(StreamerError, match=f"'{spec}': n may be at most 10\\*\\*18$"):
        make_plan(_listing(3), shard_size=1, batch_size=1, **{mode: spec})
