"""Byte range readers and the stores they come from: the only way the rest of
streamer reaches stored bytes.

``open_url(url, **options)`` picks the store by URL scheme (``registry.py``)
and returns it with the path inside it; ``store.reader(path)`` is a
``RangeReader``; ``store.put_sync(path, source)`` stores one whole object
atomically (how ``streamer index`` writes ``seek_index/``). Network stores
share ``remote.py``: block cache (``cache.py``, ``disk.py``), retries
(``retry.py``), the outage gate and hedging (``health.py``), ``stats``.
Their I/O runs on one background event loop per process (``loop.py``:
``run_sync``, ``run_async``, ``background_loop``), which the pipeline runs
on too.
"""

from ._urls import redact, safe_url
from .base import Entry, NotFound, RangeReader, Source, Stat, Store
from .cache import CacheConfig
from .local import LocalFileReader, LocalStore, MemoryReader
from .registry import open_url
from .remote import MissingBucket
from .retry import RetryPolicy, StoreUnavailable
from .stats import StoreStats

__all__ = [
    "CacheConfig",
    "Entry",
    "LocalFileReader",
    "LocalStore",
    "MemoryReader",
    "MissingBucket",
    "NotFound",
    "RangeReader",
    "RetryPolicy",
    "Source",
    "Stat",
    "Store",
    "StoreStats",
    "StoreUnavailable",
    "open_url",
    "redact",
    "safe_url",
]
