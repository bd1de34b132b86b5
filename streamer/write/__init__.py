"""Writing datasets: ``pack`` (a folder of audio files into shards), the
probe it uses, and ``build_index`` (the ``seek_index/`` column directory).

This layer sits on top of everything it writes for: it opens datasets,
parses containers and reads through the stores like any reader does.
"""

from .index import IndexReport, build_index, select_shards
from .pack import PackReport

# ``pack`` the function is ``streamer.pack``; here the name stays the module's.
__all__ = ["IndexReport", "PackReport", "build_index", "select_shards"]
