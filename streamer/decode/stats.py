"""Counters of what the decode stage did, for ``Dataset.stats`` and the bench."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

__all__ = ["DecodeStats"]


@dataclass
class DecodeStats:
    """Per-dataset decode counters. ``fallback`` crops had no usable index;
    ``unplanned_reads`` counts a decoder asking for bytes outside its plan
    (always a bug signal); ``bad_packets`` were skipped by the decoder."""

    crops: int = 0
    planned_bytes: int = 0
    fallback: int = 0
    fallback_reasons: dict[str, int] = field(default_factory=dict)
    unplanned_reads: int = 0
    unplanned_bytes: int = 0
    bad_packets: int = 0

    def count_fallback(self, reason: str) -> None:
        self.fallback += 1
        self.fallback_reasons[reason] = self.fallback_reasons.get(reason, 0) + 1

    def as_dict(self) -> dict[str, object]:
        return asdict(self)
