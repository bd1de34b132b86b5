"""Decode worker processes: the same audio as in-process decoding, shutdown on break, error and
Ctrl-C, a killed worker replaced, MP4 headers shipped only when a worker needs them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from helpers import gone

import streamer
from streamer import RandomCrops, SequentialCrops, Streamer
from streamer.dataset import Dataset
from streamer.errors import ShardError


def test_workers_do_not_change_the_audio(packed: Path) -> None:
    dataset = streamer.open_dataset(packed)
    sampler = RandomCrops(1.0, per_episode=3)
    threads = list(Streamer(dataset, sampler, seed=5, workers=0))
    processes = list(Streamer(dataset, sampler, seed=5, workers=2))
    for a, b in zip(threads, processes, strict=True):
        assert np.array_equal(a.audio, b.audio), a.key


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


def test_a_pool_closes_once_whoever_closes_it() -> None:
    """An interrupted pass and a Streamer's exit hook may both close its pool
    (they did, from two threads, and the second's ``os.close`` of the arena
    printed a traceback after "interrupted")."""
    from streamer.pipeline.pool import WorkerPool
    from streamer.storage.loop import run_sync

    pool = WorkerPool(1)
    run_sync(pool.start())
    pids = pool.pids
    pool.close()
    pool.close()
    assert pids and all(gone(pid) for pid in pids)


# -- MP4 demuxers held open by workers -------------------------------------------------


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
    # The AAC episode decodes to 60.0186 s (its last frame whole): a 41st
    # window starts at 60 s; ALAC's 60 s take 40.
    assert len(crops) == 41 + 40 and not s.stats.skipped
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
    fresh demuxer: seeking back to 0 would lose the priming); the other 77
    crops decode the same without it."""
    import streamer.pipeline.pool as pool
    from testkit.servers import LoopbackServer, file_handler

    sent: list[int] = []
    read = pool.read_deferred  # for a worker that asks
    monkeypatch.setattr(pool, "read_deferred", lambda job: (sent.append(1), read(job))[1])
    server = LoopbackServer(file_handler(mp4_minute.parent)).start()
    try:
        url = f"{server.url}/{mp4_minute.name}"
        s = Streamer(url, SequentialCrops(2.0, hop=1.5), workers=1, prefetch=6)
        crops = list(s)
    finally:
        server.stop()
    assert len(crops) == 41 + 40 and not s.stats.skipped
    assert len(sent) == 2 * 2 and s.stats.decode.unplanned_reads == 0
    reference = streamer.open_dataset(mp4_minute)
    for crop in crops[::7]:
        np.testing.assert_array_equal(
            crop.audio, reference.read_crop(crop.key, crop.start, crop.end)
        )


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


@pytest.mark.parametrize("shipped", [False, True], ids=["mapped", "shipped"])
def test_a_worker_killed_mid_batch_loses_no_crop(
    packed: Path, unindexed: Path, shipped: bool
) -> None:
    """A batch of four crops whose third SIGKILLs its worker when it reads,
    after the first two were decoded into shared memory but not answered:
    the batch's crops are tried again one at a time, the good ones come back
    right (their regions written twice, by the dead worker and its
    replacement), the killer fails as ``WorkerDied`` once it has killed
    twice on its own, every death is counted, and every region is released
    once the crops are dropped. ``shipped``: the good crops' bytes travel
    as a remote shard's do, through shared memory (``tasks.ship``), and stay
    there for the retries."""
    import gc

    from stores import KILL_ON_READ, SabotagedStore

    from streamer.decode.crop import CropRequest, fetch, prepare
    from streamer.pipeline.pool import WorkerPool
    from streamer.pipeline.tasks import Failure, Task
    from streamer.storage.loop import run_sync

    good = streamer.open_dataset(packed)
    killer = Dataset(unindexed, store=SabotagedStore(KILL_ON_READ))
    requests = [CropRequest(key, 0.25, 1.25) for key in list(good.keys())[:4]]
    jobs = [prepare(good.episode(r.key), r) for r in requests]
    jobs[2] = prepare(killer.episode(requests[2].key), requests[2])
    assert jobs[2].plan is None  # read from the blob in the worker: it dies there

    async def decode() -> None:
        pool = WorkerPool(1)
        try:
            await pool.start()
            tasks = [Task(j, fetch(j) if shipped and j.plan else None) for j in jobs]
            answers = [answer for answer, _ in await pool.run_batch(tasks)]
            assert pool.restarts == 3  # the batch, then the killer alone, twice
            failed = answers.pop(2)
            assert isinstance(failed, Failure) and failed.reason == "WorkerDied", failed
            for crop, request in zip(answers, requests[:2] + requests[3:], strict=True):
                assert not isinstance(crop, Failure), crop
                expected = good.read_crop(request.key, request.start, request.end)
                np.testing.assert_array_equal(crop.audio, expected)
            assert pool.arena is not None and pool.arena.leased > 0  # the crops' regions
            del answers, crop
            gc.collect()
            assert pool.arena.leased == 0
        finally:
            pool.close()

    run_sync(decode())


def test_crops_go_to_a_worker_in_batches(packed: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With room for two batches per worker, a worker gets four crops per
    message (the parent's cost is per message), every crop in one batch,
    each batch ranked by its first crop's place in the epoch (the waiting
    batch the consumer needs first gets the next free worker)."""
    from streamer.pipeline.pool import WorkerPool
    from streamer.pipeline.run import MAX_BATCH

    sizes: list[int] = []
    ranks: list[int] = []
    run_batch = WorkerPool.run_batch

    async def recording(self: WorkerPool, tasks: list, *, rank: int) -> list:  # type: ignore[type-arg]
        sizes.append(len(tasks))
        ranks.append(rank)
        return await run_batch(self, tasks, rank=rank)

    monkeypatch.setattr(WorkerPool, "run_batch", recording)
    sampler = RandomCrops(0.5, per_episode=4)
    dataset = streamer.open_dataset(packed)
    crops = list(Streamer(dataset, sampler, seed=3, workers=1, prefetch=2 * MAX_BATCH))
    assert len(crops) == sum(sizes) == 28 and sizes == [MAX_BATCH] * 7
    assert sorted(ranks) == list(range(0, 28, MAX_BATCH))
    threads = list(Streamer(dataset, sampler, seed=3, workers=0))
    for a, b in zip(threads, crops, strict=True):
        assert np.array_equal(a.audio, b.audio), a.key


def test_a_worker_that_stops_writes_its_phase_figures_and_is_gone(
    packed: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Workers leave through ``os._exit`` (no interpreter teardown): what the
    exit hooks would write must still be written."""
    monkeypatch.setenv("STREAMER_TIMING", "1")
    monkeypatch.setenv("STREAMER_TIMING_OUT", str(tmp_path / "timing"))
    monkeypatch.setenv("STREAMER_TIMING_INTERVAL", "3600")  # only the exit writes
    dataset = streamer.open_dataset(packed)
    stream = Streamer(dataset, SequentialCrops(0.5), workers=2, max_crops=6)
    with stream:
        pids = stream.worker_pids
        assert len(list(stream)) == 6
    assert all(gone(pid) for pid in pids)
    written = {int(path.suffix[1:]): json.loads(path.read_text()) for path in tmp_path.iterdir()}
    assert set(pids) <= set(written)
    decoded = sum(written[pid]["phases"].get("decode", [0])[0] for pid in pids)
    assert decoded == 6, written
