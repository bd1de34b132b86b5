"""streamer: sample-exact audio crops streamed from sharded Arrow datasets."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .dataset import Dataset, open_dataset
    from .decode.crop import Crop, CropRequest
    from .errors import (
        CompressedShardWarning,
        CropError,
        DataError,
        IncompleteDatasetError,
        LayoutError,
        PackError,
        ShardError,
        StorageError,
        StreamerError,
        TooManyFailures,
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
    "IncompleteDatasetError",
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
    "TooManyFailures",
    "WorkerDied",
    "WorkerError",
    "open_dataset",
    "pack",
]

__version__ = "0.1.0"

#: Where each public name lives: imported on first use (PEP 562), so that
#: ``import streamer.errors`` (or the ``streamer`` command's first line) does
#: not import PyAV, pyarrow and the S3 client, half a second before anything
#: can run (a Ctrl-C then printed the interpreter's traceback).
_HOMES = {
    "Dataset": ".dataset",
    "open_dataset": ".dataset",
    "Crop": ".decode.crop",
    "CropRequest": ".decode.crop",
    "ListCrops": ".pipeline",
    "Mix": ".pipeline",
    "RandomCrops": ".pipeline",
    "Sampler": ".pipeline",
    "SegmentCrops": ".pipeline",
    "SequentialCrops": ".pipeline",
    "Streamer": ".pipeline",
    "StreamerStats": ".pipeline",
    "BlobHandle": ".shard",
    "CacheConfig": ".storage",
    "RetryPolicy": ".storage",
    "pack": ".write.pack",
    **dict.fromkeys(
        [
            "CompressedShardWarning",
            "CropError",
            "DataError",
            "IncompleteDatasetError",
            "LayoutError",
            "PackError",
            "ShardError",
            "StorageError",
            "StreamerError",
            "TooManyFailures",
            "WorkerDied",
            "WorkerError",
        ],
        ".errors",
    ),
}


def __getattr__(name: str) -> object:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOMES})
