"""Weighted mixing of several datasets into one stream."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from ..dataset import Dataset, open_dataset

__all__ = ["Mix", "open_source"]


class Mix:
    """Several datasets in one epoch, each contributing crops in proportion to its weight.

    ``Mix([(speech, 3), (music, 1)])``: three quarters of each epoch's crops
    come from ``speech``, spread evenly through the epoch. Items are datasets
    or URLs (opened with ``storage_options``). Every dataset uses the
    Streamer's sampler.
    """

    def __init__(
        self,
        items: Sequence[tuple[Dataset | str | os.PathLike[str], float]],
        **storage_options: Any,
    ) -> None:
        if not items:
            raise ValueError("Mix needs at least one (dataset, weight) pair")
        self.sources = [(open_source(data, storage_options), float(w)) for data, w in items]

    def __repr__(self) -> str:
        return "Mix([" + ", ".join(f"({d.url!r}, {w:g})" for d, w in self.sources) + "])"


def open_source(data: Dataset | str | os.PathLike[str], storage_options: dict[str, Any]) -> Dataset:
    """A dataset as given, or opened from its URL."""
    if isinstance(data, Dataset):
        return data
    return open_dataset(data, **storage_options)
