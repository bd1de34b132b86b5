"""Pick the container parser by the bytes, never by a file name, and run it.

``extract`` always returns a ``SeekIndex``: a file no parser can index comes
back as "no index" with the reason, so one bad episode never stops a build
and the episode stays readable through a full decode.
"""

from __future__ import annotations

import logging
import struct
from typing import BinaryIO

from . import flac, mp3, mp4, ogg, wav
from ._common import NoIndex, Reader
from .table import SeekIndex

__all__ = ["DEFAULT_DENSITY", "extract", "sniff"]

#: Seek points per second of audio.
DEFAULT_DENSITY = 1.0

# mp3 goes last: its test (a frame header or an ID3 tag) is the weakest.
_PARSERS = {"wav": wav, "ogg": ogg, "flac": flac, "mp4": mp4, "mp3": mp3}
_SNIFF_BYTES = 16

log = logging.getLogger(__name__)


def sniff(head: bytes) -> str | None:
    """The container the first bytes of a file announce, or None."""
    return next((name for name, parser in _PARSERS.items() if parser.matches(head)), None)


def extract(stream: BinaryIO, *, density: float = DEFAULT_DENSITY) -> SeekIndex:
    """Index one episode read front to back from a binary file-like object
    (a seekable one is read from its first byte, wherever it was left).

    ``density`` is seek points per second (``math.inf``: every frame/page).
    Storage errors propagate; anything wrong with the bytes themselves
    becomes a "no index" record.
    """
    if stream.seekable():
        stream.seek(0)
    reader = Reader(stream)
    buf, i = reader.window(_SNIFF_BYTES)
    head = buf[i : i + _SNIFF_BYTES]
    if not head:
        return SeekIndex.unavailable("empty blob")
    container = sniff(head)
    if container is None:
        return SeekIndex.unavailable("unknown container")
    try:
        return _PARSERS[container].parse(reader, density=density)
    except NoIndex as exc:
        return SeekIndex.unavailable(str(exc), container)
    except (ValueError, IndexError, KeyError, struct.error) as exc:
        # Malformed bytes that slipped past a check: still the data's fault.
        log.debug("index parser error in %s data", container, exc_info=True)
        return SeekIndex.unavailable(
            f"malformed {container} data ({type(exc).__name__})", container
        )
