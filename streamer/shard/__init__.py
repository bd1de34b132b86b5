"""Shards and datasets: lazy access to IPC files and the blobs inside them."""

from .blob import BlobHandle
from .dataset import Dataset
from .ipc import Shard

__all__ = ["BlobHandle", "Dataset", "Shard"]
