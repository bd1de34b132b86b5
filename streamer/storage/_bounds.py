"""Range checks shared by the readers, so every one fails the same clear way."""

from __future__ import annotations

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
    """
    if not value:
        return None
    unit, _, spec = value.strip().partition(" ")
    span, _, total = spec.partition("/")
    first, _, last = span.partition("-")
    if unit.lower() != "bytes" or not (first.isdigit() and last.isdigit() and total.isdigit()):
        return None
    return int(first), int(last) + 1, int(total)
