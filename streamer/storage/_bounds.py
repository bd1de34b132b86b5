"""Range checks shared by the readers, so every one fails the same clear way."""

from __future__ import annotations

import re

from ..errors import StorageError


def check_range(url: str, offset: int, length: int, size: int) -> None:
    """Raise ``StorageError`` unless ``[offset, offset + length)`` lies in ``[0, size)``."""
    if offset < 0 or length < 0 or offset + length > size:
        raise StorageError(
            f"range [{offset}, {offset + length}) is outside {url} (size {size} bytes)"
        )


def parse_content_range(value: str | None) -> tuple[int, int, int] | None:
    """``bytes START-END/TOTAL`` -> (start, end exclusive, total); ``None`` if absent or odd.

    A ranged response must carry this header: it is how a reader knows the
    server sent the asked bytes (and, for a suffix request, the object size).
    Odd is also a span that names no bytes of the object: a last byte before
    the first or at the size or past it, digits that are not ASCII (``²``).
    """
    match = _CONTENT_RANGE.fullmatch(value.strip()) if value else None
    if match is None:
        return None
    first, last, total = map(int, match.groups())
    return (first, last + 1, total) if first <= last < total else None


def parse_unsatisfied_range(value: str | None) -> int | None:
    """``bytes */SIZE`` (an unsatisfied range: RFC 9110's form for a 416) -> SIZE;
    ``None`` if absent or another form.

    ``bytes 0--1/0``, the empty span of an empty object that MinIO's server
    code (JuiceFS's S3 gateway) names in a 206 to a suffix range, says the
    same of an empty object: -> 0."""
    text = value.strip() if value else ""
    if _EMPTY_SPAN.fullmatch(text):
        return 0
    match = _UNSATISFIED.fullmatch(text)
    return int(match[1]) if match else None


_CONTENT_RANGE = re.compile(r"(?i:bytes) +([0-9]+)-([0-9]+)/([0-9]+)", re.ASCII)
_UNSATISFIED = re.compile(r"(?i:bytes) *\*/([0-9]+)", re.ASCII)
_EMPTY_SPAN = re.compile(r"(?i:bytes) +0--1/0", re.ASCII)
