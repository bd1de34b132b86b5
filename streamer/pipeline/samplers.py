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

from ..errors import LayoutError
from .episodes import Episodes

__all__ = ["Crops", "RandomCrops", "Sampler", "SegmentCrops", "SequentialCrops"]


@dataclass(frozen=True)
class Crops:
    """Planned crops of one dataset: parallel arrays."""

    episode: np.ndarray  # int64 rows of ``Episodes``
    start: np.ndarray  # float64 seconds
    end: np.ndarray  # float64 seconds

    def __len__(self) -> int:
        return len(self.episode)

    @classmethod
    def of(cls, episode: object, start: object, end: object) -> Crops:
        return cls(
            np.asarray(episode, dtype=np.int64).ravel(),
            np.asarray(start, dtype=np.float64).ravel(),
            np.asarray(end, dtype=np.float64).ravel(),
        )


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
    lists of pairs, or ``.npy`` bytes of an ``(n, 2)`` array. Segments longer
    than ``max_duration`` are cut into consecutive pieces of at most that."""

    def __init__(self, column: str, max_duration: float | None = None) -> None:
        self.column = column
        self.max_duration = max_duration

    def __repr__(self) -> str:
        return f"SegmentCrops({self.column!r}, max_duration={self.max_duration})"

    def crops(self, episodes: Episodes, rng: np.random.Generator) -> Crops:
        segments = self._segments(episodes)
        counts = [len(pairs) for pairs in segments]
        pairs = np.concatenate(segments) if segments else np.zeros((0, 2))
        episode = np.repeat(np.arange(len(segments)), counts)
        keep = (pairs[:, 0] >= 0) & (pairs[:, 1] > pairs[:, 0])
        crops = Crops.of(episode[keep], pairs[keep, 0], pairs[keep, 1])
        return self._split(crops) if self.max_duration else crops

    def _segments(self, episodes: Episodes) -> list[np.ndarray]:
        dataset = episodes.dataset
        column_dir, field = self._where(dataset)
        out: list[np.ndarray] = []
        for name in dataset.shard_names:
            for cell in dataset.shard(name, column_dir).column(field).to_pylist():
                out.append(_pairs(cell))
        return out

    def _where(self, dataset: object) -> tuple[str, str]:
        column_dir, _, field = self.column.rpartition("/")
        dirs = [column_dir] if column_dir else list(dataset.column_dirs)  # type: ignore[attr-defined]
        for candidate in dirs:
            shard = dataset.shard(dataset.shard_names[0], candidate)  # type: ignore[attr-defined]
            if field in shard.schema.names:
                return candidate, field
        raise LayoutError(f"no column directory has a {field!r} column of segments")

    def _split(self, crops: Crops) -> Crops:
        step = float(self.max_duration)  # type: ignore[arg-type]
        pieces = np.ceil((crops.end - crops.start) / step).astype(np.int64)
        first = np.cumsum(pieces) - pieces
        within = np.arange(pieces.sum()) - np.repeat(first, pieces)
        start = np.repeat(crops.start, pieces) + within * step
        end = np.minimum(start + step, np.repeat(crops.end, pieces))
        return Crops.of(np.repeat(crops.episode, pieces), start, end)


def _pairs(cell: object) -> np.ndarray:
    """A cell of segments as an ``(n, 2)`` float array (lists, or ``.npy`` bytes)."""
    if cell is None:
        return np.zeros((0, 2))
    if isinstance(cell, bytes):
        cell = np.load(io.BytesIO(cell), allow_pickle=False)
    return np.asarray(cell, dtype=np.float64).reshape(-1, 2)
