"""Batch mixing against remote block reuse, for the epoch orders, in one run.

    python -m benchmarks.bench_shuffle [--copies 4] [--per-episode 100] [--batch 16] [--shard-mb 45]

The demo episodes, ``--copies`` times under different keys, are packed into
shards of ``--shard-mb`` MiB (45: about seven episodes each) and served
by the test suite's Range file server on loopback. For each order — episodes back to back (the order
before interleaving: ``interleave=False``) and interleaved within a shard
(the default), each with the default ``shuffle_window`` of 1000, and a
window as large as the epoch — the same epoch's crops are fetched through
a cold block cache (``warmup``: planning and fetching, no decoding; the
fetches are the ones streaming makes), in a child process each. Reported:
distinct episodes per batch of ``--batch`` consecutive crops (what a
training batch mixes), the shards a batch touches, and requests and bytes
per crop, with the default cache (256 MiB) and a small one (16 MiB) that
holds a fraction of a shard.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

import streamer
from benchmarks._report import write_json
from streamer.demo import DEMO_EPISODES, demo_dataset
from streamer.pipeline.episodes import Episodes
from streamer.pipeline.warmup import warmup
from streamer.synth import CODECS
from testkit.servers import LoopbackServer, file_handler

ORDERS = {
    "episodes back to back, window 1000 (before)": {"interleave": False},
    "interleaved, window 1000": {"interleave": True},
    "interleaved, window 4000": {"interleave": True, "shuffle_window": 4000},
    "episodes back to back, window = epoch": {"interleave": False, "shuffle_window": 10**6},
}
CACHES = {"256 MiB": 256 << 20, "16 MiB": 16 << 20}


def build(folder: Path, copies: int, shard_mb: int) -> Path:
    """The demo episodes ``copies`` times, in shards of about ``shard_mb`` MiB."""
    demo = streamer.open_dataset(demo_dataset())
    for copy in range(copies):
        for key, codec, *_ in DEMO_EPISODES:
            path = folder / "src" / f"copy{copy}" / f"{key}.{CODECS[codec].extension}"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(demo.blob(key).view())
    streamer.pack(
        folder / "src", folder / "data", shard_size=shard_mb << 20, batch_size=1, progress=False
    )
    return folder / "data"


def one(url: str, order: dict, cache_bytes: int, per_episode: int, batch: int) -> dict:
    """One order through one cold cache (this is the child process)."""
    dataset = streamer.open_dataset(url, cache_bytes=cache_bytes)
    s = streamer.Streamer(dataset, streamer.RandomCrops(4.0, per_episode=per_episode), **order)
    plan = s.plan()
    shards = Episodes.of(dataset).shard[plan.episode]
    batches = range(0, len(plan) - batch + 1, batch)
    mixed = [len(set(plan.episode[i : i + batch].tolist())) for i in batches]
    touched = [len(set(shards[i : i + batch].tolist())) for i in batches]
    report = warmup(s, concurrency=16)
    stats = dataset.store.stats.snapshot()
    return {
        "crops": report.crops,
        "episodes_per_batch": float(np.mean(mixed)),
        "min_episodes_per_batch": int(min(mixed)),
        "shards_per_batch": float(np.mean(touched)),
        "requests_per_crop": stats["requests"] / report.crops,
        "kb_per_crop": stats["bytes_fetched"] / report.crops / 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=4)
    parser.add_argument("--per-episode", type=int, default=100)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--shard-mb", type=int, default=45)
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        url, order, cache = json.loads(args.one)
        print(json.dumps(one(url, order, cache, args.per_episode, args.batch)))
        return
    local = build(Path(tempfile.mkdtemp(prefix="bench-shuffle-")), args.copies, args.shard_mb)
    server = LoopbackServer(file_handler(local.parent)).start()
    episodes = len(streamer.open_dataset(local))
    shards = len(streamer.open_dataset(local).shard_names)
    print(f"{episodes} episodes in {shards} shards, {args.per_episode} crops of 4 s each")
    results = []
    try:
        for cache_name, cache in CACHES.items():
            for name, order in ORDERS.items():
                job = json.dumps([f"{server.url}/data", order, cache])
                child = [sys.executable, "-m", "benchmarks.bench_shuffle", "--one", job]
                child += ["--per-episode", str(args.per_episode), "--batch", str(args.batch)]
                answer = subprocess.run(child, check=True, stdout=subprocess.PIPE, env=os.environ)
                row = {"order": name, "cache": cache_name, **json.loads(answer.stdout)}
                results.append(row)
                print(
                    f"cache {cache_name:>7} | {name:45} | {row['episodes_per_batch']:5.1f} "
                    f"episodes/batch (min {row['min_episodes_per_batch']:2}) | "
                    f"{row['shards_per_batch']:4.2f} shards/batch | "
                    f"{row['requests_per_crop']:5.2f} requests/crop | "
                    f"{row['kb_per_crop']:7.1f} kB/crop"
                )
    finally:
        server.stop()
    print("wrote", write_json("shuffle", {"episodes": episodes, "results": results}))


if __name__ == "__main__":
    main()
