"""streamer: sample-exact audio crops streamed from sharded Arrow datasets."""

from __future__ import annotations

from .dataset import Dataset, open_dataset
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
    WorkerDied,
    WorkerError,
)
from .pipeline import (
    ListCrops,
    Mix,
    RandomCrops,
    Sampler,
    SegmentCrops,
    SequentialCrops,
    Streamer,
    StreamerStats,
)
from .shard import BlobHandle
from .storage import CacheConfig, RetryPolicy
from .write.pack import pack

__all__ = [
    "BlobHandle",
    "CacheConfig",
    "CompressedShardWarning",
    "Crop",
    "CropError",
    "CropRequest",
    "DataError",
    "Dataset",
    "LayoutError",
    "ListCrops",
    "Mix",
    "PackError",
    "RandomCrops",
    "RetryPolicy",
    "Sampler",
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
