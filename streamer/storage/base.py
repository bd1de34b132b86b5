"""The one interface every store implements: a random-access byte range reader.

Everything above the storage layer (shards, indexes, decoders) reads bytes only
through a ``RangeReader``, so local files, object stores and HTTP servers are
interchangeable. Nothing in this package knows about audio.
"""

from __future__ import annotations

import abc

__all__ = ["RangeReader"]


class RangeReader(abc.ABC):
    """Random access to the bytes of one object (a file, an S3 key, a URL).

    ``read`` returns exactly ``length`` bytes or raises ``StorageError``; it
    never returns a short buffer. Implementations may return a zero-copy view
    (local files return a slice of the memory map), so treat the result as
    read-only.

    The ``*_sync`` forms are for callers that cannot await: file-like
    consumers such as FFmpeg and the index parsers, which run in worker
    processes or threads.
    """

    #: Where the bytes live, safe to log: never carries credentials.
    url: str

    @abc.abstractmethod
    async def size(self) -> int:
        """Total size of the object in bytes."""

    @abc.abstractmethod
    async def read(self, offset: int, length: int) -> memoryview:
        """Exactly ``length`` bytes starting at ``offset``."""

    @abc.abstractmethod
    def size_sync(self) -> int:
        """Blocking form of ``size``."""

    @abc.abstractmethod
    def read_sync(self, offset: int, length: int) -> memoryview:
        """Blocking form of ``read``."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"
