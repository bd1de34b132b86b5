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
import logging
import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..dataset.tables import read_rows
from ..errors import LayoutError
from .arguments import finite_number, whole_number
from .episodes import Episodes
from .metadata import find_column

__all__ = ["Crops", "ListCrops", "RandomCrops", "Sampler", "SegmentCrops", "SequentialCrops"]

log = logging.getLogger(__name__)


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
    """Crops of ``duration`` seconds at uniform random positions: ``per_episode``
    of each episode (default 1), or ``per_hour`` crops per hour of audio, so
    a 40-hour audiobook gives 1200 times the crops of a 2-minute clip.

    With ``per_hour`` an episode of ``h`` hours gets ``h * per_hour`` crops,
    rounded down or up at random in proportion to the fraction (so the
    expected count is exact even for short episodes). Episodes shorter than
    ``duration`` but at least ``min_duration`` long (default: ``duration``,
    i.e. none) give crops of their whole length: one (``per_episode``), or
    ``h * per_hour`` as any episode (a 7.9 s episode under ``duration=8,
    per_hour=100`` got one every epoch, 4.5 times its share); shorter ones give none,
    nor do episodes of no audio (``min_duration=0``: a crop ``[0, 0)`` is
    no crop, it ended the pass with a ``ValueError``).
    """

    def __init__(
        self,
        duration: float,
        per_episode: int | None = None,
        min_duration: float | None = None,
        *,
        per_hour: float | None = None,
    ) -> None:
        if per_episode is not None and per_hour is not None:
            raise ValueError("RandomCrops takes per_episode or per_hour, not both")
        self.duration = finite_number("RandomCrops: duration", duration, positive=True)
        self.per_episode, self.per_hour = None, None
        if per_hour is None:
            given = 1 if per_episode is None else per_episode
            self.per_episode = whole_number("RandomCrops: per_episode", given, 1)
        else:
            self.per_hour = finite_number("RandomCrops: per_hour", per_hour, positive=True)
        self.min_duration = (
            self.duration
            if min_duration is None
            else finite_number("RandomCrops: min_duration", min_duration)
        )

    def __repr__(self) -> str:
        count = (
            f"per_hour={self.per_hour:g}" if self.per_hour else f"per_episode={self.per_episode}"
        )
        return f"RandomCrops({self.duration:g}, {count})"

    def crops(self, episodes: Episodes, rng: np.random.Generator) -> Crops:
        lengths = episodes.duration
        known = np.nan_to_num(lengths, nan=-1.0)
        full = np.flatnonzero(known >= self.duration)
        short = np.flatnonzero((known >= self.min_duration) & (known > 0) & (known < self.duration))
        counts = _counted(self._draw(lengths[full], rng), self, episodes)
        starts = rng.random(int(counts.sum())) * np.repeat(lengths[full] - self.duration, counts)
        wholes = np.ones(len(short), np.int64)
        if self.per_hour is not None:  # as often as their length says, as long ones
            wholes = _counted(self._draw(lengths[short], rng), self, episodes)
        episode = np.concatenate([np.repeat(full, counts), np.repeat(short, wholes)])
        start = np.concatenate([starts, np.zeros(int(wholes.sum()))])
        end = np.concatenate([starts + self.duration, np.repeat(episodes.end_time[short], wholes)])
        return Crops.of(episode, start, end)

    def _draw(self, lengths: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Crops of episodes of ``lengths`` seconds: ``per_episode``, or
        ``per_hour`` times their hours rounded down or up at random."""
        if self.per_hour is None:
            return np.full(len(lengths), float(self.per_episode))
        return np.floor(lengths * self.per_hour / 3600.0 + rng.random(len(lengths)))


class SequentialCrops(Sampler):
    """Windows of ``duration`` seconds every ``hop`` seconds (default: ``duration``,
    back to back) from the start of each episode; the last window of an
    episode is cut at its end, and is that long whatever the Streamer's
    ``pad`` (which pads crops planned past an episode's end; for batches of
    equal length, ``streamer.torch.collate`` pads and gives each crop's length).
    A window that would hold no sample as the decode cuts it (one starting
    under half a sample before the end, or under half a sample long at the
    Streamer's ``sample_rate``) is not planned."""

    def __init__(self, duration: float, hop: float | None = None) -> None:
        self.duration = finite_number("SequentialCrops: duration", duration, positive=True)
        self.hop = (
            self.duration
            if hop is None
            else finite_number("SequentialCrops: hop", hop, positive=True)
        )

    def __repr__(self) -> str:
        return f"SequentialCrops({self.duration:g}, hop={self.hop:g})"

    def crops(self, episodes: Episodes, rng: np.random.Generator) -> Crops:
        lengths = np.maximum(np.nan_to_num(episodes.duration, nan=0.0), 0.0)
        episode, start, end = _windows(
            np.zeros(len(lengths)), lengths, self.hop, self.duration, (self, episodes)
        )
        # a window cut at the episode's end reaches its last sample, resampled too
        end = np.where(end == lengths[episode], episodes.end_time[episode], end)
        crops = Crops.of(episode, start, end)
        return crops.take(np.flatnonzero(episodes.holds_samples(episode, start, end)))


class ListCrops(Sampler):
    """Exactly the crops listed: ``(key, start, end)`` tuples, or dicts with
    ``key``, ``start`` and ``end`` (seconds) whose other items each crop
    carries in ``crop.fields``. ``ListCrops.read(path)`` reads a manifest.

    Every epoch has these crops (in the epoch's own order); a key the
    dataset does not hold is a ``LayoutError`` naming it and its row when
    the epoch is planned, never a crop silently left out.
    """

    def __init__(self, crops: Iterable[tuple[str, float, float] | Mapping[str, Any]]) -> None:
        self.keys: list[str] = []
        self.fields: list[dict[str, Any]] = []
        bounds = []
        for row, item in enumerate(crops):
            key, start, end, extra = _listed(row, item)
            self.keys.append(key)
            self.fields.append(extra)
            bounds.append((start, end))
        self.bounds = np.array(bounds, dtype=np.float64).reshape(-1, 2)

    def __repr__(self) -> str:
        return f"ListCrops({len(self.keys)} crops)"

    @classmethod
    def read(cls, path: str | os.PathLike[str]) -> ListCrops:
        """Crops from a manifest: CSV or JSON lines (``.gz`` too) with ``key``,
        ``start`` and ``end`` columns, or Lhotse-style cuts (``recording_id``
        or ``recording.id``, ``start``, ``duration``; the cut's ``id`` and
        its ``custom`` fields are carried). Keys are read as written (a CSV's
        ``001`` is not the key ``1``); a missing column or a cell that is
        not a number is a ``ValueError`` naming the file, column and row."""
        path = os.fspath(path)
        table = read_rows(path, text=["key", "recording_id"])
        names = set(table.column_names)
        cuts = "key" not in names and "duration" in names
        needed = ["start", "duration"] if cuts else ["key", "start", "end"]
        if cuts and not names & {"recording_id", "recording"}:
            needed.insert(0, "recording_id")
        missing = [name for name in needed if name not in names]
        if missing:
            raise ValueError(
                f"ListCrops.read: {path} has no {missing[0]!r} column: a manifest has key, "
                "start and end (Lhotse cuts: recording_id or recording.id, start and duration)"
            )
        rows = table.to_pylist()
        try:
            return cls(_cut(row, cut) for row, cut in enumerate(rows)) if cuts else cls(rows)
        except ValueError as exc:
            raise ValueError(f"ListCrops.read: {path}: {exc}") from None

    def crops(self, episodes: Episodes, rng: np.random.Generator) -> Crops:
        row_of = {key: row for row, key in enumerate(episodes.keys)}
        missing = next((i for i, key in enumerate(self.keys) if key not in row_of), None)
        if missing is not None:
            raise LayoutError(
                f"ListCrops: key {self.keys[missing]!r} (row {missing}) is not in "
                f"{episodes.dataset.url}"
            )
        episode = [row_of[key] for key in self.keys]
        fields = self.fields if any(self.fields) else None
        return Crops.of(episode, self.bounds[:, 0], self.bounds[:, 1], fields)


def _cut(row: int, cut: dict[str, Any]) -> dict[str, Any]:
    """A Lhotse-style cut (row ``row`` of a manifest) as a ``ListCrops`` item."""
    recording = cut.get("recording_id") or (cut.get("recording") or {}).get("id")
    start = _number(row, recording, "start", cut["start"])
    end = start + _number(row, recording, "duration", cut["duration"])
    fields = {"id": cut.get("id"), **(cut.get("custom") or {})}
    return {"key": recording, "start": start, "end": end, **fields}


def _listed(row: int, item: object) -> tuple[str, float, float, dict[str, Any]]:
    """``ListCrops`` item ``row`` as its key, start, end and other fields, or
    a ``ValueError`` naming the row and what is wrong with it (a missing
    ``key`` was a bare ``KeyError``, an empty time a ``TypeError``)."""
    if isinstance(item, Mapping):
        missing = [name for name in ("key", "start", "end") if name not in item]
        if missing:
            raise ValueError(f"ListCrops row {row} has no {missing[0]!r}: {dict(item)!r}")
        key, start, end = item["key"], item["start"], item["end"]
        extra = {k: v for k, v in item.items() if k not in ("key", "start", "end")}
    elif isinstance(item, tuple | list) and len(item) == 3:
        (key, start, end), extra = item, {}
    else:
        raise ValueError(
            f"ListCrops row {row} is {item!r}: give (key, start, end) or a dict with them"
        )
    if key is None:
        raise ValueError(f"ListCrops row {row}: 'key' is None")
    start, end = _number(row, key, "start", start), _number(row, key, "end", end)
    if not (0 <= start < end and math.isfinite(end)):
        raise ValueError(f"ListCrops row {row} ({key!r}): need 0 <= start < end, both finite")
    return str(key), start, end, extra


def _number(row: int, key: object, name: str, value: object) -> float:
    """A manifest's time ``value`` in seconds, or a ``ValueError`` naming its
    row, key and column (an empty cell is None, which ``float`` refuses in
    a ``TypeError`` naming nothing)."""
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(
            f"ListCrops row {row} ({key!r}): {name!r} is {value!r}, not a number"
        ) from None


class SegmentCrops(Sampler):
    """One crop per segment listed in a column, e.g. voice activity ``[[start, end], ...]``
    in seconds. ``column`` names a field in one of the dataset's column
    directories (``"vad"``, or ``"vad_dir/vad"`` to say which); its cells are
    lists of pairs, ``.npy`` bytes of an ``(n, 2)`` array, or lists of
    segments with ``start`` and ``end`` (Arrow structs), whose other fields
    (a transcript's ``text``, a ``speaker``) each crop carries in
    ``crop.fields``; any other cell is a ``LayoutError`` naming the column,
    row, shard and key. Segments longer than ``max_duration`` are cut into
    consecutive pieces of at most that, each with its segment's fields; a
    piece after the first that holds no sample as a crop is cut (under half
    a sample long, or starting at the episode's last sample) is not planned.

    A segment without usable times (NaN or infinite, ``start < 0``, ``end <=
    start``) gives no crop, and a warning says how many and names the first
    (once per dataset: the segments are the same every epoch; by the first
    rank's first worker: every process plans the same epoch). A segment
    past its episode's end is planned: its crop fails as a ``CropError``
    (counted in ``stats.skipped``, or raised with ``on_error="raise"``)."""

    def __init__(self, column: str, max_duration: float | None = None) -> None:
        if not isinstance(column, str) or not column:
            raise ValueError(f"SegmentCrops: column must be a column's name, not {column!r}")
        self.column = column
        self.max_duration = (
            None
            if max_duration is None
            else finite_number("SegmentCrops: max_duration", max_duration, positive=True)
        )
        self._warned: set[str] = set()  # datasets whose unusable segments were named

    def __repr__(self) -> str:
        return f"SegmentCrops({self.column!r}, max_duration={self.max_duration})"

    def crops(self, episodes: Episodes, rng: np.random.Generator) -> Crops:
        segments = self._segments(episodes)
        counts = [len(pairs) for pairs, _ in segments]
        pairs = np.concatenate([p for p, _ in segments]) if segments else np.zeros((0, 2))
        episode = np.repeat(np.arange(len(segments)), counts)
        keep = np.isfinite(pairs).all(axis=1) & (pairs[:, 0] >= 0) & (pairs[:, 1] > pairs[:, 0])
        if not keep.all():
            self._warn_unusable(episodes, episode[~keep], pairs[~keep], len(pairs))
        with_fields = any(f is not None for _, f in segments)
        fields = (
            [f for pairs, found in segments for f in (found or [{}] * len(pairs))]
            if with_fields
            else None
        )
        crops = Crops.of(episode, pairs[:, 0], pairs[:, 1], fields).take(np.flatnonzero(keep))
        return self._split(crops, episodes) if self.max_duration else crops

    def _warn_unusable(
        self, episodes: Episodes, episode: np.ndarray, pairs: np.ndarray, total: int
    ) -> None:
        """Say which segments give no crop: they are not crops that fail
        (nothing would count them later), they are never planned. Said once
        per dataset, by the process the episodes say warns (``Episodes.warn``)."""
        url = episodes.dataset.url
        if url in self._warned or not episodes.warn:
            return
        self._warned.add(url)
        shown = ", ".join(
            f"{episodes.keys[row]!r} [{start:g}, {end:g}]"
            for row, (start, end) in zip(episode[:3], pairs[:3], strict=True)
        )
        log.warning(
            "%r: %s: %d of %d segments have no usable times (NaN or infinite, start < 0, "
            "or end <= start) and give no crop: %s%s",
            self,
            url,
            len(episode),
            total,
            shown,
            ", ..." if len(episode) > 3 else "",
        )

    def _segments(self, episodes: Episodes) -> list[tuple[np.ndarray, list[dict] | None]]:
        dataset = episodes.dataset
        column_dir, field = find_column(dataset, self.column)
        out = []
        for name in dataset.shard_names:
            for row, cell in enumerate(dataset.shard(name, column_dir).column(field).to_pylist()):
                try:
                    out.append(_segments(cell))
                except ValueError as exc:
                    raise LayoutError(
                        f"{self!r} over {dataset.url}: {column_dir}/{field} row {row}: {exc}",
                        shard=name,
                        key=episodes.keys[len(out)],
                    ) from None
        return out

    def _split(self, crops: Crops, episodes: Episodes) -> Crops:
        """Each segment in pieces of at most ``max_duration``; a piece after a
        segment's first that holds no sample as a crop is cut (under half a
        sample long, or starting at its episode's last sample) is left out:
        it holds none of the segment's audio, and could only fail. A
        segment's first piece is planned as the segment itself would be."""
        step = float(self.max_duration)  # type: ignore[arg-type]
        segment, start, end = _windows(crops.start, crops.end, step, step, (self, episodes))
        whole = crops.take(segment)
        keep = (start == whole.start) | episodes.holds_samples(whole.episode, start, end)
        pieces = Crops(whole.episode, start, end, whole.fields)
        return pieces.take(np.flatnonzero(keep))


def _windows(
    first: np.ndarray,
    last: np.ndarray,
    hop: float,
    duration: float,
    drawing: tuple[Sampler, Episodes],
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Windows of ``duration`` every ``hop`` from ``first`` to ``last`` (each
    row), the last cut at ``last``: each window's row, start and end, for
    ``drawing`` (the sampler and its episodes: ``_counted``).

    Counted without float artefacts: a span that is a whole number of hops
    (12.3 s by 0.3 s, 12.3 / 0.3 = 41.000000000000014) gets no extra window
    starting at its end, which holds no sample (a crop that could only fail),
    and the last window ends at ``last`` itself; a window ``m`` hops long
    ends exactly where the window ``m`` later starts (``(k + m) * hop``, not
    ``k * hop + duration``, which rounds to another sample one time in
    twelve at 11025 Hz: a sample served twice or never between back-to-back
    crops)."""
    counts = _counted(np.ceil(np.maximum(last - first, 0.0) / hop), *drawing)
    row = np.repeat(np.arange(len(counts)), counts)
    step = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
    start = first[row] + step * hop
    hops = round(duration / hop)
    if hops and abs(hops * hop - duration) <= _SAME * duration:
        end = first[row] + (step + hops) * hop
    else:
        end = start + duration
    edge = last[row] - _SAME * np.abs(last[row])
    inside = start < edge
    return row[inside], start[inside], np.where(end < edge, end, last[row])[inside]


#: The most crops a sampler plans from one dataset in one draw. A plan
#: takes about 160 bytes a crop in every process that plans the epoch
#: (each rank and DataLoader worker): 10^8 crops are 16 GB each, past what
#: any run can hold. A hop of 1e-7 s asked for 24 GB, ``per_episode=10**9``
#: for 82 GiB, and ended in a ``MemoryError`` or the OOM killer.
MAX_CROPS = 10**8


def _counted(counts: np.ndarray, sampler: Sampler, episodes: Episodes) -> np.ndarray:
    """Crops per episode (floats, from the sampler's arithmetic) as integers,
    or a ``ValueError`` naming the sampler and dataset when they add up to
    more than ``MAX_CROPS``: refused before anything that size is allocated."""
    total = float(counts.sum())
    if not total <= MAX_CROPS:
        raise ValueError(
            f"{sampler!r} over {episodes.dataset.url}: {total:.3g} crops in one draw, more "
            f"than MAX_CROPS ({MAX_CROPS:.0e}, ~160 bytes each in every process planning "
            "it); plan fewer crops per episode "
            "(a longer duration or hop, a smaller per_episode or per_hour)"
        )
    return counts.astype(np.int64)


#: Relative difference under which two times in seconds are one: float
#: rounding (about 1e-16), far below a sample (a 40-hour episode's end
#: within 0.15 microseconds).
_SAME = 1e-12


def _segments(cell: object) -> tuple[np.ndarray, list[dict] | None]:
    """A cell of segments as an ``(n, 2)`` float array and each segment's other
    fields (None: pairs, which have none), or a ``ValueError`` saying what
    the cell holds instead. A cell is a list of ``[start, end]`` pairs,
    ``.npy`` bytes of an ``(n, 2)`` array, or a list of dicts with ``start``
    and ``end``: anything reshaped into pairs, ``[start, end, label]``
    triples were read as other pairs (crops no segment has), and an odd
    cell ended the plan in numpy's words."""
    if cell is None:
        return np.zeros((0, 2)), None
    if isinstance(cell, bytes):
        return _npy_pairs(cell), None
    if not isinstance(cell, list):
        raise ValueError(f"{cell!r:.80} is not a list of segments")
    if cell and all(isinstance(segment, dict) for segment in cell):
        for number, segment in enumerate(cell):
            if "start" not in segment or "end" not in segment:
                raise ValueError(f"segment {number} has no start and end: {segment!r:.80}")
        pairs = [[segment["start"], segment["end"]] for segment in cell]
        fields = [{k: v for k, v in s.items() if k not in ("start", "end")} for s in cell]
        return _times(pairs, cell), fields
    for number, pair in enumerate(cell):
        if not isinstance(pair, list | tuple) or len(pair) != 2:
            raise ValueError(f"segment {number} is {pair!r:.80}, not a [start, end] pair")
    return _times(cell, cell), None


def _npy_pairs(data: bytes) -> np.ndarray:
    """``.npy`` bytes of an ``(n, 2)`` array of numbers, as float pairs."""
    try:
        array = np.load(io.BytesIO(data), allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise ValueError(f"its bytes are not a .npy array: {exc}") from None
    if array.ndim != 2 or array.shape[1] != 2 or array.dtype.kind not in "iuf":
        raise ValueError(f"its .npy array is {array.dtype} {array.shape}, not (n, 2) numbers")
    return array.astype(np.float64)


def _times(pairs: list, cell: list) -> np.ndarray:
    """``pairs`` as an ``(n, 2)`` float array (a null time is NaN: a segment
    without usable times, said by ``SegmentCrops``)."""
    try:
        return np.array(pairs, dtype=np.float64).reshape(-1, 2)
    except (TypeError, ValueError):
        raise ValueError(f"its times are not numbers: {cell!r:.80}") from None
