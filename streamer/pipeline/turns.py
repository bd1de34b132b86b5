"""Places handed out by rank: which waiting batch of crops decodes next."""

from __future__ import annotations

import contextlib
import heapq
import itertools
from collections.abc import AsyncIterator

import anyio

__all__ = ["Turns"]


class Turns:
    """``size`` places (decode workers), handed to waiting batches lowest rank first.

    Batches become ready in the order their bytes arrive, not the order the
    consumer takes them: a batch further ahead whose fetch finished first
    would otherwise take the worker while the one the consumer waits for
    queues behind it. Measured over S3 with 50 ms of latency, one worker,
    200 crops: the tenth crop of a pass came after 280 ms instead of
    360-440, the pass took 1.91-1.95 s instead of 1.99-2.12."""

    def __init__(self, size: int) -> None:
        self._free = size
        self._waiting: list[tuple[int, int, _Waiter]] = []  # a heap
        self._arrivals = itertools.count()

    @contextlib.asynccontextmanager
    async def turn(self, rank: int) -> AsyncIterator[None]:
        """Hold a place for the block, waiting behind lower ranks (and earlier
        arrivals of the same rank)."""
        await self._acquire(rank)
        try:
            yield
        finally:
            self._release()

    async def _acquire(self, rank: int) -> None:
        if self._free and not self._waiting:
            self._free -= 1
            return
        waiter = _Waiter()
        heapq.heappush(self._waiting, (rank, next(self._arrivals), waiter))
        try:
            await waiter.granted.wait()
        except BaseException:
            if waiter.granted.is_set():  # granted, then cancelled: pass it on
                self._release()
            else:
                waiter.gone = True
            raise

    def _release(self) -> None:
        while self._waiting:
            waiter = heapq.heappop(self._waiting)[2]
            if not waiter.gone:
                waiter.granted.set()
                return
        self._free += 1


class _Waiter:
    __slots__ = ("gone", "granted")

    def __init__(self) -> None:
        self.granted = anyio.Event()
        self.gone = False
