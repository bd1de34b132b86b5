"""A Dataset shared by threads: a shard several threads ask for at once is opened once."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from streamer.dataset.dataset import Dataset


def test_a_shard_opened_from_several_threads_at_once_is_opened_once(packed: Path) -> None:
    opened: list[str] = []

    class Counting(Dataset):
        def _open_shard(self, path: str, column_dir: str) -> Any:
            opened.append(path)
            time.sleep(0.05)  # wide enough for every thread to miss the cache
            return super()._open_shard(path, column_dir)

    dataset = Counting(packed)
    name = dataset.listed_shards[0]  # (shard_names would open them all first)
    with ThreadPoolExecutor(8) as pool:
        shards = list(pool.map(lambda _: dataset.shard(name), range(8)))
    assert all(shard is shards[0] for shard in shards)
    assert len(opened) == 1
