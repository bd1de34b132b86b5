"""An audio shard replaced on the server by other bytes of the same size,
after the dataset was opened and before a decode worker reads its blob.

Without a seek index the workers read the blob themselves. Each took its
own first answer for the object's version, so with ``workers=2`` every crop
was decoded from the new bytes, placed by the old footer, without a word
(``workers=0`` raised). A reader now carries the version tags its process
has seen to the worker: the read fails, as in the parent.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers import write_audio

from streamer import ListCrops, Streamer, open_dataset
from streamer.errors import StorageError
from streamer.write.pack import pack
from testkit.servers import LoopbackServer, file_handler


@pytest.mark.parametrize("workers", [0, 2])
def test_a_same_size_replacement_fails_in_workers_too(tmp_path: Path, workers: int) -> None:
    write_audio(tmp_path / "src", "w", "wav", 16000, 1, 10.0, seed=1)
    pack(tmp_path / "src", tmp_path / "www" / "ds", progress=False, index=False)
    server = LoopbackServer(file_handler(tmp_path / "www")).start()
    try:
        # small blocks: the footer's read does not fetch the blob's bytes too
        options = {"block_size": 16 * 1024, "coalesce_gap": 0, "backoff": 0.05}
        dataset = open_dataset(f"{server.url}/ds", give_up_after=5, **options)
        assert len(dataset.blob("w")) > 0  # the shard's footer and offsets are read
        (shard,) = (tmp_path / "www" / "ds" / "audio").iterdir()
        data = bytearray(shard.read_bytes())
        middle = len(data) // 2
        data[middle : middle + 50_000] = bytes(b ^ 0x55 for b in data[middle : middle + 50_000])
        temp = shard.with_name(".replaced")
        temp.write_bytes(bytes(data))
        os.utime(temp, ns=(1, 1))  # another Last-Modified, and so another ETag
        os.replace(temp, shard)
        crops = ListCrops([("w", 4.0, 5.0), ("w", 7.0, 8.0)])
        stream = Streamer(dataset, crops, workers=workers, on_error="raise")
        changed = "changed on the server while it was being read"
        with pytest.raises(StorageError, match=changed), stream:
            list(stream)
    finally:
        server.stop()
