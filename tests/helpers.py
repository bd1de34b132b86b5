"""Helpers the test modules import (fixtures live in conftest.py)."""

from __future__ import annotations

import os
from pathlib import Path

from streamer.synth import CODECS, encode, signal


def write_audio(
    folder: Path, relpath: str, codec: str, rate: int, channels: int, seconds: float, seed: int = 0
) -> Path:
    """Encode a test signal into ``folder/relpath.<ext>`` and return the path."""
    path = folder / f"{relpath}.{CODECS[codec].extension}"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(encode(signal(seconds, rate, channels, seed=seed), rate, codec))
    return path


def rss_kib() -> int:
    """Resident memory (anonymous + file-backed) of this process, in KiB (Linux)."""
    fields = {}
    with open(f"/proc/{os.getpid()}/status") as status:
        for line in status:
            name, _, value = line.partition(":")
            fields[name] = value
    return int(fields["RssAnon"].split()[0]) + int(fields["RssFile"].split()[0])


def write_blob_dataset(root: Path, blob_sizes: tuple[int, ...], batches: int) -> list[bytes]:
    """A dataset of one ``audio/`` shard of random blobs (not audio) split in ``batches``.

    Returns the blobs. Keys are ``k0``, ``k1``, ...; shard is ``audio/s.wsds``.
    """
    import numpy as np
    import pyarrow as pa

    rng = np.random.default_rng(len(blob_sizes))
    blobs = [rng.bytes(size) for size in blob_sizes]
    table = pa.table(
        {
            "__key__": [f"k{i}" for i in range(len(blobs))],
            "audio": pa.array(blobs, pa.large_binary()),
        }
    )
    (root / "audio").mkdir(parents=True)
    per_batch = -(-len(blobs) // batches)
    with pa.ipc.new_file(str(root / "audio" / "s.wsds"), table.schema) as writer:
        writer.write_table(table, max_chunksize=per_batch)
    return blobs
