"""One exception hierarchy for everything streamer raises on purpose.

``StreamerError`` is the root. ``DataError`` covers bad *data* (a dataset, a
shard, an episode) and always names where the problem is; ``StorageError``
covers the stores the bytes come from. Catch ``DataError`` to skip a bad
episode and keep going; let ``StorageError`` surface when a store is down.

Every class here pickles with its fields, so an error raised in a decode
worker process reaches the parent as itself.
"""

from __future__ import annotations

__all__ = [
    "CompressedShardWarning",
    "CropError",
    "DataError",
    "IncompleteDatasetError",
    "LayoutError",
    "PackError",
    "ReadOnlyURLError",
    "ShardError",
    "StorageError",
    "StreamerError",
    "TooManyFailures",
    "UnsupportedURLError",
    "WorkerDied",
    "WorkerError",
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

    def __reduce__(self) -> tuple[object, ...]:
        # BaseException pickles only ``args`` (the formatted message): rebuild
        # through the constructor, then restore any other attribute.
        fields = (type(self), self.reason, self.shard, self.key, self.offset)
        return _rebuild_data_error, fields, dict(self.__dict__)


def _rebuild_data_error(
    kind: type[DataError], message: str, shard: str | None, key: str | None, offset: int | None
) -> DataError:
    return kind(message, shard=shard, key=key, offset=offset)


class CropError(DataError):
    """A crop cannot be produced: its range decodes to nothing, or the decoder fails."""


class LayoutError(DataError):
    """The dataset's directory layout is not what a dataset must look like."""


class IncompleteDatasetError(LayoutError):
    """Shards its pack planned are missing from a dataset (a pack killed
    midway, a part of a job that never ran): serving the others would end
    each epoch early without a word. ``allow_incomplete=True`` serves them."""


class ShardError(DataError):
    """A shard file cannot be read, or disagrees with its sibling shards."""


class StorageError(StreamerError):
    """A store failed to deliver bytes (after any retries)."""


class UnsupportedURLError(StorageError):
    """No store can serve this URL: an unknown scheme, one whose package is
    not installed (the message says which), or a file system that needs
    options its URLs cannot carry. The command line's exit code 2."""


class ReadOnlyURLError(UnsupportedURLError):
    """A command that writes was given a URL whose store only reads (HTTP,
    an archive): refused before any work, with what to use instead. Like
    any URL no store can serve for the job, the command line's exit code 2."""


class TooManyFailures(StreamerError):
    """So many crops in a row failed (of one source) that the cause is not a
    few bad files but the data or the setup as a whole (a codec the FFmpeg
    build lacks, a dataset every episode of which is damaged, a bug):
    ``on_error="skip"`` would have ended the pass with nothing, or little,
    and only warnings said why. ``Streamer(max_failures_in_a_row=...)``."""


class WorkerDied(StreamerError):
    """A decode worker process died (twice) while decoding a crop."""


class WorkerError(StreamerError):
    """A crop failed in another process with an exception that cannot be sent
    back as itself (it does not pickle). ``kind`` is that exception's class
    name, ``message`` its text."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"{kind}: {message}" if message else kind)
        self.kind = kind
        self.message = message

    def __reduce__(self) -> tuple[object, ...]:
        return type(self), (self.kind, self.message)


class PackError(StreamerError):
    """``streamer pack`` could not build a dataset (``--strict`` failures too)."""


class CompressedShardWarning(UserWarning):
    """An audio column is IPC-compressed: it is decompressed whole, so reads
    of a crop cost the whole record batch instead of the crop's bytes."""
