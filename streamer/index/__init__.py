"""Seek indexes: where every second of an episode starts, without decoding it.

``SeekIndex`` is one episode's index; ``table`` is its Arrow form in the
``seek_index/`` column directory (``IndexReader`` reads rows back as numpy
views). The formats (``streamer.formats``) build them; ``streamer.write``
writes them.
"""

from .table import INDEX_DIR, NO_INDEX, OK, IndexReader, SeekIndex

__all__ = ["INDEX_DIR", "NO_INDEX", "OK", "IndexReader", "SeekIndex"]
