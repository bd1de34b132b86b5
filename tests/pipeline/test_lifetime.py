"""What a Streamer leaves behind: a dropped one stops its workers, a forked
child does not touch its parent's, and many in a row leak nothing."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import select
import signal
import weakref
from pathlib import Path

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
    gc.collect()
    assert dropped() is None
    # The last reference may go on the store loop (a crop being planned
    # there), whose finalizer stops the workers from a task: wait for them.
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
