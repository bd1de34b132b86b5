"""Shards and datasets: lazy access to IPC files and the blobs inside them."""

from .blob import BlobHandle
from .dataset import Dataset
from .ipc import Shard
from .pack import PackReport, pack

__all__ = ["BlobHandle", "Dataset", "PackReport", "Shard", "pack"]
