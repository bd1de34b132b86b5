"""What a Streamer leaves behind: a dropped one stops its workers, a forked
child does not touch its parent's, and many in a row leak nothing."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import select
import signal
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import gone

import streamer
from streamer import RandomCrops, Streamer
from streamer.storage.loop import run_sync

SAMPLER = RandomCrops(0.5, per_episode=10)


def ended(exits: list[int]) -> None:
    """Wait until the processes of these pidfds have ended (each becomes readable)."""
    for exit in exits:
        assert select.select([exit], [], [], 30)[0] == [exit]
        os.close(exit)


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.mark.timeout(60)
@pytest.mark.anyio
async def test_a_streamer_dropped_in_the_middle_of_a_pass_stops_its_workers(
    packed: Path,
) -> None:
    """A bare ``async for`` whose body raises leaves the pass open (Python
    gives async iterators no prompt finalizer); dropping the Streamer then
    stops it and its workers. The pass and the pool held the Streamer
    (bound methods), so it was never collected: workers idle until exit."""
    s = Streamer(streamer.open_dataset(packed), SAMPLER, workers=1)
    with pytest.raises(ZeroDivisionError):
        async for _ in s:
            pids = s.worker_pids
            1 / 0  # noqa: B018
    assert pids
    exits = [os.pidfd_open(pid) for pid in pids]
    dropped = weakref.ref(s)
    del s
    # A crop being planned in a thread when the body raised holds the
    # Streamer (``_plan_at``, bound) until that plan is done: a moment, not
    # for good as the pass and the pool did. The last reference may so go on
    # the store loop, whose finalizer stops the workers from a task.
    deadline = time.monotonic() + 5.0
    gc.collect()
    while dropped() is not None:
        assert time.monotonic() < deadline, "the dropped Streamer is still referenced"
        time.sleep(0.02)
        gc.collect()
    ended(exits)


@pytest.mark.timeout(120)
def test_a_forked_child_leaves_its_parents_workers_alone(packed: Path) -> None:
    """A child forked in the middle of a pass (a DataLoader worker or a
    ``multiprocessing`` child started by fork) finishes the pass with
    workers of its own, closes it, and exits: the parent's workers and pass
    go on untouched. The child used to stop the parent's workers (closing
    the inherited pool sent them the stop message; so did its exit hook),
    costing the parent restarts and crops in flight."""
    s = Streamer(streamer.open_dataset(packed), SAMPLER, workers=2, seed=1)
    everything = [(c.key, c.start) for c in Streamer(s.sources[0][0], SAMPLER, workers=0, seed=1)]
    it = iter(s)
    first = [(c.key, c.start) for c in (next(it), next(it), next(it))]
    pids = s.worker_pids
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover (the child reports through the pipe)
        code = 1
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        signal.alarm(60)  # a child that hangs (it did) ends, and the parent reads EOF
        try:
            rest = [(c.key, c.start) for c in it]
            theirs = s.worker_pids  # gone by now: the pass ended and closed them
            s.close()
            ok = first + rest == everything and not set(theirs) & set(pids)
            os.write(write, b"ok" if ok else repr((len(rest), theirs, pids)).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read, "rb") as said:
        report = said.read()
    _, status = os.waitpid(child, 0)
    assert report == b"ok" and os.waitstatus_to_exitcode(status) == 0
    assert s.worker_pids == pids and not any(gone(pid) for pid in pids)
    rest = [(c.key, c.start) for c in it]
    assert first + rest == everything and s.stats.worker_restarts == 0
    assert all(gone(pid) for pid in pids)


@pytest.mark.timeout(120)
def test_a_forked_child_exiting_normally_leaves_its_parents_workers_alone(packed: Path) -> None:
    """Its exit hook (the Streamer's finalizer, at ``sys.exit``) used to stop them."""
    s = Streamer(streamer.open_dataset(packed), SAMPLER, workers=2, seed=1)
    it = iter(s)
    first = [next(it) for _ in range(3)]
    pids = s.worker_pids
    child = os.fork()
    if child == 0:  # pragma: no cover
        try:
            weakref.finalize._exitfunc()  # type: ignore[attr-defined]  # what sys.exit runs
        finally:
            os._exit(0)
    os.waitpid(child, 0)
    assert not any(gone(pid) for pid in pids)
    assert len(first) + len(list(it)) == 70 and s.stats.worker_restarts == 0


@pytest.mark.timeout(60)
def test_a_streamer_collected_on_the_store_loop_stops_without_an_error(
    packed: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The last reference to a Streamer can go on the store loop (a crop
    being planned there). Its finalizer then closed the pool under the
    running pass, blocking that loop while the workers stopped, and the
    pass logged ``the crop pipeline failed: RuntimeError: the worker pool
    is closed``: now the pass is stopped first, then the workers, without
    blocking the loop."""
    s = Streamer(streamer.open_dataset(packed), SAMPLER, workers=1)
    it = iter(s)
    next(it)
    pids = s.worker_pids
    exits = [os.pidfd_open(pid) for pid in pids]
    holder = [s, it]
    del s, it

    async def drop() -> None:  # on the store loop, as a finalizer there would
        holder.clear()
        gc.collect()

    run_sync(drop())
    ended(exits)
    run_sync(asyncio.sleep(0))
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text


def _in_a_child(body: Callable[[], bytes], seconds: int = 30) -> bytes:
    """What ``body`` returns, run in a forked child (which ends after
    ``seconds`` if it hangs: the parent then reads nothing)."""
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover (the child reports through the pipe)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        signal.alarm(seconds)
        try:
            os.write(write, body())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as said:
        report = said.read()
    os.waitpid(child, 0)
    return report


def _collecting_while_the_loop_starts() -> None:
    """Have the next store loop's creation run a garbage collection, as an
    allocation there can."""
    new_event_loop = asyncio.new_event_loop

    def collecting() -> asyncio.AbstractEventLoop:
        gc.enable()
        gc.collect()
        return new_event_loop()

    asyncio.new_event_loop = collecting  # type: ignore[assignment]


@pytest.mark.timeout(60)
def test_a_parents_dropped_iteration_collected_in_a_child_does_not_hang_it(
    packed: Path,
) -> None:
    """A child forked (a DataLoader worker) while the parent held an
    abandoned iteration in a reference cycle collects that garbage at its
    first allocations: when that happened as the child started its store
    loop, the iteration's cleanup waited for the loop being started, under
    the same lock, and the worker hung for good (a StatefulDataLoader resume
    stopped after 300 s in CI)."""
    s = Streamer(streamer.open_dataset(packed), SAMPLER, workers=0, seed=1)
    gc.disable()
    try:
        it = iter(s)
        next(it)
        cycle: list[object] = [it, s]
        cycle.append(cycle)
        del it, s, cycle

        def child() -> bytes:
            _collecting_while_the_loop_starts()
            crops = Streamer(streamer.open_dataset(packed), SAMPLER, workers=0, seed=1)
            return b"%d" % len(list(crops))

        assert _in_a_child(child) == b"70"
    finally:
        gc.enable()
        gc.collect()


@pytest.mark.timeout(60)
def test_a_finalizer_needing_the_store_loop_while_it_starts_gets_that_loop() -> None:
    """The store loop's lock is reentrant: a finalizer that needs the loop,
    run by a collection on the thread creating it, gets a loop, and the
    one loop serves everything after (no second one left running)."""

    def child() -> bytes:
        from streamer.storage import loop

        new_event_loop = asyncio.new_event_loop
        inner: list[asyncio.AbstractEventLoop] = []

        def reentering() -> asyncio.AbstractEventLoop:
            asyncio.new_event_loop = new_event_loop  # type: ignore[assignment]
            inner.append(loop.background_loop())  # what such a finalizer calls
            return new_event_loop()

        asyncio.new_event_loop = reentering  # type: ignore[assignment]
        outer = loop.background_loop()
        threads = [t for t in threading.enumerate() if t.name == "streamer-storage"]
        deadline = time.monotonic() + 10
        while len(threads) > 1 and time.monotonic() < deadline:  # the spare one stops
            time.sleep(0.01)
            threads = [t for t in threading.enumerate() if t.name == "streamer-storage"]
        same = inner == [outer] and loop.background_loop() is outer
        return b"ok" if same and len(threads) == 1 else repr((inner, outer, threads)).encode()

    assert _in_a_child(child) == b"ok"


@pytest.mark.timeout(60)
def test_a_collection_on_the_store_loop_as_it_starts_does_not_hang_the_process(
    packed: Path,
) -> None:
    """A DataLoader worker forked after a pass in the main process inherits
    that pass's Streamer as uncollected garbage (a reference cycle). Its
    finalizer asks whether it runs on the store loop, which took the
    loop's lock: collected on the new store loop's thread while it started
    (an allocation there), it waited for the lock that the thread starting
    the loop held while waiting for the loop to run. Both waited forever:
    the worker hung (the 240 s deadline of tests/test_training.py)."""
    gc.disable()
    try:
        dropped: list[object] = [Streamer(streamer.open_dataset(packed), SAMPLER, workers=0)]
        dropped.append(dropped)
        del dropped

        def child() -> bytes:
            from streamer.storage import loop

            new_event_loop = asyncio.new_event_loop

            def collecting_first() -> asyncio.AbstractEventLoop:
                made = new_event_loop()
                made.call_soon(gc.collect)  # the loop's first step: the thread runs the loop
                return made

            asyncio.new_event_loop = collecting_first  # type: ignore[assignment]
            started = loop.background_loop()
            asyncio.new_event_loop = new_event_loop  # type: ignore[assignment]
            ran = run_sync(asyncio.sleep(0, "ran"))
            return b"ok" if ran == "ran" and loop.background_loop() is started else b"no"

        assert _in_a_child(child, seconds=10) == b"ok"
    finally:
        gc.enable()
        gc.collect()


def _locks_and_uses(packed: Path) -> dict[str, tuple[Callable[[], Any], Callable[[], object]]]:
    """For each lock a thread of the main process may hold when a DataLoader
    forks (in the middle of making a store, logging, decoding an mp4 crop,
    opening or checking a shard of a dataset handed to the workers open,
    as a ``Mix`` is): how to find it, and what a worker does that takes it."""
    from streamer.formats.mp4 import decode as mp4
    from streamer.storage import _urls, registry

    data = streamer.open_dataset(packed)
    name = data.listed_shards[-1]
    return {
        "store registry": (lambda: registry._lock, lambda: streamer.open_dataset(packed)),
        "log redaction": (lambda: _urls._secrets_lock, lambda: _urls.redact("a log line")),
        "mp4 demuxers": (lambda: mp4._DEMUXERS._lock, lambda: mp4._DEMUXERS.take(("x", 0))),
        "shard opening": (
            lambda: data._opening.setdefault((data.audio_dir, name), threading.Lock()),
            lambda: data.shard(name),
        ),
        "shard check": (lambda: data._checking, lambda: data.shard_names),
    }


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "held", ["store registry", "log redaction", "mp4 demuxers", "shard opening", "shard check"]
)
def test_a_lock_another_thread_held_at_the_fork_does_not_hang_the_child(
    packed: Path, held: str
) -> None:
    """``fork`` copies a lock as it is; a lock another thread held is held
    in the child for good, where that thread does not exist. The child
    waited forever as soon as it made a store, logged, decoded an mp4
    crop, or opened a shard of a dataset it was handed open. Each is made
    anew in a forked child."""
    find, use = _locks_and_uses(packed)[held]
    lock = find()
    taken, done = threading.Event(), threading.Event()

    def holding() -> None:
        with lock:
            taken.set()
            done.wait()

    holder = threading.Thread(target=holding)
    holder.start()
    taken.wait()
    try:

        def child() -> bytes:
            use()
            return b"ok"

        assert _in_a_child(child, seconds=10) == b"ok"
    finally:
        done.set()
        holder.join()


class _SlowCrops:
    """``run.attempt`` made to take ``seconds`` a crop (a long decode), noting
    each crop's thread, its start and its end."""

    def __init__(self, seconds: float) -> None:
        import streamer.pipeline.run as run_module

        self._attempt = run_module.attempt
        self.seconds = seconds
        self.threads: set[threading.Thread] = set()
        self.started = self.finished = 0
        self.second = threading.Event()

    def __call__(self, task: Any, **options: Any) -> Any:
        self.threads.add(threading.current_thread())
        self.started += 1
        if self.started == 2:
            self.second.set()
        try:
            time.sleep(self.seconds)
            return self._attempt(task, **options)
        finally:
            self.finished += 1


@pytest.mark.parametrize("how", ["break", "close", "torch"])
def test_a_pass_broken_off_without_workers_leaves_no_decoding_thread(
    packed: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """Leaving a ``workers=0`` pass (``break``, ``close()``, a ``CropDataset``
    loop without DataLoader workers) while its thread decodes a crop waits
    for that crop: a fork right after the loop (DataLoader workers starting)
    took a copy of a thread mid-FFmpeg call, which then ran on alone for a
    moment after the loop was left; the thread is gone once the loop is."""
    import streamer.pipeline.run as run_module

    slow = _SlowCrops(0.4)
    monkeypatch.setattr(run_module, "attempt", slow)
    if how == "torch":
        torch_adapter = pytest.importorskip("streamer.torch")
        loop = iter(torch_adapter.CropDataset(str(packed), SAMPLER, seed=1, workers=0))
    else:
        stream = Streamer(streamer.open_dataset(packed), SAMPLER, seed=1, workers=0, prefetch=2)
        loop = iter(stream)
    next(loop)
    assert slow.second.wait(10)  # the next crop is being decoded
    if how == "close":
        stream.close()
        with pytest.raises(RuntimeError):
            next(loop)
    else:
        del loop  # what `break` does to the loop's iterator
    assert slow.finished == slow.started, "the loop was left while its crop was decoded"
    alive = [t.name for t in threading.enumerate() if t in slow.threads]
    assert not alive, f"still running after the loop was left: {alive}"


def test_a_decoding_thread_that_does_not_finish_is_named_and_left(
    packed: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The wait for the crop under way is bounded: past it, one WARNING names
    the thread and the crop, and the loop is left all the same."""
    import streamer.pipeline.run as run_module

    slow = _SlowCrops(1.0)
    monkeypatch.setattr(run_module, "attempt", slow)
    monkeypatch.setattr(run_module, "DECODING_STOP_TIMEOUT", 0.2)
    stream = Streamer(streamer.open_dataset(packed), SAMPLER, seed=1, workers=0, prefetch=2)
    loop = iter(stream)
    next(loop)
    assert slow.second.wait(10)
    began = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="streamer.pipeline.run"):
        del loop
    assert time.monotonic() - began < 0.9
    warned = [r.getMessage() for r in caplog.records if "decoding thread" in r.getMessage()]
    assert len(warned) == 1 and "streamer-decode-" in warned[0] and "the crop of" in warned[0]
    for thread in slow.threads:
        thread.join(5)  # leave nothing running behind the test
        assert not thread.is_alive()
