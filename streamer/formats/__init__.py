"""Formats: one plug-in per container family, used for indexing and decoding alike.

``base.Format`` is the interface; ``registry`` lists the formats and keys
them by ``(container, codec)``; each subpackage (``mp3``, ``ogg``, ``flac``,
``mp4``, ``wav``) is one format with its parser (``parse``) and decoder
(``decode``). ``job`` holds the values a decoder is handed (``Episode``,
``CropPlan``, ``Fetched``, ``DecodeContext``); ``reader``, ``packets``,
``frames`` and ``sparse`` are machinery formats share.
"""

from .base import Format, NoIndex
from .job import CropPlan, DecodeContext, DecodeStats, Episode, Fetched
from .registry import DEFAULT_DENSITY, FORMATS, extract, format_for, sniff

__all__ = [
    "DEFAULT_DENSITY",
    "FORMATS",
    "CropPlan",
    "DecodeContext",
    "DecodeStats",
    "Episode",
    "Fetched",
    "Format",
    "NoIndex",
    "extract",
    "format_for",
    "sniff",
]
