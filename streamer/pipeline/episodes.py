"""The episodes a sampler draws crops from: keys, shards and durations, as arrays."""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ..dataset.dataset import INFO_DIR, Dataset
from ..errors import DataError
from ..formats.ffmpeg import full_decode_length

__all__ = ["Episodes"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Episodes:
    """Every episode of one dataset, in shard order (row ``i`` is episode ``i``).

    ``shard`` holds indices into ``dataset.shard_names``; ``duration`` is in
    seconds (NaN when unknown: samplers skip those episodes).
    """

    dataset: Dataset
    keys: list[str]
    shard: np.ndarray
    row: np.ndarray
    duration: np.ndarray

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
    def of(cls, dataset: Dataset) -> Episodes:
        """Read from ``audio_info/`` (what ``streamer pack`` writes), else from the seek index."""
        keys: list[str] = []
        shards, rows, durations = [], [], []
        for number, name in enumerate(dataset.shard_names):
            shard_keys = dataset.shard(name).keys.to_pylist()
            keys += shard_keys
            shards.append(np.full(len(shard_keys), number, dtype=np.int32))
            rows.append(np.arange(len(shard_keys), dtype=np.int64))
            durations.append(_durations(dataset, name, shard_keys))
        episodes = cls(
            dataset=dataset,
            keys=keys,
            shard=np.concatenate(shards) if shards else np.zeros(0, np.int32),
            row=np.concatenate(rows) if rows else np.zeros(0, np.int64),
            duration=np.concatenate(durations) if durations else np.zeros(0),
        )
        episodes._warn_unknown()
        return episodes

    def _warn_unknown(self) -> None:
        """Say which episodes no sampler will draw from: they are not crops
        that fail (nothing counts them later), they are never planned."""
        unknown = np.flatnonzero(~np.isfinite(self.duration))
        if len(unknown):
            shown = ", ".join(repr(self.keys[i]) for i in unknown[:3])
            log.warning(
                "%s: %d of %d episodes have no known duration (no audio_info/ duration "
                "and no usable seek index): samplers draw no crop from them (%s%s); "
                "`streamer index` or `streamer pack` records it",
                self.dataset.url,
                len(unknown),
                len(self),
                shown,
                ", ..." if len(unknown) > 3 else "",
            )


def _durations(dataset: Dataset, name: str, keys: list[str]) -> np.ndarray:
    if INFO_DIR in dataset.column_dirs:
        info = dataset.shard(name, INFO_DIR)
        if "duration" in info.schema.names:
            column = info.column("duration").to_numpy()
            return np.asarray(column, dtype=np.float64)
    out = np.full(len(keys), np.nan)
    for j, key in enumerate(keys):
        try:
            index = dataset.episode(key).index  # checked: an implausible one says "no index"
        except DataError:  # no usable seek_index/ row: duration unknown
            continue
        if index is not None and index.ok and index.num_samples >= 0:
            out[j] = full_decode_length(index) / index.timescale
    return out
