"""Arrow IPC shards over a range reader: footers, record batches, blob handles.

A ``Shard`` opens by reading only its footer; a binary cell is a
``BlobHandle`` that reads sub-ranges of the cell, never the whole of it
unless asked. Local and remote shards are the same class over different
readers.
"""

from .blob import BlobHandle
from .ipc import Shard

__all__ = ["BlobHandle", "Shard"]
