"""Writing datasets: ``pack`` (audio files into shards, whole or one
partition of a fanned-out plan), the probe it uses, ``build_index`` (the
``seek_index/`` column directory) and ``verify_dataset`` (is it whole?).

This layer sits on top of everything it writes for: it opens datasets,
parses containers and reads through the stores like any reader does.
"""

from .index import IndexReport, build_index, select_shards
from .pack import PackReport
from .verify import VerifyReport, verify_dataset

# ``pack`` the function is ``streamer.pack``; here the name stays the module's.
__all__ = [
    "IndexReport",
    "PackReport",
    "VerifyReport",
    "build_index",
    "select_shards",
    "verify_dataset",
]
