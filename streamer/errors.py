"""One exception hierarchy for everything streamer raises on purpose.

``StreamerError`` is the root. ``DataError`` covers bad *data* (a dataset, a
shard, an episode) and always names where the problem is; ``StorageError``
covers the stores the bytes come from. Catch ``DataError`` to skip a bad
episode and keep going; let ``StorageError`` surface when a store is down.
"""

from __future__ import annotations

__all__ = [
    "CompressedShardWarning",
    "CropError",
    "DataError",
    "LayoutError",
    "PackError",
    "ShardError",
    "StorageError",
    "StreamerError",
]


class StreamerError(Exception):
    """Base class of every error streamer raises deliberately."""


class DataError(StreamerError):
    """Something is wrong with the data itself: a shard, a key, an episode.

    ``shard``, ``key`` and ``offset`` say where, when known; they are also in
    the message, so a log line alone is enough to find the bad bytes.
    """

    def __init__(
        self,
        message: str,
        *,
        shard: str | None = None,
        key: str | None = None,
        offset: int | None = None,
    ) -> None:
        self.shard = shard
        self.key = key
        self.offset = offset
        where = [
            f"{name}={value!r}"
            for name, value in (("shard", shard), ("key", key), ("offset", offset))
            if value is not None
        ]
        super().__init__(f"{message} ({', '.join(where)})" if where else message)
        self.reason = message


class CropError(DataError):
    """A crop cannot be produced: its range decodes to nothing, or the decoder fails."""


class LayoutError(DataError):
    """The dataset's directory layout is not what a dataset must look like."""


class ShardError(DataError):
    """A shard file cannot be read, or disagrees with its sibling shards."""


class StorageError(StreamerError):
    """A store failed to deliver bytes (after any retries)."""


class PackError(StreamerError):
    """``streamer pack`` could not build a dataset (``--strict`` failures too)."""


class CompressedShardWarning(UserWarning):
    """An audio column is IPC-compressed: it is decompressed whole, so reads
    of a crop cost the whole record batch instead of the crop's bytes."""
