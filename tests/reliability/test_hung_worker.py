"""A decode worker that hangs (SIGSTOP, a debugger, a deadlock) owes an answer
that will never come: it is killed once it has used no CPU for the stall
timeout, its crops are retried on a replacement like a dead worker's, and the
restart budget bounds how often. So is one stuck in an endless loop, which
uses CPU: once a batch has cost it more than its CPU budget. Real worker
processes, real SIGSTOP, a real endless loop."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from helpers import gone

import streamer
from streamer import ListCrops, RandomCrops, Streamer, WorkerDied
from streamer.pipeline import pool

SAMPLER = RandomCrops(0.5, per_episode=4)  # 28 crops over the 7 episodes of ``packed``


@pytest.fixture(autouse=True)
def short_stall(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pool, "STALL_TIMEOUT", 0.5)
    monkeypatch.setattr(pool, "_STALL_CHECK", 0.1)


def stop_all(pids: list[int]) -> None:
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)


def replaced_losing_no_crop(
    packed: Path, workers: int, disturb: Callable[[list[int]], None], after: tuple[int, ...]
) -> Streamer:
    """Every worker ``disturb``-ed after each count of crops in ``after``: the
    pass yields the whole epoch, exact, within 30 s, and the disturbed workers
    are gone. Returns the Streamer, for its stats."""
    dataset = streamer.open_dataset(packed)
    reference = list(Streamer(dataset, SAMPLER, seed=3, workers=0))
    s = Streamer(dataset, SAMPLER, seed=3, workers=workers)
    crops, seen = [], []
    began = time.monotonic()
    with s:
        for crop in s:
            crops.append(crop)
            if len(crops) in after:
                seen += s.worker_pids
                disturb(s.worker_pids)
    assert time.monotonic() - began < 30
    assert len(crops) == len(reference) == 28 and not s.stats.skipped
    for a, b in zip(reference, crops, strict=True):
        assert (a.key, a.start) == (b.key, b.start)
        np.testing.assert_array_equal(a.audio, b.audio)
    assert all(gone(pid) for pid in seen)
    return s


@pytest.mark.timeout(60)
@pytest.mark.parametrize("workers", [1, 2])
def test_stopped_workers_are_replaced_and_lose_no_crop(packed: Path, workers: int) -> None:
    # twice, the second time their replacements
    s = replaced_losing_no_crop(packed, workers, stop_all, after=(2, 10))
    assert s.stats.worker_restarts >= 2


def raises_past_the_budget(packed: Path, disturb: Callable[[list[int]], None], said: str) -> None:
    """With no restart allowed, the worker ``disturb``-ed after the first crop
    ends the iteration with ``WorkerDied`` matching ``said``; the position is
    the crops taken, and the worker is gone."""
    s = Streamer(streamer.open_dataset(packed), SAMPLER, workers=1, max_worker_restarts=0)
    taken = 0
    with pytest.raises(WorkerDied, match=said):
        for _ in s:
            taken += 1
            if taken == 1:
                pids = s.worker_pids
                disturb(pids)
    assert 1 <= taken < 28 and s.state_dict()["position"] == taken
    assert all(gone(pid) for pid in pids)


@pytest.mark.timeout(60)
def test_a_stopped_worker_past_the_budget_raises_saying_it_hung(packed: Path) -> None:
    raises_past_the_budget(packed, stop_all, r"hung \(no CPU used for 0.5 s\).*restart budget")


@pytest.mark.timeout(120)
def test_a_worker_waiting_on_its_own_store_is_not_taken_for_hung(  # type: ignore[no-untyped-def]
    s3, s3_uploaded, make_store, packed: Path, tmp_path: Path
) -> None:
    """Without an index a worker reads a remote blob through its own store: a
    slow answer (longer than the stall timeout) is waited for, since the
    store's own budget ends that wait, not killed as a hang (which turned a
    slow or briefly failing store into crops skipped as WorkerDied)."""
    import shutil
    import uuid

    from streamer import ListCrops
    from streamer.dataset import Dataset

    local = tmp_path / "unindexed"
    shutil.copytree(packed, local, ignore=shutil.ignore_patterns("seek_index", "*manifest*"))
    store = make_store("s3", s3.url)
    prefix = f"{s3_uploaded}/unindexed-{uuid.uuid4().hex[:8]}"
    for path in sorted(local.rglob("*")):
        if path.is_file():
            store.put_sync(f"{prefix}/{path.relative_to(local).as_posix()}", path)
    keys = sorted(streamer.open_dataset(local).keys())[:2]
    sampler = ListCrops([(key, 0.1, 0.6) for key in keys])
    expected = list(Streamer(streamer.open_dataset(local), sampler, workers=0))
    s = Streamer(Dataset(prefix, store=store), sampler, workers=1, max_worker_restarts=0)
    s.total()  # the dataset is open: what is slow from here on is the worker's reads
    s3.faults.latency = 1.5  # three stall timeouts
    with s:
        crops = list(s)
    assert [(c.key, c.start) for c in crops] == [(c.key, c.start) for c in expected]
    for a, b in zip(expected, crops, strict=True):
        np.testing.assert_array_equal(a.audio, b.audio)
    assert not s.stats.skipped and s.stats.worker_restarts == 0


#: Started in every worker of the test (``sitecustomize`` on its path): on
#: SIGUSR2 the worker's main thread loops forever, as a decoder could on
#: hostile data, using CPU all the while.
SPINNER = """
import signal


def _spin(signum, frame):
    while True:
        pass


signal.signal(signal.SIGUSR2, _spin)
"""


@pytest.fixture
def spinning_workers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "spinner").mkdir()
    (tmp_path / "spinner" / "sitecustomize.py").write_text(SPINNER)
    monkeypatch.syspath_prepend(str(tmp_path / "spinner"))  # the workers' PYTHONPATH
    monkeypatch.setattr(pool, "SPIN_TIMEOUT", 1.0)


def spin_all(pids: list[int]) -> None:
    for pid in pids:
        os.kill(pid, signal.SIGUSR2)


@pytest.mark.timeout(60)
@pytest.mark.usefixtures("spinning_workers")
def test_workers_stuck_in_a_loop_are_replaced_and_lose_no_crop(packed: Path) -> None:
    s = replaced_losing_no_crop(packed, 2, spin_all, after=(2,))
    assert s.stats.worker_restarts >= 1


@pytest.mark.timeout(60)
@pytest.mark.usefixtures("spinning_workers")
def test_a_stuck_worker_past_the_budget_raises_saying_it_was_stuck(packed: Path) -> None:
    raises_past_the_budget(packed, spin_all, r"stuck \(over [\d.]+ s of CPU on one batch\)")


@pytest.mark.timeout(60)
def test_a_worker_stopped_while_sending_samples_through_its_pipe_is_replaced(
    packed: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No shared memory: every crop's samples come through the pipe, and the
    # worker is stopped as the parent begins to read a batch's megabytes (the
    # socket holds a fraction: the worker is blocked halfway through sending).
    # The read blocked the store loop, the stall watch with it: a hang for good.
    monkeypatch.setattr(pool.arena, "ARENA_BYTES", 0)
    sampler = RandomCrops(2.5, per_episode=2)
    reference = list(Streamer(streamer.open_dataset(packed), sampler, seed=5, workers=0))
    s = Streamer(streamer.open_dataset(packed), sampler, seed=5, workers=1)
    receive, stopped = pool.receive_piped, []

    def receive_with_the_worker_stopped(conn, heads, piped):  # type: ignore[no-untyped-def]
        size = sum(int(np.prod(heads[n][2][0])) * np.dtype(heads[n][2][1]).itemsize for n in piped)
        if not stopped and size > 1 << 20:
            stopped.extend(s.worker_pids)
            stop_all(stopped)
        return receive(conn, heads, piped)

    monkeypatch.setattr(pool, "receive_piped", receive_with_the_worker_stopped)
    same_crops_after_a_restart(s, reference, stopped)


# -- a worker stopped with a message half-way through its pipe --------------------
#
# Writing a message larger than the socket holds (about 200 KB) to a worker
# that does not read blocks; so does reading one it stopped writing. On the
# store's loop that blocked every store read of the process and the stall
# watch with it: a hang for good, Ctrl-C too (and the teardown of a test
# timed out by a signal: these time out by a thread, which ends the run).
# Each test stops the worker at such a moment, once.


@pytest.fixture(scope="module")
def long_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Half an hour of AAC (its ``moov``: 330 KB) and 20 s of 48 kHz stereo
    WAV, packed: the folder a loopback HTTP server serves (``served``)."""
    from _index_support import long_m4a
    from helpers import write_audio

    folder = tmp_path_factory.mktemp("long-files")
    (folder / "src").mkdir()
    (folder / "src" / "book.m4a").write_bytes(long_m4a(30))
    write_audio(folder / "src", "talk", "wav", 48000, 2, 20.0, seed=4)
    streamer.pack(folder / "src", folder / "dataset", progress=False)
    return folder


@pytest.fixture
def served(long_files: Path) -> Iterator[str]:
    """The URL of ``long_files``'s dataset, served over HTTP on loopback."""
    from testkit.servers import LoopbackServer, file_handler

    server = LoopbackServer(file_handler(long_files)).start()
    yield f"{server.url}/dataset"
    server.stop()


def same_crops_after_a_restart(s: Streamer, reference: list, stopped: list[int]) -> None:
    """``s``'s pass yields ``reference``'s crops, exact, its stopped workers replaced."""
    with s:
        crops = list(s)
    assert stopped and all(gone(pid) for pid in stopped)
    assert s.stats.worker_restarts >= 1 and not s.stats.skipped
    assert [(c.key, c.start) for c in crops] == [(c.key, c.start) for c in reference]
    for a, b in zip(reference, crops, strict=True):
        np.testing.assert_array_equal(a.audio, b.audio)


@pytest.mark.timeout(60, method="thread")
def test_a_worker_stopped_as_the_parent_sends_it_an_mp4_header_is_replaced(
    long_files: Path, served: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A remote MP4 crop travels without its moov, which a worker without an
    # open demuxer asks for: stopped as the parent begins to write those 330 KB.
    sampler = ListCrops([("book", 600.0, 602.0), ("book", 1500.0, 1502.0)])
    reference = list(Streamer(long_files / "dataset", sampler, workers=0))
    s = Streamer(served, sampler, workers=1)
    read, stopped = pool.read_deferred, []

    def read_with_the_worker_stopped(job):  # type: ignore[no-untyped-def]
        pieces = read(job)
        if not stopped:
            assert sum(len(view) for _, view in pieces) > 300_000
            stopped.extend(s.worker_pids)
            stop_all(stopped)
        return pieces

    monkeypatch.setattr(pool, "read_deferred", read_with_the_worker_stopped)
    same_crops_after_a_restart(s, reference, stopped)


@pytest.mark.timeout(60, method="thread")
def test_a_worker_stopped_before_it_reads_its_batch_is_replaced(
    long_files: Path, served: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No shared memory: a remote crop's fetched bytes travel in the batch's
    # message (a 5 s WAV crop's are 960 KB), written to a worker stopped idle.
    monkeypatch.setattr(pool.arena, "ARENA_BYTES", 0)
    sampler = ListCrops([("talk", 2.0, 7.0), ("talk", 12.0, 17.0)])
    reference = list(Streamer(long_files / "dataset", sampler, workers=0))
    s = Streamer(served, sampler, workers=1)
    seal, stopped = pool.seal, []

    def seal_with_the_worker_stopped(task):  # type: ignore[no-untyped-def]
        if not stopped:
            assert task.fetched is not None and task.fetched.nbytes > 900_000
            stopped.extend(s.worker_pids)
            stop_all(stopped)
        return seal(task)

    monkeypatch.setattr(pool, "seal", seal_with_the_worker_stopped)
    same_crops_after_a_restart(s, reference, stopped)


@pytest.mark.timeout(60, method="thread")
def test_a_worker_stopped_halfway_through_a_long_answer_is_replaced(
    unindexed: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A failure's message can be long (a store's error quoting a page it got):
    # this answer's 500 KB stop after the first 200, the worker stopped as the
    # parent sees them begin. Its crops are answered on a replacement.
    from stores import SabotagedStore

    from streamer.dataset import Dataset
    from streamer.errors import ShardError

    error = ShardError("the store said: " + "x" * 250_000, shard="s.wsds", key="k", offset=0)
    dataset = Dataset(unindexed, store=SabotagedStore(error))
    sampler = RandomCrops(0.5)
    s = Streamer(dataset, sampler, workers=1)
    begun, stopped = pool._Worker.answer_begun, []

    async def begun_with_the_worker_stopped(self, stall, budget=None):  # type: ignore[no-untyped-def]
        await begun(self, stall, budget)
        if budget is not None and not stopped:  # an answer (not the ready message)
            stopped.append(self.pid)
            stop_all(stopped)

    monkeypatch.setattr(pool._Worker, "answer_begun", begun_with_the_worker_stopped)
    with s:
        assert list(s) == []
    assert stopped and all(gone(pid) for pid in stopped)
    assert s.stats.worker_restarts == 1 and s.stats.skipped == {"ShardError": 7}
