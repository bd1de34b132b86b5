"""How a store is doing, shared by all its requests: the outage gate and hedging.

Retrying each request on its own schedule is right for a lone failure (one
reset, one short body, one 503 among many answers) but wrong for an
outage: with 32 requests in flight, a store that answers every request
with 503 would get 32 retry streams hammering it, and each would give up
on its own, long before the store is back. So every request to one
bucket (S3) or one server (HTTP) goes through one ``StoreHealth``:

* ``OUTAGE_STREAK`` failures in a row with no success in between close the
  gate: the store is in an outage (requests already in flight may still
  succeed, but only a request sent after the gate closed can open it
  again). That is logged once, at WARNING, with the store (URL without
  credentials) and the reason; from then on one probe at a time is sent,
  on the policy's backoff schedule, and every other request waits for it.
  A success opens the gate (logged once more, with how long it lasted) and
  the waiting requests go. Requests sent during an outage are thus about
  the requests already in flight when it began plus one per backoff step,
  however many callers wait: a request queued behind the store's limits
  whose place comes once the gate is shut is not sent (``GateShut``), it
  waits at the gate again.
* ``give_up_after`` seconds after the first failed attempt of the run was
  sent (the instant its requests count their budgets from), every request
  still waiting (or failing) gives up together with ``StorageError``. A
  request made after that probes within the policy's first backoff step,
  not the grown one (or goes by a probe sent after it asked): a store that
  came back is noticed at once.
* The latencies of recent successful GETs give the hedge delay: a GET
  still unanswered after ``max(hedge_after, hedge_factor * p95)`` is sent a
  second time, once, if the hedge budget allows (``HEDGE_BURST`` at once,
  then one per ``1 / HEDGE_SHARE`` requests) and the store is not failing;
  the first answer wins and the other request is cancelled.

Everything here runs on the store loop (``loop.py``): no locks.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import TypeVar

from ..errors import StorageError
from ._urls import redact
from .loop import retrieve_outcome
from .retry import (
    ARRIVING,
    Arrival,
    GateShut,
    NotSent,
    PastDeadline,
    RetryPolicy,
    TransientError,
)
from .stats import StoreStats

__all__ = ["HEDGE_BURST", "HEDGE_SHARE", "OUTAGE_STREAK", "Slot", "StoreHealth"]

log = logging.getLogger("streamer.storage")

T = TypeVar("T")
#: What holds one request's place in the store's limits while it runs.
Slot = Callable[[], AbstractAsyncContextManager[None]]

#: Failures in a row (no success between them) that make an outage.
OUTAGE_STREAK = 3
#: Hedges allowed at once, and the share of requests that earn one more.
HEDGE_BURST = 10.0
HEDGE_SHARE = 0.1
#: Recent GET latencies kept, and how many are needed before their p95 counts.
LATENCY_WINDOW = 128
LATENCY_SAMPLES = 8


class StoreHealth:
    """The outage gate, backoff level and recent latencies of one bucket or server.

    ``name`` is what the logs call it (no credentials).
    """

    def __init__(self, name: str, policy: RetryPolicy, stats: StoreStats) -> None:
        self.name = name
        self._policy = policy
        self._stats = stats
        self._streak = 0
        #: When the current run of failures began (None: the store answers):
        #: when its first failed attempt was sent, as each request counts its
        #: own budget, but not before the store last answered.
        self.failing_since: float | None = None
        self._failed_at = 0.0  # when the last failure came
        self._answered_at = 0.0  # when the last answer came
        self.reason = "no answer yet"
        #: Whether the store has answered anything (a success, a 404) in this process.
        self.answered = False
        self._level = 0
        self._closed_at = 0.0
        self._closed_until = 0.0
        self._probing = False
        #: When the probe in flight (or the last one) was let go, and when
        #: the last probe that failed was.
        self._probe_sent = 0.0
        self._failed_probe_sent = 0.0
        #: Until when the last failure's ``Retry-After`` asked for time.
        self._told_until = 0.0
        self._announced = False
        self._changed = asyncio.Event()
        self._latencies: deque[float] = deque(maxlen=LATENCY_WINDOW)
        self._hedge_tokens = HEDGE_BURST

    def failing_run(self, within: float) -> float | None:
        """When the store's current run of failures began, if the last of
        them came less than ``within`` seconds ago; None when it answers, or
        when nobody has asked it since (a failure an hour ago, with nothing
        sent since, says nothing of the store now)."""
        if self.failing_since is None or time.monotonic() - self._failed_at >= within:
            return None
        return self.failing_since

    def run_over(self) -> float:
        """When the current run of failures can send nothing more: its
        budget ends in less than ``min_attempt`` (``RetryPolicy``). A request
        made from then on starts a budget of its own, as the next pass."""
        assert self.failing_since is not None
        policy = self._policy
        return self.failing_since + policy.give_up_after - policy.min_attempt

    @property
    def in_outage(self) -> bool:
        """Whether the gate is closed (the store failed ``OUTAGE_STREAK`` times in a row)."""
        return self._streak >= OUTAGE_STREAK

    # -- the gate ---------------------------------------------------------------

    async def admit(self, deadline: float | None) -> bool | None:
        """Wait until a request may be sent: ``True`` if it goes as the outage's
        probe, ``False`` if the store is healthy, ``None`` if it must give up:
        its own ``deadline`` passed, or the store has failed for the whole
        budget (with the answer of the probe in flight, if one is), less the
        ``min_attempt`` nothing is sent with (``run_over``).

        A request made after the budget was spent (a new pass after the last
        one gave up) is not held by the outage's backoff, which has grown
        while the store was down: it probes within the policy's first step
        (``backoff``) of the last failure (it failed without sending anything
        until the backoff's window closed, against a store just back: a pass
        lost to a server restarted right after), or goes by the answer of a
        probe sent after it asked (one sent before may have met a server
        still starting). A server's ``Retry-After`` still holds: until then
        it gives up at once. So a store that comes back is noticed by every
        request, and a loop that retries at once probes at its first step."""
        asked = time.monotonic()
        while True:
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                return None
            if not self.in_outage:
                return False
            assert self.failing_since is not None
            # Nothing is sent for the run after this (``RetryPolicy.min_attempt``).
            run_over = self.run_over()
            spent, late = now >= run_over, asked >= run_over
            opens = self._closed_until
            if late:
                opens = min(opens, max(self._failed_at + self._policy.backoff, self._told_until))
                if not self._probing and now < self._told_until:
                    return None  # the server asked for the time
            if not self._probing and now >= opens:
                self._probing, self._probe_sent = True, now
                return True
            if spent and ((not self._probing and not late) or self._failed_probe_sent >= asked):
                # It waited out the budget with no probe to wait for, or a
                # probe sent since it asked failed.
                return None
            wake = opens if now < opens else None
            await self._wait_change(_earliest(wake, deadline, None if spent else run_over))

    async def pause(self, delay: float, deadline: float | None) -> None:
        """Sleep a request's backoff ``delay``, no later than its ``deadline``."""
        if deadline is not None:
            delay = min(delay, max(0.0, deadline - time.monotonic()))
        await asyncio.sleep(delay)

    async def send(
        self,
        request: Callable[[], Awaitable[T]],
        *,
        slot: Slot,
        hedge: bool,
        probe: bool,
        began: float,
        deadline: float | None = None,
    ) -> T:
        """One attempt of ``request`` (hedged if ``hedge``), and its verdict on the store.

        ``slot()`` holds a request's place in the store's limits (``throttle.py``):
        the timeout and the hedge delay run from when it is granted, so a long
        queue of requests reads as nothing worse than a queue (not as a stalled
        store), and a queued request holds no timers or tasks.

        ``deadline``: when the request gives up should this attempt fail.
        The attempt and its hedge end then at the latest, whatever their
        timeouts would allow, and neither is sent with less than the
        policy's ``min_attempt`` left (``PastDeadline``: nothing was sent).
        ``None``: the request's first attempt, made while its store was not
        failing: it is always sent (it is how a store that came back is
        noticed), and it and its hedge end ``give_up_after`` after it was
        sent (a server that stalled or trickled held a 1 s budget's request
        for a read timeout or the whole-attempt timeout). Unless it is the
        ``probe``, an attempt whose place comes while the gate is shut
        raises ``GateShut`` (nothing was sent): it waits at the gate again.

        ``began``: when the request began this attempt (``time.monotonic()``),
        the instant its budget counts from should it fail; a run of failures
        counts the store's budget from the same instant.
        """
        try:
            if hedge and self._policy.hedge_after is not None:
                result = await self._hedged(request, slot, deadline, probe)
            else:
                async with slot():
                    result = await self._timed(request, self._end(deadline), gated=not probe)
        except NotSent:
            self._release(probe)
            raise
        except TransientError as exc:
            self._failed(exc, probe, began)
            raise
        except StorageError:  # the store answered (404, denied, ...): it is up
            self._succeeded(probe, began)
            raise
        except BaseException:  # cancelled: no verdict, but free the probe slot
            self._release(probe)
            raise
        self._succeeded(probe, began)
        return result

    async def _wait_change(self, until: float | None) -> None:
        changed = self._changed
        timeout = None if until is None else max(0.0, until - time.monotonic())
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await changed.wait()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def _succeeded(self, probe: bool, sent: float) -> None:
        self.answered = True
        if self.in_outage and sent < self._closed_at:
            return  # sent before the outage began: says nothing about the store now
        self._answered_at = time.monotonic()
        if self._announced:
            assert self.failing_since is not None
            log.warning(
                "store %s answers again after %.1f s",
                self.name,
                time.monotonic() - self.failing_since,
            )
        if self._streak or probe:
            self._streak, self._level, self._closed_until = 0, 0, 0.0
            self._probing = self._announced = False
            self.failing_since = None
            self._notify()

    def _failed(self, failure: TransientError, probe: bool, sent: float) -> None:
        now = self._failed_at = time.monotonic()
        self.reason = redact(str(failure))
        if failure.retry_after is not None:
            self._told_until = now + min(failure.retry_after, self._policy.max_retry_after)
        # The run begins when its earliest failed attempt was sent (answers
        # arrive out of order), the instant its requests count their budgets
        # from: were it when the first failure came back, the requests
        # already in flight would give up before the store's budget, and a
        # request made in between would wait for that and give up unsent.
        began = max(sent, self._answered_at)
        if self.failing_since is None or began < self.failing_since:
            self.failing_since = began
        self._streak += 1
        if probe:
            self._probing = False
            self._failed_probe_sent = self._probe_sent
        if not self.in_outage:
            return
        if probe:
            self._level += 1
        elif self._streak == OUTAGE_STREAK:
            self._closed_at = now
        else:
            return
        self._closed_until = now + self._policy.delay(self._level, failure.retry_after)
        if not self._announced:
            self._announced = True
            self._stats.outages += 1
            log.warning(
                "waiting on store %s: %s; retrying until it answers (for up to %g s)",
                self.name,
                self.reason,
                self._policy.give_up_after,
            )
        self._notify()

    def _release(self, probe: bool) -> None:
        if probe:
            self._probing = False
            self._notify()

    # -- timeouts and hedging ---------------------------------------------------

    def _end(self, deadline: float | None) -> tuple[float, bool]:
        """When an attempt whose place came now must end, and whether it
        may be sent whatever is left (``send``): at its request's
        ``deadline``, or ``give_up_after`` from now if there is none (an
        always-sent first attempt)."""
        if deadline is None:
            return time.monotonic() + self._policy.give_up_after, True
        return deadline, False

    async def _timed(
        self,
        request: Callable[[], Awaitable[T]],
        end: tuple[float, bool],
        *,
        timed_get: bool = False,
        gated: bool = True,
        hedge: bool = False,
    ) -> T:
        """``request()`` bounded by the policy's whole-attempt timeout and by
        ``end`` (``_end``: its request's deadline, not sent with less than
        ``min_attempt`` before it unless it may go whatever is left); not
        sent while the gate is shut, if ``gated`` (every attempt but the
        probe). The latency of a successful GET (``timed_get``) feeds the
        hedge delay; a ``hedge`` is counted once it is sent."""
        if gated and self.in_outage:
            raise GateShut
        sent = time.monotonic()
        policy = self._policy
        until, always = end
        if not always and until - sent < policy.min_attempt:
            raise PastDeadline
        timeout, setting = policy.timeout, "timeout"
        within = f"{timeout:.3g} s"  # what ended it, for the error
        if until - sent < timeout:
            timeout, setting = max(0.0, until - sent), "give_up_after"
            within = f"its give_up_after budget ({policy.give_up_after:g} s)"
        if hedge:
            self._stats.hedges += 1
        self._hedge_tokens = min(HEDGE_BURST, self._hedge_tokens + HEDGE_SHARE)
        arrival = Arrival()
        arriving = ARRIVING.set(arrival)
        try:
            async with asyncio.timeout(timeout):
                result = await request()
        except TimeoutError:
            # A store answering this late is overloaded: the adaptive limit backs off.
            message = f"no complete response within {within}{arrival.told(setting)}"
            raise TransientError(message, congestion=True) from None
        finally:
            ARRIVING.reset(arriving)
        if timed_get:
            self._latencies.append(time.monotonic() - sent)
        return result

    def hedge_delay(self) -> float:
        """Seconds a GET may take before it is sent again."""
        floor = self._policy.hedge_after
        assert floor is not None
        if len(self._latencies) < LATENCY_SAMPLES:
            return floor
        ordered = sorted(self._latencies)
        p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
        return max(floor, self._policy.hedge_factor * p95)

    async def _hedged(
        self,
        request: Callable[[], Awaitable[T]],
        slot: Slot,
        deadline: float | None,
        probe: bool,
    ) -> T:
        """``request()``, sent again if it stalls; the first answer wins. Each
        request waits for a place of its own (``slot``), and holds it only
        while it runs; the hedge delay runs from when the first one is sent.
        Both copies end when the first one must (``_end``, from when its
        place came); the copy is sent only if its delay ends ``min_attempt``
        before that (a hedge of a first attempt used to run a read timeout
        past its budget). Only the first copy of a ``probe`` goes through a
        shut gate."""

        # Set once the first copy's place came: when both copies end.
        ends: asyncio.Future[tuple[float, bool]] = asyncio.get_running_loop().create_future()

        async def attempt(first: bool) -> T:
            async with slot():
                if first:
                    ends.set_result(self._end(deadline))
                until, always = ends.result()
                return await self._timed(
                    request,
                    (until, always and first),
                    timed_get=True,
                    gated=not (first and probe),
                    hedge=not first,
                )

        def start(first: bool) -> asyncio.Future[T]:
            # A copy's failure may be left to nobody: the other copy won, or
            # the caller was cancelled as it failed (the ``finally`` below
            # waits for the copies still running, not for those done).
            task = asyncio.ensure_future(attempt(first))
            task.add_done_callback(retrieve_outcome)
            return task

        first = start(True)
        tasks = {first}
        try:
            await asyncio.wait((ends, first), return_when=asyncio.FIRST_COMPLETED)
            delay = self.hedge_delay()
            if not ends.done() or (
                time.monotonic() + delay > ends.result()[0] - self._policy.min_attempt
            ):
                # The first copy failed unsent, or its copy would go with
                # less than ``min_attempt`` left: it would only run on.
                return await first
            done, _ = await asyncio.wait(tasks, timeout=delay)
            if done:  # the usual case: answered within the hedge delay
                return first.result()
            if self._streak == 0 and self._hedge_tokens >= 1:
                self._hedge_tokens -= 1
                tasks.add(start(False))
            return await self._first_answer(tasks, first)
        finally:
            running = [task for task in tasks if not task.done()]
            for task in running:
                task.cancel()
            if running:
                await asyncio.gather(*running, return_exceptions=True)

    async def _first_answer(self, tasks: set[asyncio.Future[T]], first: asyncio.Future[T]) -> T:
        """The result of the first of ``tasks`` to succeed, else the first failure."""
        pending, failure = set(tasks), None
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                error = task.exception()
                if error is None:
                    if task is not first:
                        self._stats.hedge_wins += 1
                    return task.result()
                if failure is None or isinstance(failure, NotSent):
                    failure = error  # a copy never sent says less than one that failed
        assert failure is not None
        raise failure


def _earliest(*times: float | None) -> float | None:
    known = [t for t in times if t is not None]
    return min(known) if known else None
