"""The crop pipeline: samplers, epoch order and sharding, the Streamer, warmup.

Data flows one way: a sampler plans an epoch's crops, the order groups them
by shard and shuffles them within a window, each consumer (rank x DataLoader
worker) takes its slice, and the Streamer plans, prefetches and decodes
them in worker processes into a bounded queue.
"""

from .mix import Mix
from .samplers import ListCrops, RandomCrops, Sampler, SegmentCrops, SequentialCrops
from .sharding import Partition
from .stats import StreamerStats
from .streamer import Streamer

__all__ = [
    "ListCrops",
    "Mix",
    "Partition",
    "RandomCrops",
    "Sampler",
    "SegmentCrops",
    "SequentialCrops",
    "Streamer",
    "StreamerStats",
]
