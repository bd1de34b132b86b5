"""Crops out of hour-long episodes over S3: bytes and requests vs downloading the blob.

A shard of hour-long episodes (random bytes sized like a 128 kbps mp3: the
storage layer does not care what the bytes mean) is uploaded to a real S3
server on loopback (SeaweedFS by default; ``--server moto`` or ``rclone``),
reached through a proxy that delays every request by ``--latency`` seconds
(50 ms by default, a far object store's round trip). For each crop, 8 s
worth of bytes at a random position are read two ways, in one run:

* naive: download the episode's whole blob (one ranged GET of the cell);
* streamer: the blob handle's ``read_range`` through the block cache.

Reported per crop: requests, bytes on the wire, wall time, and the ratios.
Opening the dataset (listing + shard footer) is reported separately.

    python -m benchmarks.bench_remote [--episodes 2] [--hours 1] [--kbps 128] [--crops 20]
        [--server seaweedfs|moto|rclone] [--latency 0.05]
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from benchmarks._report import add_server_argument, s3_server, write_json
from streamer.dataset.dataset import Dataset
from streamer.storage.s3 import S3Store
from testkit.servers import LoopbackServer, proxy_handler, upload_tree

BUCKET = "bench"
CREDENTIALS = {"key": "bench", "secret": "bench-secret", "region_name": "us-east-1"}


def build_shard(path: Path, episodes: int, episode_bytes: int) -> None:
    rng = np.random.default_rng(0)
    values = rng.integers(0, 256, episodes * episode_bytes, dtype=np.uint8)
    offsets = np.arange(episodes + 1, dtype=np.int64) * episode_bytes
    audio = pa.LargeBinaryArray.from_buffers(
        pa.large_binary(), episodes, [None, pa.py_buffer(offsets), pa.py_buffer(values)]
    )
    table = pa.table({"__key__": [f"ep{i}" for i in range(episodes)], "audio": audio})
    path.parent.mkdir(parents=True)
    with pa.ipc.new_file(str(path), table.schema) as writer:
        writer.write_table(table)


def measure(store: S3Store, action) -> dict[str, float]:  # type: ignore[no-untyped-def]
    store.stats.reset()
    began = time.perf_counter()
    action()
    seconds = time.perf_counter() - began
    return {
        "requests": store.stats.requests,
        "bytes": store.stats.bytes_fetched,
        "seconds": seconds,
    }


def run(args: argparse.Namespace, endpoint: str) -> dict:
    episode_bytes = int(args.hours * 3600 * args.kbps * 1000 / 8)
    crop_bytes = int(args.crop_seconds * args.kbps * 1000 / 8)
    with tempfile.TemporaryDirectory() as folder:
        shard = Path(folder) / "audio" / "shard-000000.wsds"
        build_shard(shard, args.episodes, episode_bytes)
        upload_tree(endpoint, folder, BUCKET, "set", CREDENTIALS["key"], CREDENTIALS["secret"])
    proxy = LoopbackServer(proxy_handler(endpoint)).start()
    proxy.faults.latency = args.latency
    try:
        return measure_crops(args, proxy.url, episode_bytes, crop_bytes)
    finally:
        proxy.stop()


def measure_crops(
    args: argparse.Namespace, endpoint: str, episode_bytes: int, crop_bytes: int
) -> dict:
    store = S3Store(
        "s3", {"endpoint_url": endpoint, **CREDENTIALS, "block_size": args.block_kb << 10}
    )
    opened: dict[str, Dataset] = {}
    open_cost = measure(
        store, lambda: opened.setdefault("d", Dataset(f"{BUCKET}/set", store=store))
    )
    dataset = opened["d"]
    shard_cost = measure(store, lambda: dataset.shard("shard-000000"))
    rng = random.Random(0)
    crops = [
        (f"ep{rng.randrange(args.episodes)}", rng.randrange(episode_bytes - crop_bytes))
        for _ in range(args.crops)
    ]
    naive, ours = [], []
    for key, start in crops:
        blob = dataset.blob(key)

        def whole(blob=blob, start=start) -> None:
            (cell,) = blob.reader.fetch_many_sync([(blob.offset, blob.length)])
            assert len(bytes(cell[start : start + crop_bytes])) == crop_bytes

        naive.append(measure(store, whole))
        ours.append(
            measure(store, lambda blob=blob, start=start: blob.read_range(start, crop_bytes))
        )
    total = {
        name: {k: sum(r[k] for r in rows) / len(rows) for k in ("requests", "bytes", "seconds")}
        for name, rows in (("naive", naive), ("streamer", ours))
    }
    return {
        "parameters": vars(args) | {"episode_bytes": episode_bytes, "crop_bytes": crop_bytes},
        "open_dataset": open_cost,
        "open_shard": shard_cost,
        "per_crop": total,
        "ratios": {
            k: total["naive"][k] / max(total["streamer"][k], 1e-9)
            for k in ("requests", "bytes", "seconds")
        },
    }


def report(result: dict) -> None:
    p = result["parameters"]
    print(
        f"{p['episodes']} episodes x {p['hours']} h at {p['kbps']} kbps "
        f"({p['episode_bytes'] / 1e6:.1f} MB each), {p['crops']} crops of {p['crop_seconds']} s "
        f"({p['crop_bytes'] / 1e3:.0f} kB), block {p['block_kb']} KiB, S3 = {p['server']} on "
        f"loopback with {p['latency'] * 1000:.0f} ms per request"
    )
    for phase in ("open_dataset", "open_shard"):
        cost = result[phase]
        print(f"{phase:12}  {cost['requests']:3.0f} requests  {cost['bytes'] / 1e3:9.1f} kB")
    print(f"{'per crop':12}  {'requests':>9}  {'MB':>10}  {'seconds':>9}")
    for name in ("naive", "streamer"):
        row = result["per_crop"][name]
        print(
            f"{name:12}  {row['requests']:9.2f}  {row['bytes'] / 1e6:10.3f}  {row['seconds']:9.4f}"
        )
    ratios = result["ratios"]
    print(
        f"{'naive/ours':12}  {ratios['requests']:8.2f}x  {ratios['bytes']:9.1f}x  "
        f"{ratios['seconds']:8.1f}x"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=2)
    parser.add_argument("--hours", type=float, default=1.0)
    parser.add_argument("--kbps", type=int, default=128)
    parser.add_argument("--crop-seconds", type=float, default=8.0)
    parser.add_argument("--crops", type=int, default=20)
    parser.add_argument("--block-kb", type=int, default=256)
    add_server_argument(parser)
    parser.add_argument("--latency", type=float, default=0.05, help="seconds per request")
    args = parser.parse_args()
    with s3_server(args.server, CREDENTIALS["key"], CREDENTIALS["secret"]) as (endpoint, _):
        result = run(args, endpoint)
    report(result)
    print("wrote", write_json("bench_remote", result))


if __name__ == "__main__":
    main()
