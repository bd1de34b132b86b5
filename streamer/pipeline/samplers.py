"""Crop samplers: which ``[start, end)`` windows of which episodes make an epoch.

A sampler sees the episodes of one dataset (``Episodes``) and a random
generator seeded from (seed, epoch, source), and returns the crops as three
arrays: episode number, start and end in seconds. Crops come out grouped by
episode; the epoch's order (locality, shuffling, sharding) is decided later,
in ``order.py``, the same way for every sampler.
"""

from __future__ import annotations

import abc
import io
from dataclasses import dataclass

import numpy as np

from .episodes import Episodes
from .metadata import find_column

__all__ = ["Crops", "RandomCrops", "Sampler", "SegmentCrops", "SequentialCrops"]


@dataclass(frozen=True)
class Crops:
    """Planned crops of one dataset: parallel arrays. ``fields`` (optional, an
    object array of dicts or None) are what a crop carries from its sampler
    (a segment's own fields)."""

    episode: np.ndarray  # int64 rows of ``Episodes``
    start: np.ndarray  # float64 seconds
    end: np.ndarray  # float64 seconds
    fields: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.episode)

    @classmethod
    def of(cls, episode: object, start: object, end: object, fields: object = None) -> Crops:
        return cls(
            np.asarray(episode, dtype=np.int64).ravel(),
            np.asarray(start, dtype=np.float64).ravel(),
            np.asarray(end, dtype=np.float64).ravel(),
            None if fields is None else _objects(fields),
        )

    def take(self, rows: np.ndarray) -> Crops:
        """These crops at ``rows`` (reordered, repeated or left out)."""
        fields = None if self.fields is None else self.fields[rows]
        return Crops(self.episode[rows], self.start[rows], self.end[rows], fields)


def _objects(values: object) -> np.ndarray:
    """A one-dimensional object array of ``values`` (dicts stay dicts)."""
    items = list(values)  # type: ignore[call-overload]
    out = np.empty(len(items), dtype=object)
    out[:] = items
    return out


class Sampler(abc.ABC):
    """Turns a dataset's episodes into an epoch's crops (deterministic given ``rng``)."""

    @abc.abstractmethod
    def crops(self, episodes: Episodes, rng: np.random.Generator) -> Crops:
        """The crops of one epoch; episodes of unknown duration are left out."""


class RandomCrops(Sampler):
    """``per_episode`` crops of ``duration`` seconds at uniform random positions.

    Episodes shorter than ``duration`` but at least ``min_duration`` long
    (default: ``duration``, i.e. none) give one crop of their whole length;
    shorter ones give none.
    """

    def __init__(
        self, duration: float, per_episode: int = 1, min_duration: float | None = None
    ) -> None:
        if duration <= 0 or per_episode < 1:
            raise ValueError("RandomCrops needs duration > 0 and per_episode >= 1")
        self.duration = float(duration)
        self.per_episode = int(per_episode)
        self.min_duration = self.duration if min_duration is None else float(min_duration)

    def __repr__(self) -> str:
        return f"RandomCrops({self.duration:g}, per_episode={self.per_episode})"

    def crops(self, episodes: Episodes, rng: np.random.Generator) -> Crops:
        lengths = episodes.duration
        known = np.nan_to_num(lengths, nan=-1.0)
        full = np.flatnonzero(known >= self.duration)
        short = np.flatnonzero((known >= self.min_duration) & (known < self.duration))
        room = lengths[full] - self.duration
        starts = rng.random((len(full), self.per_episode)) * room[:, None]
        episode = np.concatenate([np.repeat(full, self.per_episode), short])
        start = np.concatenate([starts.ravel(), np.zeros(len(short))])
        end = np.concatenate([start[: starts.size] + self.duration, lengths[short]])
        return Crops.of(episode, start, end)


class SequentialCrops(Sampler):
    """Windows of ``duration`` seconds every ``hop`` seconds (default: ``duration``,
    back to back) from the start of each episode; the last window of an
    episode is cut at its end (use ``pad=True`` on the Streamer for equal lengths)."""

    def __init__(self, duration: float, hop: float | None = None) -> None:
        self.duration = float(duration)
        self.hop = self.duration if hop is None else float(hop)
        if self.duration <= 0 or self.hop <= 0:
            raise ValueError("SequentialCrops needs duration > 0 and hop > 0")

    def __repr__(self) -> str:
        return f"SequentialCrops({self.duration:g}, hop={self.hop:g})"

    def crops(self, episodes: Episodes, rng: np.random.Generator) -> Crops:
        lengths = np.nan_to_num(episodes.duration, nan=0.0)
        counts = np.ceil(np.maximum(lengths, 0) / self.hop).astype(np.int64)
        episode = np.repeat(np.arange(len(lengths)), counts)
        first = np.cumsum(counts) - counts
        start = (np.arange(counts.sum()) - np.repeat(first, counts)) * self.hop
        end = np.minimum(start + self.duration, lengths[episode])
        return Crops.of(episode, start, end)


class SegmentCrops(Sampler):
    """One crop per segment listed in a column, e.g. voice activity ``[[start, end], ...]``
    in seconds. ``column`` names a field in one of the dataset's column
    directories (``"vad"``, or ``"vad_dir/vad"`` to say which); its cells are
    lists of pairs, ``.npy`` bytes of an ``(n, 2)`` array, or lists of
    segments with ``start`` and ``end`` (Arrow structs), whose other fields
    (a transcript's ``text``, a ``speaker``) each crop carries in
    ``crop.fields``. Segments longer than ``max_duration`` are cut into
    consecutive pieces of at most that, each with its segment's fields."""

    def __init__(self, column: str, max_duration: float | None = None) -> None:
        self.column = column
        self.max_duration = max_duration

    def __repr__(self) -> str:
        return f"SegmentCrops({self.column!r}, max_duration={self.max_duration})"

    def crops(self, episodes: Episodes, rng: np.random.Generator) -> Crops:
        segments = self._segments(episodes)
        counts = [len(pairs) for pairs, _ in segments]
        pairs = np.concatenate([p for p, _ in segments]) if segments else np.zeros((0, 2))
        episode = np.repeat(np.arange(len(segments)), counts)
        keep = (pairs[:, 0] >= 0) & (pairs[:, 1] > pairs[:, 0])
        with_fields = any(f is not None for _, f in segments)
        fields = (
            [f for pairs, found in segments for f in (found or [{}] * len(pairs))]
            if with_fields
            else None
        )
        crops = Crops.of(episode, pairs[:, 0], pairs[:, 1], fields).take(np.flatnonzero(keep))
        return self._split(crops) if self.max_duration else crops

    def _segments(self, episodes: Episodes) -> list[tuple[np.ndarray, list[dict] | None]]:
        dataset = episodes.dataset
        column_dir, field = find_column(dataset, self.column)
        out = []
        for name in dataset.shard_names:
            for cell in dataset.shard(name, column_dir).column(field).to_pylist():
                out.append(_segments(cell))
        return out

    def _split(self, crops: Crops) -> Crops:
        step = float(self.max_duration)  # type: ignore[arg-type]
        pieces = np.ceil((crops.end - crops.start) / step).astype(np.int64)
        first = np.cumsum(pieces) - pieces
        within = np.arange(pieces.sum()) - np.repeat(first, pieces)
        whole = crops.take(np.repeat(np.arange(len(crops)), pieces))
        start = whole.start + within * step
        end = np.minimum(start + step, whole.end)
        return Crops(whole.episode, start, end, whole.fields)


def _segments(cell: object) -> tuple[np.ndarray, list[dict] | None]:
    """A cell of segments as an ``(n, 2)`` float array (lists of pairs, ``.npy``
    bytes, or dicts with ``start`` and ``end``) and each segment's other fields."""
    if cell is None:
        return np.zeros((0, 2)), None
    if isinstance(cell, bytes):
        cell = np.load(io.BytesIO(cell), allow_pickle=False)
    if isinstance(cell, list) and cell and isinstance(cell[0], dict):
        pairs = np.array([[s["start"], s["end"]] for s in cell], dtype=np.float64)
        fields = [{k: v for k, v in s.items() if k not in ("start", "end")} for s in cell]
        return pairs.reshape(-1, 2), fields
    return np.asarray(cell, dtype=np.float64).reshape(-1, 2), None
