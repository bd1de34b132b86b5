"""Timeouts and retries for store requests.

Object stores fail transiently all the time: S3 and B2 answer load with
``503 SlowDown`` (B2 sometimes with ``Retry-After``), connections get reset,
a body arrives short. Backends turn such failures into ``TransientError``;
``call_with_retries`` repeats the request with exponential backoff and
jitter, waits at least as long as a ``Retry-After`` asked, bounds every
attempt by a timeout (a stalled server is a transient failure too) and, once
the budget is spent, raises one ``StorageError`` that names the request
(URL without credentials, byte range) and the last cause.
"""

from __future__ import annotations

import asyncio
import dataclasses
import email.utils
import logging
import random
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from ..errors import StorageError
from .stats import StoreStats

__all__ = ["RetryPolicy", "TransientError", "call_with_retries", "parse_retry_after"]

log = logging.getLogger("streamer.storage")

T = TypeVar("T")


class TransientError(Exception):
    """A failure worth retrying. ``retry_after``: seconds the server asked for."""

    def __init__(self, cause: str, *, retry_after: float | None = None) -> None:
        super().__init__(cause)
        self.retry_after = retry_after


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    """How hard a store tries before giving up on one request.

    ``attempts`` counts the first try. The n-th retry waits a random time in
    ``[d/2, d]`` with ``d = min(max_backoff, backoff * 2**n)`` (jitter keeps
    many workers from retrying in lockstep), or ``Retry-After`` when the
    server sent a longer one (capped at ``max_retry_after``).
    """

    attempts: int = 5
    timeout: float = 30.0
    backoff: float = 0.1
    max_backoff: float = 10.0
    max_retry_after: float = 60.0

    def delay(self, retry: int, retry_after: float | None) -> float:
        ceiling = min(self.max_backoff, self.backoff * 2**retry)
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
) -> T:
    """``await request()`` until it succeeds, within ``policy``.

    ``what`` describes the request for logs and the final error; it must be
    safe to log (no credentials). Errors that are not transient (a missing
    object, a refused signature) propagate at once.
    """
    for attempt in range(policy.attempts):
        try:
            async with asyncio.timeout(policy.timeout):
                return await request()
        except TimeoutError:
            failure = TransientError(f"no complete response within {policy.timeout:g} s")
        except TransientError as exc:
            failure = exc
        if attempt + 1 == policy.attempts:
            break
        delay = policy.delay(attempt, failure.retry_after)
        stats.retries += 1
        log.info("retrying %s in %.2f s: %s", what, delay, failure)
        await asyncio.sleep(delay)
    stats.failures += 1
    raise StorageError(f"{what}: {failure} (gave up after {policy.attempts} attempts)")


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header (delta-seconds or an HTTP date)."""
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
    return max(0.0, when.timestamp() - time.time())
