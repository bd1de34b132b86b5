"""Adaptive request control: how many requests one endpoint (and bucket prefix)
gets at once, and how many per second.

Object stores limit request rates per key prefix (S3 answers ``503 SlowDown``
past about 5 500 GETs/s per prefix; B2 allows a few hundred per second) and
say so with 503, 429 or ``SlowDown``, or by answering late. A fixed number
of requests in flight then either wastes the store's capacity or, across a
cluster of readers, keeps it saturated with requests that are refused and
retried. So every request of a store goes through the ``Throttle`` of its
endpoint and prefix (``RemoteStore._throttle_key``), which keeps an
adaptive concurrency limit, the way TCP keeps its congestion window:

* slow start: the limit starts at ``INITIAL`` and doubles each round of
  answers (one more per successful request) until the first congestion
  signal, so a new store neither bursts into a throttled one nor takes long
  to reach ``max_concurrency`` on a healthy one;
* additive increase (after the first congestion signal): each successful request raises the limit by
  ``1 / limit`` (one more request in flight per round of answers), up to
  ``max_concurrency``; other failures (a reset, a 404) leave it;
* multiplicative decrease: a congestion signal (``TransientError`` marked
  ``congestion``: 503, 429, ``SlowDown`` and the like, and timeouts) halves
  it, down to 1, at most once per round: only an answer to a request sent
  after the last cut can cut again, so a burst of refusals of requests sent
  together counts once.

``max_rps`` (optional) caps requests sent per second besides, for stores
with a published limit: requests are spaced ``1 / max_rps`` apart, with a
burst of at most ``max(1, max_rps / 10)``. Waiting for a slot sends nothing.
``StoreStats`` counts congestion answers (``throttled``), cuts
(``limit_cuts``) and requests held back by ``max_rps`` (``rate_waits``),
and shows each throttle's current limit (``concurrency_limits``).

Everything here runs on the store loop (``loop.py``): no locks.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time

from .stats import StoreStats

__all__ = ["DECREASE", "INITIAL", "Slot", "Throttle", "is_congestion", "is_timeout"]

#: The factor a congestion signal multiplies the concurrency limit by.
DECREASE = 0.5
#: The limit a new throttle starts from (slow start doubles it each round).
INITIAL = 4


def is_congestion(error: BaseException) -> bool:
    """Whether ``error`` says the store is overloaded (a backend marked it so)."""
    return bool(getattr(error, "congestion", False))


def is_timeout(error: BaseException) -> bool:
    """Whether a client library's ``error`` is a timeout: ``TimeoutError``, or a
    class of its own named so (botocore's ``ReadTimeoutError`` derives from
    neither), which backends mark as congestion."""
    return any(kind.__name__.endswith(("Timeout", "TimeoutError")) for kind in type(error).__mro__)


class Throttle:
    """The adaptive concurrency limit and optional rate cap of one endpoint/prefix.

    ``name`` is what stats call it (no credentials). ``adaptive=False`` keeps
    the limit at ``max_concurrency`` (congestion is still counted). A request
    that outlives the retry policy's whole-attempt timeout ends with a
    ``TransientError`` marked ``congestion`` (``health.py``), so it counts.
    """

    def __init__(
        self,
        name: str,
        *,
        max_concurrency: int,
        stats: StoreStats,
        max_rps: float | None = None,
        adaptive: bool = True,
    ) -> None:
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be at least 1, not {max_concurrency}")
        if max_rps is not None and max_rps <= 0:
            raise ValueError(f"max_rps must be positive (or None), not {max_rps}")
        self.name = name
        self.max_concurrency = max_concurrency
        self.max_rps = max_rps
        self.adaptive = adaptive
        self._stats = stats
        self.limit = float(min(INITIAL, max_concurrency) if adaptive else max_concurrency)
        self._slow_start = True
        self.in_flight = 0
        self._last_cut = float("-inf")
        # Requests waiting for a slot, first come first served; a freed slot
        # goes to one of them (waking them all would cost each wait O(waiters)).
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        # Rate cap (GCRA): the earliest time the next request is due, and the
        # burst tolerated ahead of that schedule.
        self._due = float("-inf")
        self._interval = 1.0 / max_rps if max_rps else 0.0
        self._tolerance = self._interval * (max(1.0, (max_rps or 0) / 10) - 1)
        self._publish()

    def slot(self) -> Slot:
        """One request's place: entering waits for the concurrency limit and
        the rate cap; leaving reports how the request ended."""
        return Slot(self)

    async def _acquire(self) -> None:
        if self._waiters or self.in_flight >= self._capacity():
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            self._grant()
            try:
                await waiter  # the slot is ours once it resolves (``_grant``)
            except BaseException:
                if waiter.cancelled():
                    with contextlib.suppress(ValueError):
                        self._waiters.remove(waiter)
                else:
                    self._release()  # granted, then cancelled: pass the slot on
                raise
        else:
            self.in_flight += 1
        if self._interval:
            now = time.monotonic()
            due = max(self._due, now)
            self._due = due + self._interval
            wait = due - self._tolerance - now
            if wait > 0:
                self._stats.rate_waits += 1
                try:
                    await asyncio.sleep(wait)
                except BaseException:
                    self._release()
                    raise

    def _capacity(self) -> int:
        return max(1, int(self.limit))

    def _release(self) -> None:
        self.in_flight -= 1
        self._grant()

    def _grant(self) -> None:
        """Hand free slots to the longest-waiting requests (a raised limit frees some too)."""
        while self._waiters and self.in_flight < self._capacity():
            waiter = self._waiters.popleft()
            if not waiter.done():  # cancelled, its task not yet resumed: skip it
                self.in_flight += 1
                waiter.set_result(None)

    def _answered(self, sent: float, *, congestion: bool) -> None:
        if not congestion:
            if self.adaptive and self.limit < self.max_concurrency:
                step = 1.0 if self._slow_start else 1.0 / self.limit
                self.limit = min(float(self.max_concurrency), self.limit + step)
                self._publish()
                self._grant()
            return
        self._stats.throttled += 1
        self._slow_start = False
        if self.adaptive and sent >= self._last_cut and self.limit > 1:
            self.limit = max(1.0, self.limit * DECREASE)
            self._last_cut = time.monotonic()
            self._stats.limit_cuts += 1
            self._publish()

    def _publish(self) -> None:
        self._stats.concurrency_limits[self.name] = int(self.limit)


class Slot:
    """A request's place in a ``Throttle`` (an async context manager; a small
    class, not a generator: every request of a store makes one)."""

    __slots__ = ("_sent", "_throttle")

    def __init__(self, throttle: Throttle) -> None:
        self._throttle = throttle
        self._sent = 0.0

    async def __aenter__(self) -> None:
        await self._throttle._acquire()
        self._sent = time.monotonic()

    async def __aexit__(self, kind: type | None, error: BaseException | None, tb: object) -> None:
        throttle = self._throttle
        if error is None:
            throttle._answered(self._sent, congestion=False)
        elif is_congestion(error):
            throttle._answered(self._sent, congestion=True)
        # any other failure (a reset, a 404, cancelling) says nothing about load
        throttle._release()
