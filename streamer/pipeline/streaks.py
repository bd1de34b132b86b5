"""Failures in a row: when skipping bad crops stops being about bad crops.

``on_error="skip"`` counts a crop whose data failed and goes on, which is
right for a few damaged files among many. When every crop fails (a codec
the FFmpeg build lacks, a dataset damaged as a whole, a bug) the same
policy ends the pass with nothing, and the training loop sees an epoch that
ended early with only warnings in a log. A run of failures with no crop of
the same source between them is the sign: ``FailureStreaks`` raises
``TooManyFailures`` at ``limit`` of them. Counted per source, so a dead
source in a ``Mix`` is found while the others still deliver.

At the default of 100, a source whose crops fail half the time (independently)
would need luck of 1 in 10^30 to trip it; one whose crops nearly all fail
trips it within the first few hundred.
"""

from __future__ import annotations

from collections import Counter

from ..errors import TooManyFailures
from .tasks import Failure

__all__ = ["FAILURES_IN_A_ROW", "FailureStreaks"]

#: ``Streamer(max_failures_in_a_row=...)``'s default.
FAILURES_IN_A_ROW = 100


class FailureStreaks:
    """The failures since each source's last crop; ``limit`` None: no limit."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self._reasons: dict[str, Counter[str]] = {}

    def yielded(self, source: str) -> None:
        self._reasons.pop(source, None)

    def failed(self, source: str, failure: Failure, *, named: bool) -> None:
        """Count one skipped crop of ``source``; raise ``TooManyFailures`` at
        the limit, naming the source (when ``named``: a ``Mix``), the
        reasons counted and the last failure's message."""
        reasons = self._reasons.setdefault(source, Counter())
        reasons[failure.reason] += 1
        if self.limit is None or reasons.total() < self.limit:
            return
        del self._reasons[source]
        counted = ", ".join(f"{reason} x{n}" for reason, n in reasons.most_common())
        where = f" of source {source!r}" if named else ""
        raise TooManyFailures(
            f"{self.limit} crops{where} in a row failed ({counted}); the last: "
            f"{failure.message}. Skipping cannot be what is wanted when nothing "
            "comes through: fix the cause, or pass max_failures_in_a_row=None"
        ) from failure.exception
