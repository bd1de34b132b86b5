"""Seek indexes: where every second of an episode starts, without decoding it.

One module per container (``mp3``, ``ogg``, ``flac``, ``mp4``, ``wav``), each
with ``matches(head)`` and ``parse(stream, density=...)``; ``extract`` picks
one by the file's magic bytes. ``SeekIndex`` is the result and ``table``
its Arrow form in the ``seek_index/`` column directory (``build``).
"""

from .extract import DEFAULT_DENSITY, extract, sniff
from .table import INDEX_DIR, NO_INDEX, OK, IndexReader, SeekIndex

__all__ = [
    "DEFAULT_DENSITY",
    "INDEX_DIR",
    "NO_INDEX",
    "OK",
    "IndexReader",
    "SeekIndex",
    "extract",
    "sniff",
]
