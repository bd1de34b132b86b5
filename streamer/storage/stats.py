"""Per-store I/O counters: what the network actually cost.

Every store owns one ``StoreStats``; the block cache and the retry loop
update it on the store's event loop thread, so plain integers suffice.
``snapshot()`` is what the pipeline and ``streamer bench`` report.
"""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = ["FAILURE_REASONS", "StoreStats"]

#: Why a request failed, as ``StoreStats.failure_reasons`` counts it: its
#: retries were spent (the time budget, ``attempts``, an outage); or it
#: failed at once, as no retry mends it: the object is missing, the range
#: lies past its end, or anything else (access denied, Range ignored, a
#: certificate that does not verify, an object changed on the server, ...).
FAILURE_REASONS = ("gave up retrying", "not found", "range not satisfiable", "not retryable")


@dataclasses.dataclass
class StoreStats:
    """Counters for one store (one connection pool), since it was created.

    ``requests`` counts every attempt sent (listings, size queries and
    writes too), ``bytes_fetched`` the bodies of successful reads,
    ``bytes_stored`` those of successful writes; ``hits`` (memory),
    ``disk_hits`` and ``misses`` count cache blocks; ``deduplicated`` counts
    blocks a reader got by joining a fetch already in flight; ``retries``
    counts attempts repeated after a transient failure, ``failures`` the
    requests that failed, each once: those that gave up retrying and those
    no retry mends (a missing object, a refused range, access denied), and
    ``failure_reasons`` why, by ``FAILURE_REASONS`` (``failed``); ``hedges``
    counts GETs sent a second time because the first stalled, ``hedge_wins``
    those where the second answered first;
    ``outages`` counts the times the store failed often enough in a row that
    its requests waited for it together (see ``health.py``). ``throttled``
    counts answers that said the store is overloaded (503, 429, ``SlowDown``,
    timeouts), ``limit_cuts`` the times one of them halved an adaptive
    concurrency limit, ``rate_waits`` requests held back by ``max_rps``;
    ``partial_answers`` counts range answers that carried fewer bytes than
    asked, as they said (the server caps range sizes), whose rest was asked
    for anew; ``concurrency_limits`` is a gauge, not a counter: the current limit of
    each endpoint/prefix (``throttle.py``), kept by ``reset``.
    """

    requests: int = 0
    bytes_fetched: int = 0
    bytes_stored: int = 0
    hits: int = 0
    disk_hits: int = 0
    misses: int = 0
    deduplicated: int = 0
    retries: int = 0
    failures: int = 0
    hedges: int = 0
    hedge_wins: int = 0
    outages: int = 0
    throttled: int = 0
    limit_cuts: int = 0
    rate_waits: int = 0
    partial_answers: int = 0
    concurrency_limits: dict[str, int] = dataclasses.field(default_factory=dict)
    failure_reasons: dict[str, int] = dataclasses.field(default_factory=dict)

    def failed(self, reason: str) -> None:
        """Count one failed request, and ``reason`` (one of ``FAILURE_REASONS``)."""
        self.failures += 1
        self.failure_reasons[reason] = self.failure_reasons.get(reason, 0) + 1

    def snapshot(self) -> dict[str, Any]:
        """The counters (and the limits) as a plain dict (JSON-ready)."""
        return dataclasses.asdict(self)

    def reset(self) -> None:
        """Zero every counter (benchmarks measure one phase at a time); the
        limits are the stores' state, not counts, and stay."""
        for field in dataclasses.fields(self):
            if field.type == "int":
                setattr(self, field.name, 0)
        self.failure_reasons.clear()
