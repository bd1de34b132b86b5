"""The Streamer over local shards: read_crop's crops, resumption, bounded memory, async."""

from __future__ import annotations

import gc
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
from helpers import gone, signature

import streamer
from streamer import Mix, RandomCrops, Streamer
from streamer.dataset import Dataset
from streamer.write.pack import pack


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
    with pytest.raises(
        ValueError,
        match="state was taken with seed=2, this Streamer has seed=9: resume with seed=2",
    ):
        Streamer(dataset, RandomCrops(0.5), seed=9).load_state_dict(state)


def test_a_state_of_another_order_is_refused(packed: Path) -> None:
    """A resume point is a place in one epoch's order: another sampler (other
    crops) or another shuffle window (the same crops, reordered) would
    repeat some and skip others, or end the epoch at once, without a word."""
    dataset = streamer.open_dataset(packed)
    state = Streamer(dataset, RandomCrops(0.5, per_episode=3), seed=2).state_dict()
    state["position"] = state["consumed"] = 8
    with pytest.raises(ValueError, match=r"another order of epoch 0 \(21 crops\).*plans 7:"):
        Streamer(dataset, RandomCrops(0.5), seed=2).load_state_dict(state)
    reordered = Streamer(dataset, RandomCrops(0.5, per_episode=3), seed=2, shuffle_window=0)
    with pytest.raises(ValueError, match=r"another order of epoch 0 \(21 crops\).*plans 21:"):
        reordered.load_state_dict(state)
    same = Streamer(dataset, RandomCrops(0.5, per_episode=3), seed=2, workers=0)
    same.load_state_dict(state)
    assert len(list(same)) == 21 - 8


def test_a_state_of_other_episodes_of_the_same_durations_is_refused(
    packed: Path, audio_dir: Path, tmp_path: Path
) -> None:
    """Another dataset of as many episodes of the same durations plans the
    same rows and times: its episodes' keys tell it apart, or a resume
    serves other audio at every place."""
    for file in audio_dir.rglob("*.*"):
        renamed = tmp_path / "src" / file.parent.relative_to(audio_dir) / f"x{file.name}"
        renamed.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(file, renamed)
    pack(tmp_path / "src", tmp_path / "renamed", batch_size=2, shard_size=600_000, progress=False)
    sampler = RandomCrops(0.5, per_episode=3)
    state = Streamer(streamer.open_dataset(packed), sampler, seed=2, workers=0).state_dict()
    renamed = Streamer(streamer.open_dataset(tmp_path / "renamed"), sampler, seed=2, workers=0)
    assert renamed.episodes()[0].keys != Streamer(packed, sampler).episodes()[0].keys
    assert renamed.total() == state["total"]
    assert np.array_equal(renamed.plan().start, Streamer(packed, sampler, seed=2).plan().start)
    with pytest.raises(ValueError, match=r"another order of epoch 0 \(21 crops\).*plans 21:"):
        renamed.load_state_dict(state)


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


def test_unknown_keywords_are_a_type_error_naming_the_closest(packed: Path) -> None:
    from streamer.pipeline.streamer import check_streamer_options

    sampler = RandomCrops(0.5)
    with pytest.raises(TypeError) as raised:
        Streamer(packed, sampler, sample_rat=16000)
    assert str(raised.value) == (
        "Streamer() got an unexpected keyword argument 'sample_rat'; did you mean 'sample_rate'?"
    )
    with pytest.raises(TypeError, match=r"'num_worker'; did you mean 'num_workers'\?"):
        Streamer(packed, sampler, num_worker=2)
    # What used to be a store option, or resembles nothing: where store options go.
    for name in ("endpoint_url", "block_size", "secret"):
        with pytest.raises(TypeError, match=rf"'{name}'; store options go in storage_options="):
            Streamer(packed, sampler, **{name: 1})
    with pytest.raises(TypeError, match=r"Mix\(\) got .* 'storage_option'; did you mean"):
        Mix([(packed, 1.0)], storage_option={})
    with pytest.raises(TypeError, match=r"Mix\(\) got .* 'endpoint_url'; store options go in"):
        Mix([(packed, 1.0)], endpoint_url="http://127.0.0.1:9")
    # What CropDataset checks when it is made (before a DataLoader worker would).
    with pytest.raises(TypeError, match=r"CropDataset\(\) got .* 'shuffle'; did you mean"):
        check_streamer_options("CropDataset", packed, {"shuffle": 10})
    check_streamer_options("CropDataset", packed, {"epoch": 3, "workers": 0, "seed": 1})


def test_storage_options_are_refused_where_the_store_is_already_chosen(packed: Path) -> None:
    from streamer.pipeline.streamer import check_streamer_options

    dataset = streamer.open_dataset(packed)
    sampler = RandomCrops(0.5)
    options = {"attempts": 2}
    with pytest.raises(ValueError, match=r"\['attempts'\] cannot apply to the open dataset"):
        Streamer(dataset, sampler, storage_options=options)
    with pytest.raises(ValueError, match="its store is already chosen"):
        Mix([(dataset, 1.0)], storage_options=options)
    with pytest.raises(ValueError, match="cannot apply to a Mix"):
        Streamer(Mix([(dataset, 1.0)]), sampler, storage_options=options)
    with pytest.raises(ValueError, match="its store is already chosen"):
        check_streamer_options("CropDataset", dataset, {"storage_options": options})
    # Nothing to drop: no error.
    assert Streamer(dataset, sampler, storage_options={}).sources[0][0] is dataset
    assert Streamer(dataset, sampler, storage_options=None).sources[0][0] is dataset
    with pytest.raises(TypeError, match="local files take no storage options"):
        Streamer(packed, sampler, storage_options=options)


def test_a_mapped_store_that_is_not_local_store_is_not_taken_for_remote(packed: Path) -> None:
    """The Streamer, warmup and bench ask the store (``is_remote``, ``drain``,
    ``clear_memory_cache``): a memory-mappable store of another class gets the
    local prefetch depth and its shards are mapped by the workers, not fetched."""
    from stores import MappedStore

    from streamer.pipeline.bench import BenchConfig, bench, bench_streamer
    from streamer.pipeline.warmup import warmup

    dataset = Dataset(packed, store=MappedStore())
    assert not dataset.store.is_remote
    sampler = RandomCrops(0.5, per_episode=2)
    s = Streamer(dataset, sampler, seed=1, workers=1)
    assert s.prefetch == 16  # the local depth; a remote source gets 32
    local = Streamer(streamer.open_dataset(packed), sampler, seed=1, workers=0)
    assert signature(list(s)) == signature(list(local))
    assert s.stats.requests == 0 and s.stats.skipped == {}
    config = BenchConfig(duration=0.5, crops=4)
    report = warmup(bench_streamer(dataset, config, workers=0))
    assert (report.crops, report.bytes) == (4, 0)  # nothing to fetch: shards are mapped
    assert bench([dataset], [0], config)["yielded"] == 4


@pytest.mark.parametrize("stop_after", [None, 3])
def test_a_pass_leaves_no_stream_open(packed: Path, stop_after: int | None) -> None:
    """A pass run to its end, or left after a few crops, closes the pipeline's
    memory streams (an unclosed one is a ResourceWarning at collection)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        with Streamer(str(packed), RandomCrops(0.5, per_episode=2), seed=3) as s:
            for n, _ in enumerate(s, start=1):
                if n == stop_after:
                    break
        gc.collect()
    unclosed = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
    assert not [m for m in unclosed if "MemoryObject" in m], unclosed


def test_workers_are_bounded_as_the_command_bounds_them(packed: Path) -> None:
    """``Streamer(..., workers=10**6)`` was taken as asked and forked until
    memory ran out once iterated; it is refused up front with the bound that
    ``streamer bench --workers`` states (one check: ``pool.check_workers``)."""
    import os

    from streamer.pipeline.pool import WORKERS_PER_CPU

    most = WORKERS_PER_CPU * (os.cpu_count() or 1)
    for workers, said in (
        (10**6, rf"at most {most} \(4 processes per CPU\), not 1000000"),
        (most + 1, rf"at most {most} \(4 processes per CPU\), not {most + 1}"),
        (-1, "0 or more, not -1"),
        (2.5, "a whole number, not 2.5"),
    ):
        with pytest.raises(ValueError, match=f"^workers must be {said}$"):
            Streamer(packed, RandomCrops(0.5), workers=workers)
    assert Streamer(packed, RandomCrops(0.5), workers=most).workers == most
    assert Streamer(packed, RandomCrops(0.5), workers=np.int64(0)).workers == 0


def test_counts_are_whole_numbers_not_below_zero(packed: Path) -> None:
    """``max_crops=-1`` yielded every crop but the last without a word (the
    plan was sliced ``[:-1]``); a negative ``prefetch`` or ``queue_size``
    failed at the first crop in anyio's words ("initial_value must be >= 0")."""
    everything = len(Streamer(packed, RandomCrops(0.5), workers=0))
    for name, value in (
        ("max_crops", -1),
        ("prefetch", -5),
        ("queue_size", -1),
        ("shuffle_window", -1),
        ("crops_per_epoch", -2),
        ("max_crops", 2.5),
    ):
        with pytest.raises(ValueError, match=f"^{name} must be a whole number >= 0, not {value}$"):
            Streamer(packed, RandomCrops(0.5), workers=0, **{name: value})
    assert len(list(Streamer(packed, RandomCrops(0.5), workers=0, max_crops=0))) == 0
    assert len(list(Streamer(packed, RandomCrops(0.5), workers=0, queue_size=0))) == everything


@pytest.mark.parametrize(
    ("name", "value", "bound"),
    [
        ("queue_size", None, " >= 0"),
        ("shuffle_window", None, " >= 0"),
        ("loader_batch_size", 0, " >= 1"),
        ("max_worker_restarts", 1.5, " >= 0"),
        ("rank", 0.5, " >= 0"),
        ("world_size", 2.0, " >= 0"),
        ("num_workers", "2", " >= 0"),
        ("seed", 1.5, ""),
        ("seed", "7", ""),
        ("epoch", None, " >= 0"),
        ("epoch", -1, " >= 0"),
    ],
)
def test_arguments_are_refused_when_the_streamer_is_made(
    packed: Path, name: str, value: object, bound: str
) -> None:
    """Each was taken and failed at the first crop in another library's
    words (``queue_size=None``: anyio's "max_buffer_size must be either an
    integer or math.inf"; ``rank=0.5``: "slice indices must be integers";
    ``seed="7"``: "unsupported operand type(s) for &")."""
    options = {name: value, **({"world_size": 2} if name == "rank" else {})}
    with pytest.raises(ValueError, match=f"^{name} must be a whole number{bound}, not "):
        Streamer(packed, RandomCrops(0.5), workers=0, **options)


def test_numpy_integers_are_seeds_and_epochs(packed: Path) -> None:
    """A numpy ``int32`` or ``int16`` seed or epoch (``np.arange``'s) planned
    nothing: every pass ended with an ``OverflowError`` on 4294967295. Each
    is the Python integer of the same value, state included."""
    plain = Streamer(packed, RandomCrops(0.5), workers=0, seed=7, epoch=1)
    for kind in (np.int16, np.int32, np.uint8):
        s = Streamer(packed, RandomCrops(0.5), workers=0, seed=kind(7), epoch=kind(1))
        assert s.plan().start.tolist() == plain.plan().start.tolist()
        s.set_epoch(kind(2))
        assert type(s.state_dict()["seed"]) is int and type(s.state_dict()["epoch"]) is int
        s.load_state_dict({**plain.state_dict(), "epoch": kind(1), "position": kind(3)})
        assert [c.start for c in s] == plain.plan().start[3:].tolist()
    with pytest.raises(ValueError, match=r"^epoch must be a whole number >= 0, not 1\.5$"):
        plain.set_epoch(1.5)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"position": -3}, r"at crop -3 of this consumer's 21"),
        ({"position": 22}, r"at crop 22 of this consumer's 21"),
        ({"start": 999}, r"999 crops of this rank's share .* it has 21"),
        ({"start": -1}, r"-1 crops of this rank's share"),
        ({"done": [[5, 900]]}, r"done intervals lie outside the epoch's 21 crops"),
        ({"done": [[-2, 3]]}, r"done intervals lie outside the epoch's 21 crops"),
    ],
)
def test_a_state_out_of_its_epoch_is_refused(
    packed: Path, change: dict[str, object], says: str
) -> None:
    """A position before 0 repeated crops (-3: 24 crops of an epoch of 21),
    a start or done past the epoch ended it at once, served as done: each
    without a word (a state edited, or of another job's options)."""
    dataset = streamer.open_dataset(packed)

    def make() -> Streamer:
        return Streamer(dataset, RandomCrops(0.5, per_episode=3), seed=2, workers=0)

    state = make().state_dict()
    with pytest.raises(ValueError, match=says):
        make().load_state_dict({**state, **change})
    edge = make()
    edge.load_state_dict({**state, "position": 21})  # the very end: nothing left
    assert list(edge) == [] and edge.epoch == 1


def test_a_state_that_is_not_a_streamers_says_what_it_lacks(packed: Path) -> None:
    """A CropDataset's rank state (no position, worker or num_workers: it
    counts what the rank consumed), or a state cut down by hand, handed to
    ``Streamer.load_state_dict`` failed with ``KeyError: 'position'``."""
    dataset = streamer.open_dataset(packed)
    sampler = RandomCrops(0.5, per_episode=3)
    streamer_ = Streamer(dataset, sampler, seed=2, workers=0)
    per_consumer = ("position", "worker", "num_workers")
    rank_state = {k: v for k, v in streamer_.state_dict().items() if k not in per_consumer}
    with pytest.raises(ValueError, match=r"no position, worker, num_workers: a CropDataset"):
        streamer_.load_state_dict(rank_state)
    with pytest.raises(ValueError, match=r"^not a Streamer.state_dict\(\): it has no epoch$"):
        streamer_.load_state_dict({k: v for k, v in streamer_.state_dict().items() if k != "epoch"})
    with pytest.raises(TypeError, match="not list"):
        streamer_.load_state_dict([])  # type: ignore[arg-type]
