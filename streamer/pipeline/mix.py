"""Weighted mixing of several datasets into one stream."""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Iterable, Mapping
from typing import Any

from ..dataset import Dataset, open_dataset
from .keywords import checked_keywords

__all__ = ["Mix", "check_allow_incomplete", "open_source"]


class Mix:
    """Several datasets in one epoch, each contributing crops in proportion to its weight.

    ``Mix([(speech, 3), (music, 1)])``: three quarters of each epoch's crops
    come from ``speech``, spread evenly through the epoch. Items are datasets
    or URLs (opened with ``storage_options`` and ``allow_incomplete``, as
    ``open_dataset``; an already open ``Dataset`` cannot take them). Every
    dataset uses the Streamer's sampler.
    Each crop names its dataset in ``crop.source``: the item's third element
    when there is one (``(speech, 3, "speech")``), else the dataset's URL.

    Weights are finite numbers >= 0, not all zero (a weight of 0 keeps an
    item out of the epochs); names are unique, so the same dataset given
    twice needs two names. Anything else is a ``ValueError``.

    A saved state resumes only into the same mix: the same items in the
    same order, with the same names and the same shares of the weights
    (``items``; 4:2 is 2:1). Items named by their URL are told apart by
    their place and their episodes' keys.
    """

    @checked_keywords
    def __init__(
        self,
        items: Iterable[tuple[Dataset | str | os.PathLike[str], float] | tuple[Any, float, str]],
        *,
        storage_options: Mapping[str, Any] | None = None,
        allow_incomplete: bool = False,
    ) -> None:
        items = [_checked_item(number, item) for number, item in enumerate(items)]
        if not items:
            raise ValueError("Mix needs at least one (dataset, weight) pair")
        if not any(weight for _, weight, _ in items):
            listed = ", ".join(f"{_label(data, name)}: {weight:g}" for data, weight, name in items)
            raise ValueError(f"Mix weights are all zero: no item would give a crop ({listed})")
        self.sources = [
            (open_source(data, storage_options, allow_incomplete), weight)
            for data, weight, _ in items
        ]
        self.names = [
            dataset.url if name is None else name
            for (_, _, name), (dataset, _) in zip(items, self.sources, strict=True)
        ]
        first: dict[str, int] = {}
        for number, name in enumerate(self.names):
            if name in first:
                raise ValueError(
                    f"Mix items {first[name]} and {number} are both named {name!r}: "
                    "crop.source could not tell their crops apart; give each item a "
                    "name of its own as (dataset, weight, name), or one item with the "
                    "weights added"
                )
            first[name] = number
        total = sum(weight for _, weight, _ in items)
        #: What a resume point is a place in besides the order (``items``):
        #: each item's name as ``crop.source`` gives it (None for an item
        #: named by its URL: the same data moved elsewhere is the same mix)
        #: and its share of the weights.
        self.items: list[list[Any]] = [[name, weight / total] for _, weight, name in items]

    def __repr__(self) -> str:
        return "Mix([" + ", ".join(f"({d.url!r}, {w:g})" for d, w in self.sources) + "])"


def _checked_item(number: int, item: Any) -> tuple[Any, float, str | None]:
    """``(data, weight, name or None)`` of Mix item ``number``, or a ValueError
    saying what is wrong with it."""
    if not isinstance(item, tuple | list) or len(item) not in (2, 3):
        raise ValueError(
            f"Mix item {number} is {item!r}: give (dataset, weight) or (dataset, weight, name)"
        )
    data, weight, name = item[0], item[1], item[2] if len(item) > 2 else None
    if len(item) > 2 and (not isinstance(name, str) or not name):
        raise ValueError(f"Mix: the name of item {number} must be a non-empty string, not {name!r}")
    real = isinstance(weight, numbers.Real) and not isinstance(weight, bool)
    if not real or not math.isfinite(weight) or weight < 0:
        raise ValueError(
            f"Mix: the weight of item {number} ({_label(data, name)}) must be a finite "
            f"number >= 0, not {weight!r}"
        )
    return data, float(weight), name


def _label(data: Any, name: str | None) -> str:
    """An item as an error names it: its name, else its dataset's URL (or the
    URL it was given as)."""
    if name is not None:
        return name
    return data.url if isinstance(data, Dataset) else str(data)


def open_source(
    data: Dataset | str | os.PathLike[str],
    storage_options: Mapping[str, Any] | None,
    allow_incomplete: bool = False,
) -> Dataset:
    """A dataset as given, or opened from its URL with ``storage_options``
    and ``allow_incomplete`` (``open_dataset``)."""
    check_storage_options(data, storage_options)
    check_allow_incomplete(data, allow_incomplete)
    if isinstance(data, Dataset):
        return data
    return open_dataset(data, allow_incomplete=allow_incomplete, **(storage_options or {}))


def check_allow_incomplete(data: object, allow_incomplete: bool) -> None:
    """Refuse ``allow_incomplete`` for data opened without it (an open
    ``Dataset``, or a ``Mix`` of any): it would be dropped, and the
    incomplete dataset raise anyway."""
    if not allow_incomplete:
        return
    if isinstance(data, Mix) and not all(d.allow_incomplete for d, _ in data.sources):
        raise ValueError(
            "allow_incomplete cannot apply to a Mix: its datasets are already open; "
            "give it to Mix(items, allow_incomplete=True)"
        )
    if isinstance(data, Dataset) and not data.allow_incomplete:
        raise ValueError(
            f"allow_incomplete cannot apply to the open dataset {data.url}: give it to "
            "streamer.open_dataset(url, allow_incomplete=True), or give the URL instead"
        )


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
