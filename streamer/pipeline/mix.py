"""Weighted mixing of several datasets into one stream."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from ..dataset import Dataset, open_dataset
from .keywords import checked_keywords

__all__ = ["Mix", "open_source"]


class Mix:
    """Several datasets in one epoch, each contributing crops in proportion to its weight.

    ``Mix([(speech, 3), (music, 1)])``: three quarters of each epoch's crops
    come from ``speech``, spread evenly through the epoch. Items are datasets
    or URLs (opened with ``storage_options``, which an already open
    ``Dataset`` cannot take). Every dataset uses the Streamer's sampler.
    Each crop names its dataset in ``crop.source``: the item's third element
    when there is one (``(speech, 3, "speech")``), else the dataset's URL.
    """

    @checked_keywords
    def __init__(
        self,
        items: Sequence[tuple[Dataset | str | os.PathLike[str], float] | tuple[Any, float, str]],
        *,
        storage_options: Mapping[str, Any] | None = None,
    ) -> None:
        if not items:
            raise ValueError("Mix needs at least one (dataset, weight) pair")
        self.sources = [(open_source(item[0], storage_options), float(item[1])) for item in items]
        self.names = [
            str(item[2]) if len(item) > 2 else dataset.url
            for item, (dataset, _) in zip(items, self.sources, strict=True)
        ]

    def __repr__(self) -> str:
        return "Mix([" + ", ".join(f"({d.url!r}, {w:g})" for d, w in self.sources) + "])"


def open_source(
    data: Dataset | str | os.PathLike[str], storage_options: Mapping[str, Any] | None
) -> Dataset:
    """A dataset as given, or opened from its URL with ``storage_options``."""
    check_storage_options(data, storage_options)
    if isinstance(data, Dataset):
        return data
    return open_dataset(data, **(storage_options or {}))


def check_storage_options(data: object, storage_options: Mapping[str, Any] | None) -> None:
    """Refuse store options for data whose store is already chosen (an open
    ``Dataset``, or a ``Mix`` of them) instead of dropping them."""
    if not storage_options:
        return
    if isinstance(data, Mix):
        raise ValueError(
            "storage_options cannot apply to a Mix: its datasets are already open; "
            "give them to Mix(items, storage_options=...)"
        )
    if isinstance(data, Dataset):
        raise ValueError(
            f"storage_options {sorted(storage_options)} cannot apply to the open dataset "
            f"{data.url}: its store is already chosen; give them to "
            "streamer.open_dataset(url, ...), or give the URL instead of the Dataset"
        )
