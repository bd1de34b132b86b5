"""streamer: sample-exact audio crops streamed from sharded Arrow datasets."""

from __future__ import annotations

import os
from typing import Any

from .decode.crop import Crop, CropRequest
from .errors import (
    CompressedShardWarning,
    CropError,
    DataError,
    LayoutError,
    PackError,
    ShardError,
    StorageError,
    StreamerError,
)
from .pipeline import (
    Mix,
    RandomCrops,
    Sampler,
    SegmentCrops,
    SequentialCrops,
    Streamer,
    StreamerStats,
)
from .shard import BlobHandle, Dataset
from .shard.pack import pack
from .storage import open_url

__all__ = [
    "BlobHandle",
    "CompressedShardWarning",
    "Crop",
    "CropError",
    "CropRequest",
    "DataError",
    "Dataset",
    "LayoutError",
    "Mix",
    "PackError",
    "RandomCrops",
    "Sampler",
    "SegmentCrops",
    "SequentialCrops",
    "ShardError",
    "StorageError",
    "Streamer",
    "StreamerError",
    "StreamerStats",
    "open_dataset",
    "pack",
]

__version__ = "0.1.0"


def open_dataset(url: str | os.PathLike[str], **storage_options: Any) -> Dataset:
    """Open a dataset by path or URL: ``/data/set``, ``file://``, ``s3://bucket/prefix``,
    ``b2://``, ``http(s)://`` (a server with directory listings) or any fsspec protocol.

    ``storage_options`` go to the store (see docs/storage.md): ``endpoint_url``,
    credentials, cache and retry settings. Datasets opened with the same
    scheme and options share one store: one connection pool, cache and
    ``dataset.store.stats``. Local paths take no options.
    """
    store, root = open_url(url, **storage_options)
    return Dataset(root, store=store)
