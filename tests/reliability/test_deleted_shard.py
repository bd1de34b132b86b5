"""A local audio shard deleted after the dataset opened it and before the
decode workers map it (a cleanup job, a dataset rebuilt under a run).

A worker maps a local shard itself, when it unpickles a task of it; that
raised for the whole batch's message, outside the worker's handling of a
crop, and killed it: each worker given such a batch printed a traceback
and died, its crops were retried on others until they were skipped as
``WorkerDied``, and the restart budget ran out with an error naming
neither shard nor file. A task that does not unpickle is that task's
failure now, a ``StorageError`` naming the file, which the Streamer
raises (a storage failure is never skipped) with no worker lost.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers import write_audio

from streamer import ListCrops, Streamer, open_dataset
from streamer.errors import StorageError
from streamer.write.pack import pack


@pytest.mark.timeout(120)
def test_a_shard_deleted_under_the_workers_raises_a_storage_error(tmp_path: Path) -> None:
    write_audio(tmp_path / "src", "w", "wav", 16000, 1, 10.0, seed=1)
    pack(tmp_path / "src", tmp_path / "ds", progress=False)
    dataset = open_dataset(tmp_path / "ds")
    assert len(dataset.blob("w")) > 0  # this process has mapped the shard
    (shard,) = (tmp_path / "ds" / "audio").iterdir()
    shard.unlink()
    crops = ListCrops([("w", start, start + 1.0) for start in range(8)])
    stream = Streamer(dataset, crops, workers=2, prefetch=4)
    with stream, pytest.raises(StorageError, match=f"cannot map .*{re.escape(shard.name)}"):
        list(stream)
    assert stream.stats.worker_restarts == 0
    assert not stream.stats.skipped
    assert stream.stats.yielded == 0 and stream.state_dict()["position"] == 0
