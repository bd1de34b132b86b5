"""Timeouts, retries and hedged reads for store requests.

Object stores fail transiently all the time: S3 and B2 answer load with
``503 SlowDown`` (B2 sometimes with ``Retry-After``), connections get reset,
a body arrives short, a request stalls. Backends turn such failures into
``TransientError``; ``call_with_retries`` repeats the request with capped
exponential backoff and jitter, waits at least as long as a ``Retry-After``
asked, bounds every attempt by timeouts (a stalled server is a transient
failure too), re-sends a GET that stalls far beyond the store's usual
latency (a *hedge*), and rides out an outage of the whole store together
with every other request of that store (``health.py``). Only when the time
budget (``give_up_after``) or the attempt count is spent does it raise one
``StorageError`` that names the request (URL without credentials, byte
range) and the last cause.
"""

from __future__ import annotations

import contextvars
import dataclasses
import datetime
import email.utils
import logging
import random
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

from ..errors import StorageError
from ._urls import redact
from .stats import StoreStats

if TYPE_CHECKING:
    from .health import Slot, StoreHealth

__all__ = [
    "ARRIVING",
    "MIN_ATTEMPT",
    "Arrival",
    "GateShut",
    "NotSent",
    "PastDeadline",
    "RetryPolicy",
    "StoreUnavailable",
    "TransientError",
    "call_with_retries",
    "parse_retry_after",
]

log = logging.getLogger("streamer.storage")

T = TypeVar("T")

#: The most time left of its budget a retry or hedge ever needs to be sent
#: (``RetryPolicy.min_attempt``).
MIN_ATTEMPT = 1.0


class TransientError(Exception):
    """A failure worth retrying. ``retry_after``: seconds the server asked for;
    ``congestion``: the store said it is overloaded (503, 429, ``SlowDown``, a
    timeout), which makes the adaptive concurrency limit back off (``throttle.py``);
    ``unresolved``: the host name that does not resolve (the resolver said there
    is no such name, not that it failed for now), which is retried only for a
    store that has answered before (a typo'd endpoint is no outage)."""

    def __init__(
        self,
        cause: str,
        *,
        retry_after: float | None = None,
        congestion: bool = False,
        unresolved: str | None = None,
    ) -> None:
        super().__init__(cause)
        self.retry_after = retry_after
        self.congestion = congestion
        self.unresolved = unresolved


class NotSent(Exception):
    """An attempt was not sent: when its place in the store's limits came,
    it could no longer go. Says nothing of the store."""


class PastDeadline(NotSent):
    """Its place came after its request's deadline (``give_up_after``)."""


class GateShut(NotSent):
    """Its place came after the store went into an outage: it waits at the
    gate again, with the other requests, instead of being sent. (Requests
    queued behind the store's limits when an outage began were each sent,
    one after another, as the limit fell to 1: against a black-holed store
    a pass gave up a connect timeout per queued request after its budget.)"""


class StoreUnavailable(StorageError):
    """A request gave up: its store failed for the whole time budget
    (``give_up_after``) or the attempt count. The store is down, not the
    object missing: whoever meets it first ends the work that needs the
    store (a pass, a warmup) instead of waiting another budget elsewhere."""

    failure_reason = "gave up retrying"  # as ``StoreStats.failure_reasons`` counts it


@dataclasses.dataclass
class Arrival:
    """How much of its answer's body an attempt has received: ``got`` bytes
    of ``expected`` (``None``: its headers have not come, or gave no
    length; ``got`` counts all the same). An attempt that runs out of time
    with a body still arriving met a slow server, not a down one, and its
    error says so (a read cut by the budget read as "no complete response",
    as from a dead server, though raising ``give_up_after`` would mend it)."""

    got: int = 0
    expected: int | None = None
    answered: bool = False  # the headers came

    def told(self, setting: str) -> str:
        """What an attempt cut by ``setting`` adds to its error: how much of
        the body came (nothing if no answer did)."""
        if not self.answered:
            return ""
        of = "" if self.expected is None else f" of {self.expected}"
        told = f"; {self.got}{of} bytes of the body had come"
        if self.got:
            told += f" (a slow server, not a down one: raise {setting} for answers this slow)"
        return told


#: The ``Arrival`` of the attempt running in this task: ``health.py`` sets a
#: new one per attempt, a backend reading a body counts into it.
ARRIVING: contextvars.ContextVar[Arrival | None] = contextvars.ContextVar("ARRIVING", default=None)


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    """How hard a store tries before giving up on a request.

    A request is retried until it succeeds or, whichever comes first:

    * ``give_up_after`` seconds have passed since its first failure, or
      since the store's current run of failures began (nothing answered
      since: every request of the store gives up together, one that joins
      late included, whether or not the failures made an outage yet);
    * ``attempts`` requests were sent for it, the first included (``None``,
      the default: no count limit, the time budget alone decides). Waiting
      for a failing store to recover sends nothing and spends no attempt.

    The n-th retry of a request waits a random time in ``[d/2, d]`` with
    ``d = min(max_backoff, backoff * 2**n)`` (jitter keeps many workers from
    retrying in lockstep), or ``Retry-After`` when the server sent a longer
    one (capped at ``max_retry_after``). While the store is down, one probe
    at a time goes out on the same schedule and every other request waits
    for its outcome.

    Every attempt ends after ``timeout`` seconds in all, after
    ``connect_timeout`` seconds without a connection, or after
    ``read_timeout`` seconds without a byte (before the first one, or
    between two chunks of the body).

    A GET still unanswered after ``max(hedge_after, hedge_factor * p95)``
    (p95 of the store's recent GET latencies) is sent once more; the first
    answer wins, the other request is cancelled. ``hedge_after=None`` turns
    hedging off.

    ``give_up_after`` bounds what a caller waits, every attempt included:
    each attempt (and its hedge) ends when its request's deadline comes,
    whatever its timeouts would allow (``give_up_after`` from its first
    failure, or from its store's, as above), and no retry or hedge is sent
    with less than ``min_attempt`` left before it. A request's first
    attempt ends ``give_up_after`` after it was sent, and is always sent
    (so a store that came back is noticed), unless the request joined a
    store already failing: then it belongs to that run of failures, and its
    first attempt is bounded like a retry. So a request raises at most
    ``give_up_after`` after its first attempt was sent, and at most
    ``give_up_after`` after its store began failing if it joined a failing
    store. (An attempt in flight at the deadline used to get one more
    ``read_timeout``, and a request joining a failing store a whole budget
    for its first attempt.)
    """

    attempts: int | None = None
    timeout: float = 30.0
    backoff: float = 0.1
    max_backoff: float = 10.0
    max_retry_after: float = 60.0
    give_up_after: float = 300.0
    connect_timeout: float = 10.0
    read_timeout: float = 10.0
    hedge_after: float | None = 1.0
    hedge_factor: float = 4.0

    def __post_init__(self) -> None:
        if self.attempts is not None and self.attempts < 1:
            raise ValueError(f"attempts must be at least 1 (or None), not {self.attempts}")
        if self.give_up_after <= 0:  # it bounds a first attempt too: 0 would send none
            raise ValueError(
                f"give_up_after must be positive, not {self.give_up_after} (attempts=1: no retries)"
            )

    @property
    def min_attempt(self) -> float:
        """The least time left before its request's deadline with which a
        retry or hedge is sent: a tenth of ``give_up_after``, at most
        ``MIN_ATTEMPT`` (1 s). One sent with less could hardly be answered
        before the deadline cuts it; it would only add to a failing store's
        load."""
        return min(MIN_ATTEMPT, self.give_up_after / 10)

    def delay(self, retry: int, retry_after: float | None) -> float:
        """Seconds to wait before retry number ``retry`` (0 for the first)."""
        ceiling = min(self.max_backoff, self.backoff * 2 ** min(retry, 64))
        delay = random.uniform(ceiling / 2, ceiling)
        if retry_after is not None:
            delay = max(delay, min(retry_after, self.max_retry_after))
        return delay


async def call_with_retries(
    request: Callable[[], Awaitable[T]],
    *,
    policy: RetryPolicy,
    what: str,
    stats: StoreStats,
    health: StoreHealth,
    slot: Slot,
    hedge: bool = False,
) -> T:
    """``await request()`` until it succeeds, within ``policy``.

    ``what`` describes the request for logs and the final error (it is
    redacted again all the same). ``health`` is the store's shared state:
    its outage gate, its recent latencies. ``slot()`` holds an attempt's
    place in the store's limits (``health.Slot``). ``hedge``: the request is an
    idempotent read that may be sent twice. Errors that are not transient
    (a missing object, a refused signature) propagate at once; cancelling
    the caller cancels the request in flight and every retry to come.
    """
    tries = 0
    first_failure: float | None = None
    failure: TransientError | None = None
    asked = time.monotonic()
    while True:
        # When this request gives up should what it sends fail: from its
        # first failure, or from when the store began failing. A request
        # that asked while its store was failing (its budget not spent)
        # belongs to that run: it gives up with the store, its first attempt
        # included (which used to get a budget of its own). Else a first
        # attempt is always sent (it is how a store that came back is
        # noticed: the next pass after an outage gave up without asking the
        # store) and ends ``give_up_after`` after it was sent (``health.send``).
        if first_failure is None:
            deadline = _run_deadline(asked, health, policy)
        else:
            deadline = _own_deadline(first_failure, health, policy)
        last = None if deadline is None else deadline - policy.min_attempt
        probe = await health.admit(last)
        if probe is None:  # the store stayed down for the whole budget
            break
        tries += 1
        began = time.monotonic()
        try:
            result = await health.send(
                request,
                slot=slot,
                hedge=hedge,
                probe=probe,
                began=began,
                deadline=deadline,
            )
        except PastDeadline:  # its place came too late: the budget is (nearly) spent, nothing sent
            tries -= 1
            break
        except GateShut:  # the store went down while it waited for its place
            tries -= 1
            continue
        except TransientError as exc:
            failure = exc
            if exc.unresolved and not health.answered:
                stats.failed("not retryable")
                raise StorageError(
                    redact(
                        f"{what}: the host {exc.unresolved} does not resolve ({exc}); "
                        "no request to this store has succeeded: check the URL or endpoint"
                    )
                ) from None
        except StorageError as exc:  # no retry mends it: it fails now, counted once
            stats.failed(_at_once(exc))
            log.debug("%s failed: %s", what, exc)
            raise
        else:
            return result
        first_failure = first_failure or began
        last = _last_start(first_failure, health, policy)
        if (policy.attempts is not None and tries >= policy.attempts) or time.monotonic() >= last:
            break
        delay = policy.delay(tries - 1, failure.retry_after)
        stats.retries += 1
        log.debug("retrying %s in %.2f s: %s", what, delay, failure)
        await health.pause(delay, last)
    stats.failed(StoreUnavailable.failure_reason)
    cause = failure if failure is not None else health.reason
    began = min(t for t in (first_failure, health.failing_since, time.monotonic()) if t is not None)
    gave_up = f"gave up after {tries} attempts" if tries else "gave up waiting for the store"
    failing = f"failing for {time.monotonic() - began:.1f} s"
    raise StoreUnavailable(redact(f"{what}: {cause} ({gave_up}; {failing})"))


def _at_once(error: StorageError) -> str:
    """Why a request failed at once, as ``StoreStats.failure_reasons`` counts
    it: its class's ``failure_reason`` (``base.NotFound``, ...), else
    ``"not retryable"``."""
    return str(getattr(error, "failure_reason", "not retryable"))


def _own_deadline(first_failure: float, health: StoreHealth, policy: RetryPolicy) -> float:
    """When a request that first failed at ``first_failure`` gives up: the
    budget counts from then, or from when its store began failing (no answer
    since), whichever is earlier. A request that joined a failing store late
    (the next shard's footer, the next crop's listing) used to get a budget
    of its own, and an outage cost a budget per request in a row."""
    since = health.failing_run(policy.give_up_after)
    began = first_failure if since is None else min(first_failure, since)
    return began + policy.give_up_after


def _run_deadline(asked: float, health: StoreHealth, policy: RetryPolicy) -> float | None:
    """When the store's current run of failures gives up, if the store is
    failing and the run could still send something when a request
    ``asked`` (``min_attempt`` before its end); else None: a request made
    after a run gave up starts a budget of its own."""
    since = health.failing_run(policy.give_up_after)
    if since is None or asked >= health.run_over():
        return None
    return since + policy.give_up_after


def _last_start(first_failure: float, health: StoreHealth, policy: RetryPolicy) -> float:
    """The last instant a retry of a request that first failed at
    ``first_failure`` may be sent: ``min_attempt`` before its deadline."""
    return _own_deadline(first_failure, health, policy) - policy.min_attempt


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header (delta-seconds or an HTTP date).
    A date is GMT (RFC 9110), in the forms that name no zone too (``-0000``,
    asctime's), which ``email.utils`` leaves naive: local time, hours off."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return max(0.0, when.timestamp() - time.time())
