"""How streamer opens bytes with FFmpeg: the one place its open policy lives.

Every open of an episode's bytes (indexing, decoding, checking, the
fallback, ``pack``'s probe) goes through ``open_input``, so they all see the
same stream. Tags that are not UTF-8 (a Latin-1 ID3v1 title, a BWF ``bext``
field) are ignored: PyAV before 19 would otherwise refuse the whole file
over them, although FFmpeg decodes its audio (``metadata_errors``). PyAV 19
has no such option: it reads every tag with ``surrogateescape`` and never
refuses a file over one.
"""

from __future__ import annotations

from typing import Any

import av

__all__ = ["open_input"]


#: How to tell the installed PyAV to ignore tags that are not UTF-8.
_TAGS = {"metadata_errors": "ignore"} if int(av.__version__.split(".")[0]) < 19 else {}


def open_input(source: Any, **options: Any) -> av.container.InputContainer:
    """``av.open(source, "r", **options)`` with undecodable tags ignored."""
    container: av.container.InputContainer = av.open(source, "r", **_TAGS, **options)
    return container
