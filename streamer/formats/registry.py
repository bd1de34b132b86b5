"""Every format streamer knows, keyed by ``(container, codec)``; indexing by sniffing.

Adding a format is one subpackage (a ``Format`` subclass with its parser and
decoder) and one line in ``FORMATS``. ``extract`` picks the format by the
bytes, never by a file name, and always returns a ``SeekIndex``: a file no
format can index, whose codec its container's format does not decode (FLAC
inside MP4, A-law WAV), or whose index fails ``index.checks`` (a
sample rate of 0, a length the bytes cannot hold, no seek points) comes back
as "no index" with the reason, so one bad episode never stops a build and
the episode stays readable through the fallback.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import BinaryIO

from ..errors import StreamerError
from ..index.checks import check_index
from ..index.table import SeekIndex
from . import aiff, flac, generic, mp3, mp4, ogg, wav
from .base import Format
from .reader import NoIndex, Reader

__all__ = ["DEFAULT_DENSITY", "FORMATS", "GENERIC", "candidates", "extract", "format_for", "sniff"]

#: Seek points per second of audio.
DEFAULT_DENSITY = 1.0

#: In sniffing order: mp3 goes last, its test (a frame header or an ID3 tag) is the weakest.
FORMATS: tuple[Format, ...] = (
    wav.FORMAT,
    wav.W64_FORMAT,
    aiff.FORMAT,
    ogg.FORMAT,
    flac.FORMAT,
    mp4.FORMAT,
    mp3.FORMAT,
)
#: FFmpeg's demuxer and decoder for everything else, and the second choice
#: for files the native formats take (``candidates``); it never sniffs.
GENERIC = generic.FORMAT

_BY_PAIR = {(f.container, codec): f for f in FORMATS for codec in f.codecs}
_SNIFF_BYTES = 16

log = logging.getLogger(__name__)


def sniff(head: bytes) -> str | None:
    """The container the first bytes of a file announce, or None."""
    return next((f.container for f in FORMATS if f.matches(head)), None)


def format_for(index: SeekIndex) -> Format | None:
    """The format that decodes what ``index`` describes, or None."""
    if GENERIC.handles(index):
        return GENERIC
    return _BY_PAIR.get((index.container, index.codec))


def extract(stream: BinaryIO, *, density: float = DEFAULT_DENSITY) -> SeekIndex:
    """Index one episode read front to back from a binary file-like object
    (a seekable one is read from its first byte, wherever it was left).

    ``density`` is seek points per second (``math.inf``: every frame/page).
    The native format the bytes announce builds the index; bytes no native
    format announces get the generic one (FFmpeg's demuxer). Errors of the
    stream itself (``StorageError``, or a blob handle's ``ShardError``)
    propagate; anything wrong with the bytes becomes a "no index" record,
    and so does an index that ``check_index`` rejects.
    """
    sniffed = _sniff(stream)
    if sniffed is None:
        return SeekIndex.unavailable("empty blob")
    reader, native = sniffed
    return _build(native or GENERIC, reader, density)


def candidates(stream: BinaryIO, *, density: float = DEFAULT_DENSITY) -> Iterator[SeekIndex]:
    """The indexes worth trying for one episode, best first: the native
    format's, then the generic one (built only when asked for: a caller that
    keeps the first that passes never pays for it). A "no index" record comes
    only when no index could be built, with the reasons. The indexer's check
    (``decode.verify``) keeps the first that passes. A native format whose
    container the generic index cannot serve (``Format.generic_second``)
    gives its index or its reason alone."""
    sniffed = _sniff(stream)
    if sniffed is None:
        yield SeekIndex.unavailable("empty blob")
        return
    reader, native = sniffed
    if native is not None and not native.generic_second:
        yield _build(native, reader, density)
        return
    first = _build(native, reader, density) if native is not None else None
    if first is not None and first.ok:
        yield first
    if stream.seekable():
        stream.seek(0)
    second = _build(GENERIC, Reader(stream), density)
    if second.ok or first is None:
        yield second
    elif not first.ok:
        reason = f"{first.reason}; generic: {second.reason}"
        yield SeekIndex.unavailable(reason, first.container)


def _sniff(stream: BinaryIO) -> tuple[Reader, Format | None] | None:
    """A reader at the stream's start and the native format its first bytes
    announce (None: no native one); None for a stream without bytes."""
    if stream.seekable():
        stream.seek(0)
    reader = Reader(stream)
    buf, i = reader.window(_SNIFF_BYTES)
    head = buf[i : i + _SNIFF_BYTES]
    if not head:
        return None
    return reader, next((f for f in FORMATS if f.matches(head)), None)


def _build(found: Format, reader: Reader, density: float) -> SeekIndex:
    """``found``'s index of the episode, or the "no index" record with the reason."""
    try:
        index = found.build_index(reader, density=density)
    except NoIndex as exc:
        return SeekIndex.unavailable(str(exc), found.container)
    except StreamerError:
        raise
    except Exception as exc:
        # Malformed bytes that slipped past a parser's checks: still the
        # data's fault, and one episode must never stop a build.
        log.debug("index parser error in %s data", found.container, exc_info=True)
        return SeekIndex.unavailable(
            f"malformed {found.container} data ({type(exc).__name__})", found.container
        )
    if format_for(index) is None:
        return SeekIndex.unavailable(
            f"no decoder for {index.codec} in {index.container}", index.container
        )
    reason = check_index(index, reader.length())
    return index if reason is None else SeekIndex.unavailable(reason, index.container)
