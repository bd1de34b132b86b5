"""The pipeline over local shards: samplers, order, partitions, resumption, errors, shutdown."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import streamer
from streamer import Mix, RandomCrops, SegmentCrops, SequentialCrops, Streamer
from streamer.cli import main
from streamer.errors import CropError, DataError, LayoutError, ShardError
from streamer.pipeline.episodes import Episodes
from streamer.pipeline.run import Item, Run
from streamer.pipeline.stats import StreamerStats
from streamer.pipeline.tasks import Failure
from streamer.shard.dataset import Dataset
from streamer.storage.loop import run_sync


def signature(crops: list) -> list[tuple[str, float, float]]:
    return [(c.key, c.start, c.end) for c in crops]


def plan_rows(s: Streamer) -> list[tuple[int, int, float]]:
    plan = s.plan()
    return list(zip(plan.source.tolist(), plan.episode.tolist(), plan.start.tolist(), strict=True))


def gone(pid: int) -> bool:
    """True when ``pid`` neither runs nor lingers as a zombie."""
    return not os.path.exists(f"/proc/{pid}")


# -- samplers --------------------------------------------------------------------------


def test_random_crops_lie_inside_their_episodes(packed: Path) -> None:
    dataset = streamer.open_dataset(packed)
    episodes = Episodes.of(dataset)
    crops = RandomCrops(1.0, per_episode=4).crops(episodes, np.random.default_rng(0))
    assert len(crops) == 4 * len(episodes)
    assert np.allclose(crops.end - crops.start, 1.0)
    assert (crops.start >= 0).all() and (crops.end <= episodes.duration[crops.episode]).all()
    assert len(RandomCrops(5.0).crops(episodes, np.random.default_rng(0))) == 0
    short = RandomCrops(5.0, min_duration=2.0).crops(episodes, np.random.default_rng(0))
    assert len(short) == len(episodes) and (short.start == 0).all()


def test_sequential_crops_cover_each_episode(packed: Path) -> None:
    episodes = Episodes.of(streamer.open_dataset(packed))
    crops = SequentialCrops(1.25, hop=1.0).crops(episodes, np.random.default_rng(0))
    first = crops.episode == 0
    assert crops.start[first].tolist() == [0.0, 1.0, 2.0]
    assert crops.end[first].tolist() == pytest.approx([1.25, 2.25, episodes.duration[0]])


@pytest.fixture
def with_segments(packed: Path, tmp_path: Path) -> Path:
    """``packed`` plus a ``vad/`` column: two segments per episode, one past its end."""
    import shutil

    root = tmp_path / "ds"
    shutil.copytree(packed, root)
    dataset = streamer.open_dataset(root)
    (root / "vad").mkdir()
    for name in dataset.shard_names:
        keys = dataset.shard(name).keys.to_pylist()
        segments = [[[0.5, 1.25], [10.0, 11.0]] for _ in keys]
        table = pa.table({"__key__": keys, "vad": segments})
        with pa.ipc.new_file(str(root / "vad" / f"{name}.wsds"), table.schema) as writer:
            writer.write_table(table)
    return root


def test_segment_crops_and_skipped_failures(with_segments: Path) -> None:
    dataset = streamer.open_dataset(with_segments)
    episodes = Episodes.of(dataset)
    crops = SegmentCrops("vad", max_duration=0.5).crops(episodes, np.random.default_rng(0))
    assert crops.start[crops.episode == 0].tolist() == [0.5, 1.0, 10.0, 10.5]
    s = Streamer(dataset, SegmentCrops("vad"), workers=0)
    got = list(s)
    assert len(got) == len(episodes)
    assert all((c.start, c.end) == (0.5, 1.25) for c in got)
    assert s.stats.skipped == {"CropError": len(episodes)}  # the segments past the end
    with pytest.raises(CropError, match="past the end"):
        list(Streamer(dataset, SegmentCrops("vad"), workers=0, on_error="raise"))


# -- order, partitions -----------------------------------------------------------------


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


def test_workers_do_not_change_the_audio(packed: Path) -> None:
    dataset = streamer.open_dataset(packed)
    sampler = RandomCrops(1.0, per_episode=3)
    threads = list(Streamer(dataset, sampler, seed=5, workers=0))
    processes = list(Streamer(dataset, sampler, seed=5, workers=2))
    for a, b in zip(threads, processes, strict=True):
        assert np.array_equal(a.audio, b.audio), a.key


def test_crops_match_read_crop(packed: Path) -> None:
    dataset = streamer.open_dataset(packed)
    for crop in Streamer(dataset, RandomCrops(0.5), sample_rate=16000, mono=True, workers=1):
        expected = dataset.read_crop(crop.key, crop.start, crop.end, 16000, mono=True)
        assert crop.sample_rate == 16000 and crop.audio.shape == expected.shape == (1, 8000)
        np.testing.assert_array_equal(crop.audio, expected, err_msg=crop.key)


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


def test_mix_takes_shares_by_weight(packed: Path, audio_dir: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    streamer.pack(audio_dir, other, progress=False)
    mix = Mix([(str(packed), 3.0), (str(other), 1.0)])
    s = Streamer(mix, RandomCrops(0.5, per_episode=4), workers=0)
    sources = s.plan().source
    assert len(sources) == 56 and (sources == 0).sum() == 42
    assert abs(np.flatnonzero(sources == 1).mean() - len(sources) / 2) < 6  # spread evenly
    crops = list(s)
    assert len(crops) == 56 and s.stats.yielded == 56


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


# -- backpressure ----------------------------------------------------------------------


def test_a_slow_consumer_stops_the_pipeline(packed: Path) -> None:
    s = Streamer(
        streamer.open_dataset(packed),
        RandomCrops(0.2, per_episode=10),
        workers=0,
        prefetch=3,
        queue_size=2,
    )
    with s:
        iterator = iter(s)
        next(iterator)
        time.sleep(1.0)
        decoded = s.stats.decode.crops
        iterator.close()
    assert decoded <= 1 + 3 + 2


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


# -- shutdown and workers --------------------------------------------------------------


def test_breaking_out_stops_every_worker(packed: Path) -> None:
    s = Streamer(streamer.open_dataset(packed), RandomCrops(0.5, per_episode=20), workers=2)
    for _ in s:
        pids = s.worker_pids
        assert len(pids) == 2
        break
    assert s.worker_pids == []
    assert all(gone(pid) for pid in pids)


def test_an_exception_in_the_consumer_stops_every_worker(packed: Path) -> None:
    s = Streamer(streamer.open_dataset(packed), RandomCrops(0.5, per_episode=20), workers=2)
    pids: list[int] = []
    began = time.perf_counter()
    with pytest.raises(RuntimeError, match="consumer"), s:
        for _ in s:
            pids = s.worker_pids
            raise RuntimeError("consumer failed")
    assert time.perf_counter() - began < 15
    assert pids and all(gone(pid) for pid in pids)


def test_a_killed_worker_is_replaced_and_its_crop_retried(packed: Path) -> None:
    s = Streamer(streamer.open_dataset(packed), RandomCrops(0.5, per_episode=4), workers=2)
    crops = []
    with s:
        for crop in s:
            crops.append(crop)
            if len(crops) == 3:
                os.kill(s.worker_pids[0], signal.SIGKILL)
    assert len(crops) == 28 and not s.stats.skipped
    assert s.stats.worker_restarts >= 1


def test_ctrl_c_stops_promptly_and_leaves_no_process(packed: Path, tmp_path: Path) -> None:
    script = tmp_path / "consumer.py"
    script.write_text(
        textwrap.dedent(f"""
        import sys, time
        import streamer
        s = streamer.Streamer(streamer.open_dataset({str(packed)!r}),
                              streamer.RandomCrops(0.5, per_episode=50), workers=2)
        for crop in s:
            print(*s.worker_pids, flush=True)
            time.sleep(0.2)
        """)
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    child = subprocess.Popen(
        [sys.executable, str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
    )
    assert child.stdout is not None
    pids = [int(p) for p in child.stdout.readline().split()]
    child.send_signal(signal.SIGINT)
    _, err = child.communicate(timeout=20)
    assert child.returncode != 0 and "KeyboardInterrupt" in err
    assert len(pids) == 2 and all(gone(pid) for pid in pids)


# -- stores the pipeline knows by interface, not by class -------------------------------


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
    assert s.prefetch == 8  # the local depth; a remote source gets 32
    local = Streamer(streamer.open_dataset(packed), sampler, seed=1, workers=0)
    assert signature(list(s)) == signature(list(local))
    assert s.stats.requests == 0 and s.stats.skipped == {}
    config = BenchConfig(duration=0.5, crops=4)
    report = warmup(bench_streamer(dataset, config, workers=0))
    assert (report.crops, report.bytes) == (4, 0)  # nothing to fetch: shards are mapped
    assert bench([dataset], [0], config)["yielded"] == 4


@pytest.fixture
def unindexed(packed: Path, tmp_path: Path) -> Path:
    """``packed`` without its seek indexes: a worker decodes each crop from the
    episode's blob, through the reader the task carries."""
    import shutil

    root = tmp_path / "unindexed"
    shutil.copytree(packed, root, ignore=shutil.ignore_patterns("seek_index"))
    return root


@pytest.mark.parametrize(
    "error",
    [KeyError("no such block"), ShardError("bad bytes", shard="s.wsds", key="k", offset=1234)],
    ids=["KeyError", "ShardError"],
)
def test_a_failure_in_a_worker_process_keeps_its_class_and_fields(
    unindexed: Path, error: Exception
) -> None:
    from stores import SabotagedStore

    dataset = Dataset(unindexed, store=SabotagedStore(error))
    s = Streamer(dataset, RandomCrops(0.5), workers=1, on_error="raise")
    with pytest.raises(type(error)) as raised:
        list(s)
    assert type(raised.value) is type(error) and str(raised.value) == str(error)
    assert raised.value is not error  # it came back from the worker process
    if isinstance(error, ShardError):
        got = raised.value
        assert (got.shard, got.key, got.offset, got.reason) == ("s.wsds", "k", 1234, "bad bytes")
    skipping = Streamer(dataset, RandomCrops(0.5), workers=1)
    assert list(skipping) == [] and skipping.stats.skipped == {type(error).__name__: 7}


def test_a_worker_dying_on_every_try_is_worker_died(unindexed: Path) -> None:
    from stores import SabotagedStore

    dataset = Dataset(unindexed, store=SabotagedStore(None))  # a task ends its worker
    s = Streamer(dataset, RandomCrops(0.5), workers=1, max_crops=1, on_error="raise")
    with pytest.raises(streamer.WorkerDied, match="died twice"):
        list(s)
    skipping = Streamer(dataset, RandomCrops(0.5), workers=1, max_crops=2)
    assert list(skipping) == [] and skipping.stats.skipped == {"WorkerDied": 2}
    assert skipping.stats.worker_restarts == 4


def test_data_errors_pickle_with_their_fields() -> None:
    import pickle

    for kind in (DataError, CropError, ShardError, LayoutError):
        error = kind("bad", shard="a.wsds", key="k", offset=7)
        copy = pickle.loads(pickle.dumps(error))
        assert type(copy) is kind and str(copy) == str(error)
        assert (copy.reason, copy.shard, copy.key, copy.offset) == ("bad", "a.wsds", "k", 7)
    assert str(pickle.loads(pickle.dumps(CropError("plain")))) == "plain"
    died = pickle.loads(pickle.dumps(streamer.WorkerDied("gone")))
    assert type(died) is streamer.WorkerDied and isinstance(died, streamer.StreamerError)


class _Stubborn(Exception):
    """An exception that pickles but cannot be unpickled (its constructor
    wants more than ``args``)."""

    def __init__(self, a: int, b: int) -> None:
        super().__init__(f"{a} and {b}")


def test_a_failure_whose_exception_does_not_pickle_names_its_class() -> None:
    import pickle

    failure = Failure.of(_Stubborn(1, 2), "k")
    assert failure.error() is failure.exception  # in-process: the exception itself
    sent = pickle.loads(pickle.dumps(failure))
    assert (sent.reason, sent.message, sent.key) == ("_Stubborn", "1 and 2", "k")
    error = sent.error()
    assert isinstance(error, streamer.WorkerError) and isinstance(error, streamer.StreamerError)
    assert (error.kind, str(error)) == ("_Stubborn", "_Stubborn: 1 and 2")
    assert type(pickle.loads(pickle.dumps(error))) is streamer.WorkerError
    key_error = pickle.loads(pickle.dumps(Failure.of(KeyError("x"), "k"))).error()
    assert type(key_error) is KeyError and key_error.args == ("x",)


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


def test_a_crop_waiting_on_its_plan_does_not_hold_up_the_crops_behind_it() -> None:
    """Planning may wait on the store (opening a shard, reading an index):
    the crops behind it are planned meanwhile, and still come out in order."""
    second_planned = threading.Event()

    def plan_at(position: int) -> Failure:
        if position == 0:
            waited = second_planned.wait(timeout=10)
            return Failure("Planned" if waited else "PlannedSerially", "", key="first")
        second_planned.set()
        return Failure("Planned", "", key="second")

    async def both() -> list[Item | None]:
        run = Run(plan_at, 0, 2, pool=None, prefetch=2, queue_size=2, stats=StreamerStats())
        run.start()
        items = [await run.next(), await run.next()]
        await run.stop()
        return items

    items = run_sync(both())
    assert [(item.position, item.result.key, item.result.reason) for item in items] == [
        (0, "first", "Planned"),
        (1, "second", "Planned"),
    ]


def test_a_shard_opened_from_several_threads_at_once_is_opened_once(packed: Path) -> None:
    opened: list[str] = []

    class Counting(Dataset):
        def _open_shard(self, path: str, column_dir: str) -> Any:
            opened.append(path)
            time.sleep(0.05)  # wide enough for every thread to miss the cache
            return super()._open_shard(path, column_dir)

    dataset = Counting(packed)
    name = dataset.shard_names[0]
    with ThreadPoolExecutor(8) as pool:
        shards = list(pool.map(lambda _: dataset.shard(name), range(8)))
    assert all(shard is shards[0] for shard in shards)
    assert len(opened) == 1


def test_bench_rounds_report_the_median_of_interleaved_runs(packed: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    argv = ["bench", str(packed), str(packed), "--duration", "0.5", "--crops", "6"]
    assert main([*argv, "--workers", "0", "1", "--rounds", "3", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["rounds"] == 3 and len(result["runs"]) == 4
    for run in result["runs"]:
        rates = run["rounds_crops_per_s"]
        assert len(rates) == 3 and run["crops_per_s"] == sorted(rates)[1]
        assert run["yielded"] == 6
    first = {run["workers"]: run["crops_per_s"] for run in result["runs"][:2]}
    for run in result["runs"]:
        assert run["relative"] == pytest.approx(run["crops_per_s"] / first[run["workers"]])
    with pytest.raises(SystemExit):
        main([*argv, "--rounds", "0"])
    assert "--rounds: must be at least 1, not 0" in capsys.readouterr().err


@pytest.fixture(scope="module")
def mp4_minute(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A minute each of AAC and ALAC: long enough that crops seek far past
    FFmpeg's read-through distance, so open demuxers get reused."""
    from helpers import write_audio

    folder = tmp_path_factory.mktemp("mp4-minute")
    write_audio(folder / "src", "aac", "aac", 44100, 2, 60.0, seed=1)
    write_audio(folder / "src", "alac", "alac", 44100, 1, 60.0, seed=2)
    streamer.pack(folder / "src", folder / "dataset", progress=False)
    return folder / "dataset"


@pytest.mark.parametrize("workers", [0, 1, 2])
def test_mp4_crops_read_only_their_plan_whoever_decodes_them(
    mp4_minute: Path, workers: int
) -> None:
    """The planner cannot see which demuxers a decode worker (or another
    thread) holds open: whichever decodes a crop, it needs no byte outside
    the plan, and the crop is the one ``read_crop`` gives."""
    s = Streamer(mp4_minute, SequentialCrops(2.0, hop=1.5), workers=workers, prefetch=6)
    crops = list(s)
    assert len(crops) == 2 * 40 and not s.stats.skipped
    assert s.stats.decode.unplanned_reads == 0
    reference = streamer.open_dataset(mp4_minute)
    for crop in crops[::7]:
        np.testing.assert_array_equal(
            crop.audio, reference.read_crop(crop.key, crop.start, crop.end)
        )


def test_a_worker_gets_an_mp4_header_once_per_episode(
    mp4_minute: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Remote MP4 crops ship without ``moov`` (megabytes for a long
    audiobook) unless the worker has no open demuxer for the episode that
    suits the crop: then it asks for it. Here that is twice per episode:
    its first crop, and the crop at its very start (which always takes a
    fresh demuxer: seeking back to 0 would lose the priming); the other 76
    crops decode the same without it."""
    from servers import LoopbackServer, file_handler

    import streamer.pipeline.pool as pool

    sent: list[int] = []
    send = pool.send_held_back
    monkeypatch.setattr(
        pool, "send_held_back", lambda conn, pieces: (sent.append(len(pieces)), send(conn, pieces))
    )
    server = LoopbackServer(file_handler(mp4_minute.parent)).start()
    try:
        url = f"{server.url}/{mp4_minute.name}"
        s = Streamer(url, SequentialCrops(2.0, hop=1.5), workers=1, prefetch=6)
        crops = list(s)
    finally:
        server.stop()
    assert len(crops) == 2 * 40 and not s.stats.skipped
    assert len(sent) == 2 * 2 and s.stats.decode.unplanned_reads == 0
    reference = streamer.open_dataset(mp4_minute)
    for crop in crops[::7]:
        np.testing.assert_array_equal(
            crop.audio, reference.read_crop(crop.key, crop.start, crop.end)
        )
