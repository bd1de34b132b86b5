"""How streamer opens bytes with FFmpeg: the one place its open policy lives.

Every open of an episode's bytes (indexing, decoding, checking, the
fallback, ``pack``'s probe) goes through ``open_input``, so they all see the
same stream. Tags that are not UTF-8 (a Latin-1 ID3v1 title, a BWF ``bext``
field) are ignored: PyAV would otherwise refuse the whole file over them,
although FFmpeg decodes its audio.
"""

from __future__ import annotations

from typing import Any

import av

__all__ = ["open_input"]


def open_input(source: Any, **options: Any) -> av.container.InputContainer:
    """``av.open(source, "r", **options)`` with undecodable tags ignored."""
    container: av.container.InputContainer = av.open(
        source, "r", metadata_errors="ignore", **options
    )
    return container
