"""Requests and retries end with their readers.

A store that hangs on every read: an ``aread_crop`` cancelled by its caller,
and a Streamer closed while its planners open index shards, each left store
calls retrying in threads nobody waited for, until the whole outage budget
ran out (15 and 17 more requests over 15 s). Their calls are cancelled with
them now: the server hears nothing more.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from pathlib import Path

import pytest

import streamer
from testkit.servers import LoopbackServer, file_handler

OPTIONS = {
    "give_up_after": 15,
    "backoff": 0.05,
    "max_backoff": 0.2,
    "read_timeout": 0.7,
    "connect_timeout": 0.5,
    "block_size": 8192,
}


@pytest.fixture
def hanging(packed: Path):  # type: ignore[no-untyped-def]
    """(dataset opened over HTTP with its audio shards read, server): from
    now on every ranged GET hangs."""
    server = LoopbackServer(file_handler(packed.parent)).start()
    try:
        dataset = streamer.open_dataset(f"{server.url}/{packed.name}", **OPTIONS)
        assert len(dataset) > 0
        server.reset()
        server.faults.hangs, server.faults.stall_seconds = 10**6, 600
        yield dataset, server
    finally:
        server.reset()
        server.stop()


def _quiet_after(server: LoopbackServer, seconds: float) -> None:
    time.sleep(0.3)  # cancellations land
    sent = len(server.ranged())
    time.sleep(seconds)
    assert len(server.ranged()) == sent, "requests went on after their reader had gone"


def test_a_cancelled_aread_crop_takes_its_requests_along(hanging) -> None:  # type: ignore[no-untyped-def]
    dataset, server = hanging
    key = next(iter(dataset))

    async def cancelled() -> None:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(dataset.aread_crop(key, 0.5, 1.0), 1.0)

    asyncio.run(cancelled())
    assert server.ranged()  # it was asking
    _quiet_after(server, 2.0)


def test_a_closed_streamer_takes_its_planners_requests_along(hanging) -> None:  # type: ignore[no-untyped-def]
    dataset, server = hanging
    stream = streamer.Streamer(dataset, streamer.RandomCrops(0.5, per_episode=2), workers=0)
    threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT)).start()
    with pytest.raises(KeyboardInterrupt), stream:
        for _ in stream:
            pass
    assert server.ranged()
    _quiet_after(server, 2.0)
