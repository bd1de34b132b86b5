"""streamer: sample-exact audio crops streamed from sharded Arrow datasets."""

from __future__ import annotations

import os

from .errors import DataError, LayoutError, ShardError, StorageError, StreamerError
from .shard import BlobHandle, Dataset
from .shard.pack import pack

__all__ = [
    "BlobHandle",
    "DataError",
    "Dataset",
    "LayoutError",
    "ShardError",
    "StorageError",
    "StreamerError",
    "open_dataset",
    "pack",
]

__version__ = "0.1.0"


def open_dataset(url: str | os.PathLike[str], **storage_options: object) -> Dataset:
    """Open a dataset by URL or path. Only local paths (and ``file://``) so far.

    ``storage_options`` are passed to the store (endpoint URL, credentials);
    local datasets take none.
    """
    url = os.fspath(url)
    if url.startswith("file://"):
        url = url[len("file://") :]
    elif "://" in url:
        raise StorageError(
            f"unsupported URL scheme in {url.split('://')[0]}://… (local paths only)"
        )
    if storage_options:
        raise TypeError(f"local datasets take no storage options: {sorted(storage_options)}")
    return Dataset(url)
