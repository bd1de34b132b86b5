"""Range checks shared by the readers, so every one fails the same clear way."""

from __future__ import annotations

from ..errors import StorageError


def check_range(url: str, offset: int, length: int, size: int) -> None:
    """Raise ``StorageError`` unless ``[offset, offset + length)`` lies in ``[0, size)``."""
    if offset < 0 or length < 0 or offset + length > size:
        raise StorageError(
            f"range [{offset}, {offset + length}) is outside {url} (size {size} bytes)"
        )
