"""Datasets: column directories of shards with the same names and rows, read by key.

A ``Dataset`` finds its column directories and shards in a store, maps keys
to (shard, row), and reads an episode's blob, ``audio_info`` row and seek
index; ``read_crop`` decodes one crop through ``streamer.decode``. The
manifest (``manifest.py``) lets a network dataset open without listing it.
"""

from .dataset import (
    AUDIO_COLUMN,
    INFO_DIR,
    ROW_UNREADABLE,
    Dataset,
    open_dataset,
    write_manifest,
)

__all__ = [
    "AUDIO_COLUMN",
    "INFO_DIR",
    "ROW_UNREADABLE",
    "Dataset",
    "open_dataset",
    "write_manifest",
]
