"""Byte range readers: the only way the rest of streamer reaches stored bytes."""

from .base import RangeReader
from .local import LocalFileReader, MemoryReader

__all__ = ["LocalFileReader", "MemoryReader", "RangeReader"]
