"""streamer: sample-exact audio crops streamed from sharded Arrow datasets."""

from __future__ import annotations

import os
from typing import Any

from .decode.crop import Crop
from .errors import (
    CropError,
    DataError,
    LayoutError,
    ShardError,
    StorageError,
    StreamerError,
    WorkerDied,
    WorkerError,
)
from .pipeline import Mix, RandomCrops, SegmentCrops, SequentialCrops, Streamer, StreamerStats
from .shard import BlobHandle, Dataset
from .shard.pack import pack
from .storage import CacheConfig, RetryPolicy, open_url

__all__ = [
    "BlobHandle",
    "CacheConfig",
    "Crop",
    "CropError",
    "DataError",
    "Dataset",
    "LayoutError",
    "Mix",
    "RandomCrops",
    "RetryPolicy",
    "SegmentCrops",
    "SequentialCrops",
    "ShardError",
    "StorageError",
    "Streamer",
    "StreamerError",
    "StreamerStats",
    "WorkerDied",
    "WorkerError",
    "open_dataset",
    "pack",
]

__version__ = "0.1.0"


def open_dataset(url: str | os.PathLike[str], **storage_options: Any) -> Dataset:
    """Open a dataset by path or URL: ``/data/set``, ``file://``, ``s3://bucket/prefix``,
    ``b2://``, ``http(s)://`` (a server with directory listings) or any fsspec protocol.

    ``storage_options`` go to the store (see docs/storage.md): ``endpoint_url``,
    credentials, cache and retry settings (``cache=CacheConfig(...)``,
    ``retry=RetryPolicy(...)``, or their fields as options of their own:
    ``block_size=``, ``attempts=``, ...). Datasets opened with the same
    scheme and options share one store: one connection pool, cache and
    ``dataset.store.stats``. Local paths take no options.
    """
    store, root = open_url(url, **storage_options)
    return Dataset(root, store=store)
