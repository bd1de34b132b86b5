"""streamer: sample-exact audio crops streamed from sharded Arrow datasets."""

from __future__ import annotations

from .dataset import Dataset, open_dataset
from .decode.crop import Crop
from .errors import CropError, DataError, LayoutError, ShardError, StorageError, StreamerError
from .pipeline import Mix, RandomCrops, SegmentCrops, SequentialCrops, Streamer, StreamerStats
from .shard import BlobHandle
from .write.pack import pack

__all__ = [
    "BlobHandle",
    "Crop",
    "CropError",
    "DataError",
    "Dataset",
    "LayoutError",
    "Mix",
    "RandomCrops",
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
