"""The episodes a sampler draws crops from: keys, shards and durations, as arrays."""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pyarrow as pa

from ..dataset.dataset import INFO_DIR, Dataset
from ..decode.resample import end_times, holds_samples
from ..errors import CropError, ShardError
from ..formats.ffmpeg import full_decode_length
from ..index.checks import MAX_DURATION, MAX_SAMPLE_RATE
from ..index.table import SeekIndex
from ..shard import Shard

__all__ = ["Episodes"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Episodes:
    """Every episode of one dataset, in shard order (row ``i`` is episode ``i``).

    ``shard`` holds indices into ``dataset.shard_names``; ``duration`` is in
    seconds (NaN when unknown: samplers skip those episodes), ``sample_rate``
    each episode's own (NaN when unknown; None: all unknown) and
    ``target_rate`` the rate its crops are served at (a Streamer's
    ``sample_rate``; None: each episode's own). ``warn``: whether this
    process says what the episodes lack (unknown durations here, a
    sampler's unusable segments): every rank and DataLoader worker reads
    the same episodes, so one of them (``Streamer``: the first) says it
    for all.
    """

    dataset: Dataset
    keys: list[str]
    shard: np.ndarray
    row: np.ndarray
    duration: np.ndarray
    sample_rate: np.ndarray | None = None
    target_rate: int | None = None
    warn: bool = True

    def __len__(self) -> int:
        return len(self.keys)

    @cached_property
    def keys_digest(self) -> bytes:
        """A digest of the keys in row order (the same in every process): what
        an epoch's digest says of which episodes its rows are, since two
        datasets of as many episodes of the same durations plan the same
        rows and times. Computed once per ``Episodes``."""
        digest = hashlib.blake2b(digest_size=16)
        for key in self.keys:
            encoded = key.encode()
            digest.update(len(encoded).to_bytes(8, "little") + encoded)
        return digest.digest()

    @classmethod
    def of(cls, dataset: Dataset, target_rate: int | None = None, *, warn: bool = True) -> Episodes:
        """Read from ``audio_info/`` (what ``streamer pack`` writes), else from
        the seek index; ``target_rate``: the rate crops are served at;
        ``warn``: name the episodes of unknown duration, by reason.

        ``LayoutError`` naming the key and both places when a key is in the
        dataset twice (``Dataset.check_keys``): a crop of it could be of
        either episode, and every lookup of any key fails.
        """
        dataset.check_keys()
        keys: list[str] = []
        shards, rows, durations, rates = [], [], [], []
        unusable: list[str] = []
        unknown: dict[str, list[str]] = {}
        for number, name in enumerate(dataset.shard_names):
            shard_keys = dataset.shard(name).keys.to_pylist()
            keys += shard_keys
            shards.append(np.full(len(shard_keys), number, dtype=np.int32))
            rows.append(np.arange(len(shard_keys), dtype=np.int64))
            duration, rate = _timing(dataset, name, shard_keys, unusable, unknown)
            durations.append(duration)
            rates.append(rate)
        episodes = cls(
            dataset=dataset,
            keys=keys,
            shard=np.concatenate(shards) if shards else np.zeros(0, np.int32),
            row=np.concatenate(rows) if rows else np.zeros(0, np.int64),
            duration=np.concatenate(durations) if durations else np.zeros(0),
            sample_rate=np.concatenate(rates) if rates else np.zeros(0),
            target_rate=target_rate,
            warn=warn,
        )
        if warn:
            _warn_unusable(dataset, unusable)
            episodes._warn_unknown(unknown)
        return episodes

    @cached_property
    def end_time(self) -> np.ndarray:
        """Where a crop that runs to each episode's end ends, in seconds: its
        duration, or, served resampled, the time that reaches the resampled
        episode's last sample (``decode.resample.end_times``)."""
        if self.sample_rate is None:
            return self.duration
        return end_times(self.duration, self.sample_rate, self.target_rate)

    def holds_samples(self, episode: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
        """Whether each crop of these episodes holds a sample as the decode
        cuts it (``decode.resample.holds_samples``): a window planned in
        seconds can start under half a sample before an episode's end (1.1 s
        of 12128 samples at 11025 Hz is 12127.5), or hold one native sample
        that rounds to none at the target rate, and then only fail."""
        rate = np.full(len(self), np.nan) if self.sample_rate is None else self.sample_rate
        return holds_samples(start, end, self.duration[episode], rate[episode], self.target_rate)

    def _warn_unknown(self, unknown: dict[str, list[str]]) -> None:
        """Say which episodes no sampler will draw from, and why (``unknown``:
        reason -> keys): they are not crops that fail (nothing counts them
        later), they are never planned."""
        count = int(np.count_nonzero(~np.isfinite(self.duration)))
        if count:
            reasons = "; ".join(
                f"{len(keys)} {reason} ({_first_few([repr(key) for key in keys[:4]])})"
                for reason, keys in sorted(unknown.items(), key=lambda item: -len(item[1]))
            )
            log.warning(
                "%s: %d of %d episodes have no known duration: samplers draw no crop from them: %s",
                self.dataset.url,
                count,
                len(self),
                reasons,
            )


def _timing(
    dataset: Dataset,
    name: str,
    keys: list[str],
    unusable: list[str],
    unknown: dict[str, list[str]],
) -> tuple[np.ndarray, np.ndarray]:
    """Each episode's duration in seconds and sample rate (NaN: unknown):
    ``audio_info``'s, else (no such column, a null cell, or a value no
    episode has or text that is no number, noted in ``unusable``) its seek
    index's. The keys of those left unknown go to ``unknown`` under the
    reason: no seek index, its "no index" reason, or the error that reading
    the episode raised (a null ``audio`` cell, a blob of another length than
    ``audio_info`` records). A layout error or a store that fails raises."""
    info = dataset.shard(name, INFO_DIR) if INFO_DIR in dataset.column_dirs else None
    durations, _ = _numbers(info, "duration", keys, unusable)
    rates, text_rate = _numbers(info, "sample_rate", keys, unusable)
    # A duration past MAX_DURATION is a corrupt cell (``inf``, 1e12: a
    # sampler cutting it into crops ran out of memory).
    bad_duration = ~((durations > 0) & (durations <= MAX_DURATION))  # NaN too
    bad_rate = ~np.isnan(rates) & ~((rates >= 1) & (rates <= MAX_SAMPLE_RATE))  # NaN: unknown
    for j in np.flatnonzero((bad_duration & ~np.isnan(durations)) | bad_rate):
        field = "sample_rate" if bad_rate[j] else "duration"
        value = rates[j] if bad_rate[j] else durations[j]
        unusable.append(f"{keys[j]!r}: {field}={value:g}")
    for j in np.flatnonzero(bad_duration | bad_rate | text_rate):
        try:
            # By row, not key: checked, an implausible index says "no index".
            index = dataset.episode_at(name, int(j)).index
        except (ShardError, CropError) as exc:  # this episode cannot be read
            index, reason = None, f"cannot be read: {exc.reason}"
        else:
            reason = _no_duration(index)
        if reason is None:
            durations[j] = full_decode_length(index) / index.timescale
            rates[j] = index.sample_rate
        else:
            durations[j] = rates[j] = np.nan
            unknown.setdefault(reason, []).append(keys[j])
    return durations, rates


def _no_duration(index: SeekIndex | None) -> str | None:
    """Why an episode without an ``audio_info`` duration has none from its
    seek index either (None: it has one)."""
    if index is None:
        return (
            "have no audio_info/ duration and no seek index "
            "(`streamer index` or `streamer pack` records it)"
        )
    if not index.ok:
        return f"have no audio_info/ duration, and no index: {index.reason}"
    if index.num_samples < 0:
        return "have no audio_info/ duration, and their seek index does not know their length"
    return None


def _numbers(
    info: Shard | None, field: str, keys: list[str], unusable: list[str]
) -> tuple[np.ndarray, np.ndarray]:
    """``audio_info``'s ``field`` as float64 (NaN: no such column, or a null
    cell), and where a cell is no number (text such as another tool's
    ``"n/a"``): NaN too, noted in ``unusable`` to be read from the seek
    index. Converted whole, one such cell ended the sampling of the whole
    dataset with a bare ``could not convert string to float``."""
    values, text = np.full(len(keys), np.nan), np.zeros(len(keys), dtype=bool)
    if info is None or field not in info.schema.names:
        return values, text
    column = info.column(field)
    if pa.types.is_integer(column.type) or pa.types.is_floating(column.type):
        return np.array(column.to_numpy(), dtype=np.float64), text
    for j, cell in enumerate(column.to_pylist()):
        try:
            values[j] = np.nan if cell is None else float(cell)
        except (TypeError, ValueError):
            text[j] = True
            unusable.append(f"{keys[j]!r}: {field}={cell!r}")
    return values, text


def _warn_unusable(dataset: Dataset, unusable: list[str]) -> None:
    """Name the episodes whose ``audio_info`` holds a duration or rate no
    episode has: read from their seek indexes (or unknown: not drawn)."""
    if unusable:
        log.warning(
            "%s: %d episodes have an audio_info duration or sample rate no audio has (%s): "
            "taken from their seek indexes",
            dataset.url,
            len(unusable),
            _first_few(unusable),
        )


def _first_few(names: list[str]) -> str:
    """The first three of ``names``, and ``...`` when there are more."""
    return ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
