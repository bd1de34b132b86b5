"""An outage while a shard is first opened is a storage failure, not bad data:
it raises, and nothing about the shard is remembered as broken."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from streamer.dataset import Dataset
from streamer.errors import StorageError
from testkit.servers import LoopbackServer, file_handler


def test_an_outage_opening_a_seek_index_shard_raises_and_is_not_remembered(  # type: ignore[no-untyped-def]
    storage_root: Path, make_store
) -> None:
    # A server of its own: the store's outage gate is per server and process.
    server = LoopbackServer(file_handler(storage_root)).start()
    try:
        store = make_store("http", give_up_after=0.5, backoff=0.05, max_backoff=0.1)
        dataset = Dataset(f"{server.url}/packed", store=store)
        key = next(iter(dataset))  # audio/ and audio_info/ shards open while the store is up
        server.faults.errors = 10**6  # every ranged request answers 503 from now on
        with pytest.raises(StorageError):
            dataset.episode(key)  # its seek_index/ shard cannot be opened
        server.faults.errors = 0  # the store is back: the index is used, not a fallback
        deadline = time.monotonic() + 10
        while True:  # the gate lets a probe through on its backoff schedule
            try:
                episode = dataset.episode(key)
                break
            except StorageError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        assert episode.index is not None and episode.index.ok
        assert dataset.index_problems() == {}
    finally:
        server.stop()
