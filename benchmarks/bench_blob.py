"""Reading a crop's bytes out of a big episode: blob handle vs materialising the cell.

The naive path copies the whole binary cell out of the shard
(``column[j].as_py()``) and slices it; the blob handle reads only the range.
Both run in this process on the same shard, page cache warm, and the table
shows their ratio.

    python -m benchmarks.bench_blob [--episode-mb 200] [--read-kb 64] [--reads 200]
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
import time

import numpy as np
import pyarrow as pa

from benchmarks._report import write_json
from streamer.shard.ipc import Shard


def build_shard(path: str, episode_bytes: int) -> None:
    values = np.random.default_rng(0).integers(0, 256, episode_bytes, dtype=np.uint8)
    offsets = np.array([0, episode_bytes], dtype=np.int64)
    audio = pa.LargeBinaryArray.from_buffers(
        pa.large_binary(), 1, [None, pa.py_buffer(offsets), pa.py_buffer(values)]
    )
    table = pa.table({"__key__": ["episode"], "audio": audio})
    with pa.ipc.new_file(path, table.schema.with_metadata({"batch_size": "1"})) as writer:
        writer.write_table(table)


def timed(fn, reads: list[int], length: int) -> float:  # type: ignore[no-untyped-def]
    began = time.perf_counter()
    for offset in reads:
        fn(offset, length)
    return (time.perf_counter() - began) / len(reads)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episode-mb", type=int, default=200)
    parser.add_argument("--read-kb", type=int, default=64)
    parser.add_argument("--reads", type=int, default=200)
    parser.add_argument("--naive-reads", type=int, default=10)
    args = parser.parse_args()
    size, length = args.episode_mb << 20, args.read_kb << 10
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "audio", "s.wsds")
        os.makedirs(os.path.dirname(path))
        build_shard(path, size)
        shard = Shard(path)
        rng = random.Random(0)
        offsets = [rng.randrange(0, size - length) for _ in range(args.reads)]

        def naive(offset: int, n: int) -> bytes:
            return shard.column("audio")[0].as_py()[offset : offset + n]

        def handle(offset: int, n: int) -> bytes:
            return bytes(shard.blob("audio", 0).read_range(offset, n))

        assert naive(offsets[0], length) == handle(offsets[0], length)
        naive_s = timed(naive, offsets[: args.naive_reads], length)
        handle_s = timed(handle, offsets, length)
    print(f"{args.read_kb} KiB out of a {args.episode_mb} MiB episode, local mmap, warm cache")
    print(f"{'path':<28}{'per read':>12}{'bytes copied':>16}")
    print(f"{'naive (column[j].as_py())':<28}{naive_s * 1e3:>10.2f}ms{size:>16,}")
    print(f"{'blob handle (read_range)':<28}{handle_s * 1e6:>10.1f}us{length:>16,}")
    print(f"speed-up: {naive_s / handle_s:,.0f}x, bytes: {size / length:,.0f}x fewer")
    out = write_json(
        "blob",
        {
            "episode_bytes": size,
            "read_bytes": length,
            "naive_s_per_read": naive_s,
            "handle_s_per_read": handle_s,
            "speedup": naive_s / handle_s,
        },
    )
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
