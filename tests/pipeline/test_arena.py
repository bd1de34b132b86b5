"""Crops through shared memory: no copy in the parent, regions released with
the arrays, bounded memory, nothing left behind when workers are killed."""

from __future__ import annotations

import gc
import mmap
import os
import signal
from pathlib import Path

import numpy as np
import pytest

import streamer
from streamer import RandomCrops, Streamer
from streamer.pipeline import arena as arena_module
from streamer.pipeline.arena import Arena, crop_bytes

pytestmark = pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="no memfd_create")


def arena_files() -> list[str]:
    """This process's open shared memory files of crop arenas."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if "streamer-crops" in target:
            found.append(target)
    return found


def arena_maps() -> int:
    with open("/proc/self/maps") as maps:
        return sum("streamer-crops" in line for line in maps)


def test_regions_are_leased_first_fit_and_merged_when_released() -> None:
    arena = Arena(1 << 12)
    try:
        a, b, c = arena.lease(1000), arena.lease(1), arena.lease(1000)
        assert a and b and c
        assert (a.offset, a.capacity, b.offset, b.capacity, c.offset) == (0, 1024, 1024, 64, 1088)
        assert arena.lease(4096) is None and arena.piped == 1
        arena.release(b)
        arena.release(b)  # a second release of the same lease changes nothing
        assert arena.leased == 2048
        assert arena.lease(64).offset == 1024  # the freed hole, first
        arena.release(a)
        arena.release(c)
        assert arena.lease(0) is None
    finally:
        arena.close()


def test_an_array_holds_its_region_until_it_and_its_views_are_gone() -> None:
    arena = Arena(1 << 16)
    try:
        lease = arena.lease(4 * 2 * 100)
        array = arena.array(lease, (2, 100), "<f4")
        array[...] = 1.5
        view = array[1, 10:20]
        del array
        gc.collect()
        assert arena.leased == lease.capacity  # the view keeps it
        assert float(view.sum()) == 15.0
        del view
        gc.collect()
        assert arena.leased == 0
        again = arena.lease(800)
        assert again.offset == lease.offset
        arena.release(lease)  # a stale lease of the same region: ignored
        assert arena.leased == again.capacity
    finally:
        arena.close()


def test_worker_crops_arrive_in_shared_memory_and_equal_in_process_ones(packed: Path) -> None:
    dataset = streamer.open_dataset(packed)
    sampler = RandomCrops(0.5, per_episode=3)
    threads = list(Streamer(dataset, sampler, seed=4, workers=0, sample_rate=16000, mono=True))
    s = Streamer(dataset, sampler, seed=4, workers=2, sample_rate=16000, mono=True)
    with s:
        crops = list(s)
        pool = s._resources.pool
        assert pool is not None and pool.arena is not None
        held = pool.arena.leased
        assert pool.arena.piped == 0
    assert held >= sum(c.audio.nbytes for c in crops)  # every crop is in the arena
    for a, b in zip(threads, crops, strict=True):
        assert isinstance(b.audio.base, mmap.mmap) and not b.audio.flags.owndata
        np.testing.assert_array_equal(a.audio, b.audio, err_msg=a.key)
    job_bytes = [c.audio.nbytes for c in crops]
    assert all(n > 0 for n in job_bytes)
    del crops, b, pool
    gc.collect()
    assert arena_files() == []  # closed with the pool; the mapping went with the crops
    assert arena_maps() == 0


def test_a_consumer_holding_more_than_the_arena_gets_every_crop(
    packed: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An arena with room for about three crops: a consumer that keeps every
    crop fills it, later crops come through the pipe (counted), and all are
    right; the arena never holds more than its size."""
    dataset = streamer.open_dataset(packed)
    sampler = RandomCrops(0.5, per_episode=3)
    threads = list(Streamer(dataset, sampler, seed=6, workers=0))
    monkeypatch.setattr(arena_module, "ARENA_BYTES", 3 * 2 * 24000 * 4)
    s = Streamer(dataset, sampler, seed=6, workers=2)
    kept = []
    with s:
        for crop in s:
            kept.append(crop)
            assert s._resources.pool.arena.leased <= arena_module.ARENA_BYTES
        piped = s._resources.pool.arena.piped
    assert len(kept) == len(threads) and piped >= len(kept) - 6
    for a, b in zip(threads, kept, strict=True):
        np.testing.assert_array_equal(a.audio, b.audio, err_msg=a.key)


def test_a_worker_killed_mid_crop_leaves_no_region_and_no_file(packed: Path) -> None:
    """SIGKILL a worker while it decodes: its crop is retried, every crop is
    right, the dead worker's region is free again, and after the pool closes
    no shared memory file or name is left (``memfd``: none in /dev/shm)."""
    shm_before = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
    dataset = streamer.open_dataset(packed)
    sampler = RandomCrops(0.5, per_episode=4)
    threads = list(Streamer(dataset, sampler, seed=8, workers=0))
    s = Streamer(dataset, sampler, seed=8, workers=2, prefetch=2, queue_size=1)
    crops = []
    with s:
        for crop in s:
            crops.append(crop.audio.copy())
            if len(crops) in (3, 9):
                os.kill(s.worker_pids[0], signal.SIGKILL)
            del crop
        gc.collect()
        assert s._resources.pool.arena.leased == 0  # every region came back
    assert s.stats.worker_restarts >= 1 and not s.stats.skipped
    for a, b in zip(threads, crops, strict=True):
        np.testing.assert_array_equal(a.audio, b, err_msg=a.key)
    # The killed worker's exception and its traceback's frames form cycles
    # that may reach the pool until the next collection: nothing else may.
    gc.collect()
    assert arena_files() == [] and arena_maps() == 0
    if os.path.isdir("/dev/shm"):  # shared by every process of the machine: ours by name
        new = set(os.listdir("/dev/shm")) - shm_before
        assert not [name for name in new if "streamer" in name or "crops" in name], new


def test_crop_bytes_is_the_crop_size(packed: Path) -> None:
    from streamer.decode.crop import CropRequest, prepare

    dataset = streamer.open_dataset(packed)
    for key in sorted(dataset.keys()):
        for rate, mono in [(None, False), (16000, True), (8000, False)]:
            request = CropRequest(key, 0.1, 0.6, sample_rate=rate, mono=mono)
            job = prepare(dataset.episode(key), request)
            audio = dataset.read_crop(key, 0.1, 0.6, sample_rate=rate, mono=mono)
            assert crop_bytes(job) == audio.nbytes, (key, rate, mono)


def test_a_remote_task_travels_without_its_bytes(packed: Path) -> None:
    """``ship`` puts a task's fetched bytes in the arena and the task pickles
    small; ``unshipped`` gives the same bytes back, at the same offsets."""
    import pickle

    from streamer.decode.crop import CropRequest, fetch, prepare
    from streamer.pipeline.tasks import Task, ship, unshipped

    dataset = streamer.open_dataset(packed)
    key = sorted(dataset.keys())[0]
    job = prepare(dataset.episode(key), CropRequest(key, 0.2, 1.7))
    fetched = fetch(job)
    arena = Arena(1 << 22)
    try:
        task, lease = ship(Task(job, fetched), arena)
        assert lease is not None and task.fetched is None and task.shipped is not None
        assert len(pickle.dumps(task)) < len(pickle.dumps(Task(job, fetched))) - fetched.nbytes
        back = unshipped(pickle.loads(pickle.dumps(task)), arena._map).fetched
        assert back is not None
        assert [(o, bytes(v)) for o, v in back.pieces] == [(o, bytes(v)) for o, v in fetched.pieces]
        arena.release(lease)
        assert arena.leased == 0 and arena.piped == 0  # bytes that found no room are not crops
        small = Arena(64)
        try:
            assert ship(Task(job, fetched), small) == (Task(job, fetched), None)
            assert small.piped == 0
        finally:
            small.close()
    finally:
        arena.close()
