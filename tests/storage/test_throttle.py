"""Adaptive request control against a store that throttles.

A real S3 server (moto) behind a real HTTP proxy on loopback that answers
``503 SlowDown`` to every request past a set rate (a token bucket, as S3 and
B2 limit a prefix), with a round-trip latency: many concurrent reads must
all arrive, intact, while the requests the store sees settle near its limit
instead of a storm of refusals. The same proxy over the HTTP file server
answers ``429``. Plus the ``Throttle`` arithmetic on its own, and ``max_rps``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest

from streamer.storage.loop import run_sync
from streamer.storage.retry import TransientError
from streamer.storage.stats import StoreStats
from streamer.storage.throttle import INITIAL, Throttle, is_timeout
from testkit.servers import S3_SLOWDOWN, LoopbackServer, proxy_handler

RATE = 40.0  # requests/s the store accepts
LATENCY = 0.05  # s per answer: RATE * LATENCY = 2 requests in flight sustain the limit
BLOCK = 4096
READS = 120


class RateLimited:
    """A handler that serves ``rate`` requests per second (token bucket with
    ``burst``) through ``inner`` and refuses the rest with ``status``."""

    def __init__(self, inner: Any, rate: float, *, status: int, body: bytes = b"") -> None:
        self.inner, self.rate, self.status, self.body = inner, rate, status, body
        self.burst = max(1.0, rate / 10)
        self.tokens, self.at = self.burst, time.monotonic()
        self.served: list[float] = []
        self.refused: list[float] = []

    async def __call__(self, request: Any) -> tuple[int, dict[str, str], bytes]:
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens < 1:
            self.refused.append(now)
            return self.status, {"Content-Type": "application/xml"}, self.body
        self.tokens -= 1
        self.served.append(now)
        return await self.inner(request)

    async def close(self) -> None:
        close = getattr(self.inner, "close", None)
        if close is not None:
            await close()


@pytest.fixture
def throttled_s3(moto_endpoint: str, s3_uploaded: str) -> Iterator[LoopbackServer]:
    handler = RateLimited(proxy_handler(moto_endpoint), RATE, status=503, body=S3_SLOWDOWN)
    server = LoopbackServer(handler).start()
    server.faults.latency = LATENCY
    yield server
    server.stop()


def peak_per_second(times: list[float]) -> int:
    """Most requests in any one-second window."""
    times = sorted(times)
    return max((sum(1 for u in times[i:] if u < t + 1.0) for i, t in enumerate(times)), default=0)


def read_concurrently(reader: Any, data: bytes) -> float:
    """``READS`` one-block reads of ``reader`` at once (each its own request);
    checks every byte; returns the seconds it took."""

    async def main() -> list[bytes]:
        reads = [reader.read(i * BLOCK + 7, 100) for i in range(READS)]
        return [bytes(view) for view in await asyncio.gather(*reads)]

    began = time.monotonic()
    got = asyncio.run(main())
    seconds = time.monotonic() - began
    assert got == [data[i * BLOCK + 7 : i * BLOCK + 107] for i in range(READS)]  # nothing lost
    return seconds


# No hedged reads: on a loaded machine a GET waiting over a second sent a
# second one, which the server counted as served twice (121 of 120).
OPTIONS = {
    **{"block_size": BLOCK, "coalesce_gap": 0, "backoff": 0.05, "max_backoff": 1.0},
    "hedge_after": None,
}


def test_s3_throttling_settles_near_the_limit_without_a_storm(
    throttled_s3, make_store, s3_uploaded, data
) -> None:  # type: ignore[no-untyped-def]
    store = make_store("s3", throttled_s3.url, **OPTIONS)
    reader = store.reader(f"{s3_uploaded}/random.bin", len(data))
    handler: RateLimited = throttled_s3.handler
    seconds = read_concurrently(reader, data)
    served, refused = len(handler.served), len(handler.refused)
    stats = store.stats
    # The report: what the store saw.
    print(
        f"\nadaptive: {READS} reads in {seconds:.2f} s, served {served} ({served / seconds:.1f}/s,"
        f" limit {RATE:g}/s), refused {refused},"
        f" peak {peak_per_second(handler.served + handler.refused)} requests/s,"
        f" throttled {stats.throttled}, cuts {stats.limit_cuts}, limits {stats.concurrency_limits}"
    )
    assert served == READS  # each block fetched once
    assert stats.requests == served + refused
    assert stats.throttled == refused >= 1  # every refusal was taken as congestion
    assert stats.limit_cuts >= 1
    (key,) = stats.concurrency_limits
    assert key == f"s3://{s3_uploaded}/ at {throttled_s3.url}"
    # No storm: refusals are a fraction of the work, and the store never sees
    # much more than its limit in any second.
    assert refused <= 0.5 * READS
    assert peak_per_second(handler.served + handler.refused) <= 2 * RATE
    # Settled near the limit, not collapsed: the work took about READS / RATE.
    assert served / seconds >= 0.5 * RATE


@pytest.mark.slow  # 9 s: a comparison; the adaptive run alone is checked by default
def test_fixed_concurrency_is_the_storm_adaptation_avoids(
    throttled_s3, make_store, s3_uploaded, data
) -> None:  # type: ignore[no-untyped-def]
    """The same run with the limit fixed (``adaptive=False``): nothing is lost
    either (retries and the outage gate), but the store refuses several times
    more requests. The two runs' figures side by side are the comparison."""
    handler: RateLimited = throttled_s3.handler
    fixed = make_store("s3", throttled_s3.url, adaptive=False, **OPTIONS)
    read_concurrently(fixed.reader(f"{s3_uploaded}/random.bin", len(data)), data)
    fixed_refused = len(handler.refused)
    assert fixed.stats.limit_cuts == 0 and fixed.stats.throttled == fixed_refused
    assert list(fixed.stats.concurrency_limits.values()) == [32]
    time.sleep(1.0)  # the bucket refills
    handler.served.clear()
    handler.refused.clear()
    adaptive = make_store("s3", throttled_s3.url, **OPTIONS)
    read_concurrently(adaptive.reader(f"{s3_uploaded}/random.bin", len(data)), data)
    adaptive_refused = len(handler.refused)
    print(f"\nrefused: fixed concurrency {fixed_refused}, adaptive {adaptive_refused}")
    assert adaptive_refused < fixed_refused


def test_http_429_backs_off_too(http_files, make_store, data) -> None:  # type: ignore[no-untyped-def]
    handler = RateLimited(http_files.handler, RATE, status=429)
    server = LoopbackServer(handler).start()
    server.faults.latency = LATENCY
    try:
        store = make_store("http", **OPTIONS)
        read_concurrently(store.reader(f"{server.url}/random.bin", len(data)), data)
    finally:
        server.stop()
    assert len(handler.served) == READS
    assert store.stats.throttled == len(handler.refused) >= 1
    assert store.stats.limit_cuts >= 1
    assert list(store.stats.concurrency_limits) == [server.url]


def test_max_rps_caps_the_rate_before_the_store_refuses(
    throttled_s3, make_store, s3_uploaded, data
) -> None:  # type: ignore[no-untyped-def]
    cap = 0.6 * RATE
    store = make_store("s3", throttled_s3.url, max_rps=cap, **OPTIONS)
    read_concurrently(store.reader(f"{s3_uploaded}/random.bin", len(data)), data)
    handler: RateLimited = throttled_s3.handler
    print(
        f"\nmax_rps {cap:g}: served {len(handler.served)}, refused {len(handler.refused)},"
        f" peak {peak_per_second(handler.served)}/s"
    )
    # Paced below the store's limit: no refusal but where the server's own
    # scheduling bunches arrivals (a loaded machine), against about 20 without.
    assert len(handler.refused) == store.stats.throttled <= 2
    assert store.stats.rate_waits >= READS // 2
    assert peak_per_second(handler.served) <= cap + max(1, cap / 10) + 2


# -- the arithmetic -----------------------------------------------------------


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


def test_limit_halves_once_per_round_and_grows_by_one_per_round() -> None:
    stats = StoreStats()
    throttle = Throttle("t", max_concurrency=16, stats=stats)

    async def answer(congestion: bool) -> None:
        with pytest.raises(TransientError):
            async with throttle.slot():
                raise TransientError("503", congestion=congestion)

    async def burst(n: int) -> None:
        # n requests sent together, all refused: one cut, not n.
        slots = [throttle.slot() for _ in range(n)]
        for slot in slots:
            await slot.__aenter__()
        for slot in slots:
            await slot.__aexit__(TransientError, TransientError("503", congestion=True), None)

    async def scenario() -> None:
        assert throttle.limit == INITIAL == 4  # slow start: from 4, doubling per round
        for _ in range(4):
            async with throttle.slot():
                pass
        assert throttle.limit == 8
        await burst(8)
        assert (throttle.limit, stats.throttled, stats.limit_cuts) == (4, 8, 1)
        await answer(congestion=True)  # sent after the cut: cuts again
        assert throttle.limit == 2 and stats.limit_cuts == 2
        await answer(congestion=False)  # not congestion (a reset): no cut, no rise
        assert stats.throttled == 9 and throttle.limit == 2
        for _ in range(2):  # one round of successes at limit 2, now additive: about +1
            async with throttle.slot():
                pass
        assert 2.8 < throttle.limit < 3.0
        assert stats.concurrency_limits == {"t": 2}  # whole requests
        for _ in range(10):
            await answer(congestion=True)
        assert throttle.limit == 1  # the floor
        for _ in range(2_000):
            async with throttle.slot():
                pass
        assert throttle.limit == 16 == stats.concurrency_limits["t"]  # the ceiling

    run(scenario())


def test_limit_bounds_requests_in_flight() -> None:
    stats = StoreStats()
    throttle = Throttle("t", max_concurrency=3, stats=stats)
    most = 0

    async def request() -> None:
        nonlocal most
        async with throttle.slot():
            most = max(most, throttle.in_flight)
            await asyncio.sleep(0.001)

    async def scenario() -> None:
        await asyncio.gather(*(request() for _ in range(30)))
        throttle.limit = 1.0
        await asyncio.gather(*(request() for _ in range(5)))

    run(scenario())
    assert most == 3 and throttle.in_flight == 0


def test_cancelled_waiter_frees_nothing_it_did_not_take() -> None:
    throttle = Throttle("t", max_concurrency=1, stats=StoreStats(), max_rps=5.0)

    async def scenario() -> None:
        async with throttle.slot():
            waiting = asyncio.ensure_future(throttle.slot().__aenter__())
            await asyncio.sleep(0.01)
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
        assert throttle.in_flight == 0
        paced = asyncio.ensure_future(throttle.slot().__aenter__())  # waits for its rate slot
        await asyncio.sleep(0.01)
        paced.cancel()
        with pytest.raises(asyncio.CancelledError):
            await paced
        assert throttle.in_flight == 0

    run(scenario())


def test_a_freed_slot_goes_to_the_longest_waiting_request_alone() -> None:
    """Queued requests are served first come, first served; one that gives up
    while queued, or right after its slot was handed to it, loses nobody a slot."""
    throttle = Throttle("t", max_concurrency=2, stats=StoreStats(), adaptive=False)
    served: list[int] = []
    release = asyncio.Event()

    async def request(n: int) -> None:
        async with throttle.slot():
            served.append(n)
            await release.wait()

    async def scenario() -> None:
        holders = [asyncio.ensure_future(request(n)) for n in (0, 1)]
        await asyncio.sleep(0)
        queued = [asyncio.ensure_future(request(n)) for n in range(2, 8)]
        await asyncio.sleep(0)
        assert served == [0, 1] and len(throttle._waiters) == 6
        queued[1].cancel()  # request 3 gives up while queued
        await asyncio.sleep(0)
        release.set()  # the holders finish: two slots go to 2 and 4
        await asyncio.sleep(0)
        queued[3].cancel()  # request 5 was granted a slot and is cancelled before it runs
        await asyncio.gather(*holders, *queued, return_exceptions=True)
        assert throttle.in_flight == 0 and not throttle._waiters

    run(scenario())
    assert served == [0, 1, 2, 4, 6, 7]


def test_time_spent_queued_is_not_a_timeout(served_http) -> None:  # type: ignore[no-untyped-def]
    """Requests queued behind a limit of one, each answered in 0.15 s: the
    attempt timeout (0.4 s) runs from when a request is sent, so none times
    out although the last waits about a second for its turn."""
    open_reader, server = served_http
    reader = open_reader(
        timeout=0.4, max_concurrency=1, hedge_after=None, block_size=BLOCK, coalesce_gap=0
    )
    server.faults.latency = 0.15

    async def reads() -> list[bytes]:
        return await asyncio.gather(*(reader.read(n * 4 * BLOCK, 10) for n in range(8)))

    assert len(run_sync(reads())) == 8
    stats = reader.store.stats
    assert (stats.retries, stats.throttled, stats.requests) == (0, 0, 8)


def test_timeouts_are_congestion_and_options_are_checked() -> None:
    import aiohttp
    import botocore.exceptions

    assert is_timeout(TimeoutError()) and is_timeout(aiohttp.ServerTimeoutError())
    assert is_timeout(botocore.exceptions.ReadTimeoutError(endpoint_url="x"))
    assert not is_timeout(ConnectionResetError())
    with pytest.raises(ValueError, match="max_rps must be positive"):
        Throttle("t", max_concurrency=4, stats=StoreStats(), max_rps=0)
    with pytest.raises(ValueError, match="max_concurrency must be at least 1"):
        Throttle("t", max_concurrency=0, stats=StoreStats())


def test_whole_attempt_timeout_cuts_the_limit(served_http) -> None:  # type: ignore[no-untyped-def]
    """A request that hangs past the attempt timeout is a congestion signal."""
    open_reader, server = served_http
    reader = open_reader(timeout=0.3, read_timeout=5.0, hedge_after=None, backoff=0.01)
    server.faults.hangs = 1
    server.faults.stall_seconds = 2.0
    assert len(reader.read_sync(0, 10)) == 10
    assert reader.store.stats.throttled == 1 and reader.store.stats.limit_cuts == 1
