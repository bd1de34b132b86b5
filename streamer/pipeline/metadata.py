"""What a crop carries besides its audio: its episode's columns and supervisions.

Training needs labels with the audio: per-episode fields from other column
directories (speaker, language, label, transcript), and for speech the
segments of a transcript that overlap the crop. Column directories hold the
same rows as the audio in the same order (the dataset checks their
``__key__`` column when it opens a shard), so a field is joined by row; a
shard's column is read once, when the first crop of that shard needs it,
and kept (``Shard.column``: zero-copy for a local shard).

Reading happens in the planner's threads (a remote column is a request),
never on the store loop; the Streamer attaches the result to the crop it
yields.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..dataset.dataset import Dataset
from ..errors import LayoutError
from .episodes import Episodes

__all__ = ["EpisodeFields", "find_column", "overlapping"]

#: Episodes whose parsed supervisions are kept (the epoch order visits an
#: episode's crops together, so a few suffice).
SUPERVISION_CACHE = 64


def find_column(dataset: Dataset, name: str) -> tuple[str, str]:
    """The (column directory, field) of ``name``: ``"field"`` (the first
    directory, by name, that has it) or ``"directory/field"``."""
    column_dir, _, field = name.rpartition("/")
    if not dataset.shard_names:  # every audio shard skipped: none to read a column of
        skipped = "; ".join(f"{shard}: {why}" for shard, why in dataset.bad_shards.items())
        raise LayoutError(
            f"{dataset.url}: cannot find the column {name!r}: no {dataset.audio_dir}/ shard "
            f"of the dataset can be read" + (f" (skipped: {skipped})" if skipped else "")
        )
    dirs = [column_dir] if column_dir else sorted(dataset.column_dirs)
    for candidate in dirs:
        shard = dataset.shard(dataset.shard_names[0], candidate)
        if field in shard.schema.names:
            return candidate, field
    raise LayoutError(f"{dataset.url}: no column directory has a {field!r} column")


@dataclass(frozen=True)
class _Supervisions:
    """One episode's segments: their start and end times, and the segments."""

    start: np.ndarray
    end: np.ndarray
    items: list[dict[str, Any]]


class EpisodeFields:
    """The ``columns`` and ``supervisions`` of one dataset's episodes."""

    def __init__(
        self, episodes: Episodes, columns: Sequence[str] = (), supervisions: str | None = None
    ) -> None:
        dataset = episodes.dataset
        self.episodes = episodes
        self.columns = {name: find_column(dataset, name) for name in columns}
        self.supervisions = find_column(dataset, supervisions) if supervisions else None
        self._parsed = functools.lru_cache(maxsize=SUPERVISION_CACHE)(self._parse)

    def _cell(self, where: tuple[str, str], episode: int) -> Any:
        dataset = self.episodes.dataset
        shard = dataset.shard_names[int(self.episodes.shard[episode])]
        column = dataset.shard(shard, where[0]).column(where[1])
        return column[int(self.episodes.row[episode])].as_py()

    def fields(self, episode: int) -> dict[str, Any]:
        """The episode's columns, by the names they were asked for."""
        return {name: self._cell(where, episode) for name, where in self.columns.items()}

    def overlapping(self, episode: int, start: float, end: float) -> list[dict[str, Any]] | None:
        """The episode's supervisions that overlap ``[start, end)``, times
        relative to ``start`` (None when none were asked for)."""
        if self.supervisions is None:
            return None
        return overlapping(self._parsed(episode), start, end)

    def _parse(self, episode: int) -> _Supervisions:
        cell = self._cell(self.supervisions, episode)  # type: ignore[arg-type]
        items = json.loads(cell) if isinstance(cell, str | bytes) else (cell or [])
        if not isinstance(items, list) or not all(
            isinstance(item, dict) and "start" in item and "end" in item for item in items
        ):
            raise LayoutError(
                f"supervisions of {self.episodes.keys[episode]!r} are not a list of "
                "segments with 'start' and 'end'"
            )
        start = np.array([float(item["start"]) for item in items])
        end = np.array([float(item["end"]) for item in items])
        return _Supervisions(start, end, items)


def overlapping(segments: _Supervisions, start: float, end: float) -> list[dict[str, Any]]:
    """Segments with ``segment.start < end`` and ``segment.end > start``, shifted
    by ``-start``; so are their ``words`` (those that overlap too). Times are
    not clipped: a segment that began before the crop has a negative start."""
    chosen = np.flatnonzero((segments.start < end) & (segments.end > start))
    return [_shifted(segments.items[i], start, end) for i in chosen]


def _shifted(item: dict[str, Any], start: float, end: float) -> dict[str, Any]:
    out = {**item, "start": float(item["start"]) - start, "end": float(item["end"]) - start}
    words = item.get("words")
    if isinstance(words, list):
        out["words"] = [
            _shifted(word, start, end)
            for word in words
            if float(word["start"]) < end and float(word["end"]) > start
        ]
    return out
