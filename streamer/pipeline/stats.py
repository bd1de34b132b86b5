"""What a Streamer did: crops yielded and skipped, I/O, waiting, latency."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from ..formats.job import DecodeStats

__all__ = ["StreamerStats"]

#: Latencies kept for the percentiles (the most recent ones beyond this).
MAX_LATENCIES = 100_000


@dataclass
class StreamerStats:
    """Counters since the Streamer was made.

    ``skipped`` maps a reason (the error's class name: ``CropError``,
    ``ShardError``, ``WorkerDied``, an unexpected ``IndexError``, ...) to a
    count; a ``StorageError`` is raised, never skipped. ``skipped_by_source``
    holds the same counts under each crop's source (``crop.source``: a
    ``Mix`` item's name, else the dataset's URL), so a mix says which
    dataset lost crops. ``skipped_shards`` names the audio shards left out
    of every epoch because they cannot be read (``Dataset.bad_shards``:
    source -> shard -> reason, once the episodes are read): their episodes
    are in no plan, so none of their crops is counted in ``skipped``, and
    an epoch without them ends early without it. ``worker_restarts``
    counts decode workers that died (and were replaced). ``bytes_read`` is what
    the crops cost the storage: bytes fetched from remote stores plus the
    planned bytes read from local mappings. ``requests`` and ``cache_hits``
    (memory and disk blocks) come from the remote stores' counters, which are
    shared by everything using the same store in this process.
    ``dropped`` counts the crops of a pass that no rank serves: the even
    split's remainder under ``drop_last`` (fewer than ``world_size``), the
    same for every rank, so only the last rank (its first DataLoader worker)
    counts them: a sum over all consumers is the job's. ``repeated`` counts
    those served twice instead with ``drop_last=False`` (repeated from the
    start of the order to fill the last ranks' runs), counted the same way.
    ``queue_wait_s`` is how long the consumer waited for crops: near zero
    means the pipeline keeps up. ``latencies`` are per-crop seconds from
    planning to decoded.
    """

    yielded: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    skipped_by_source: dict[str, dict[str, int]] = field(default_factory=dict)
    skipped_shards: dict[str, dict[str, str]] = field(default_factory=dict)
    dropped: int = 0
    repeated: int = 0
    bytes_read: int = 0
    requests: int = 0
    cache_hits: int = 0
    queue_wait_s: float = 0.0
    worker_restarts: int = 0
    decode: DecodeStats = field(default_factory=DecodeStats)
    latencies: list[float] = field(default_factory=list, repr=False)

    def count_skip(self, reason: str, source: str | None = None) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + 1
        if source is not None:
            counts = self.skipped_by_source.setdefault(source, {})
            counts[reason] = counts.get(reason, 0) + 1

    def add_latency(self, seconds: float) -> None:
        if len(self.latencies) >= MAX_LATENCIES:
            del self.latencies[: MAX_LATENCIES // 2]
        self.latencies.append(seconds)

    def percentile_ms(self, q: float) -> float | None:
        if not self.latencies:
            return None
        return float(np.percentile(self.latencies, q) * 1000)

    def as_dict(self) -> dict[str, object]:
        """JSON-ready: every counter, the decode counters, p50/p99 latency in ms."""
        out = {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.name not in ("latencies", "decode")
        }
        out["skipped"] = dict(self.skipped)
        out["skipped_by_source"] = {k: dict(v) for k, v in self.skipped_by_source.items()}
        out["skipped_shards"] = {k: dict(v) for k, v in self.skipped_shards.items()}
        out["decode"] = self.decode.as_dict()
        out["p50_ms"] = self.percentile_ms(50)
        out["p99_ms"] = self.percentile_ms(99)
        return out
