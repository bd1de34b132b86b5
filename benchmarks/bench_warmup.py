"""One process's request ceiling: ranged GETs/s of a Streamer parent that only fetches.

``streamer warmup``'s fetch loop (``streamer.pipeline.warmup``: every
crop's planned bytes into the block cache, 16 crops at a time, nothing
decoded) over a fast S3 server on loopback (SeaweedFS by default, no
injected latency), one ``--block-kb`` block per GET, so the client's own CPU
per request is what limits it (with the server's, on the same cores).
The dataset is ``bench_pipeline``'s: the demo episodes, ``--copies`` times,
one per shard. Reported: GETs, wall time, GET/s, client CPU per GET (this
process, every thread); the server runs in a child process.

Compare two versions of streamer by running this script with each on
``sys.path`` (the script itself only uses ``open_dataset``, ``warmup`` and
``bench_streamer``); it prints which ``streamer`` it measured.

    python -m benchmarks.bench_warmup [--crops 400] [--copies 8] [--block-kb 64]
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
from pathlib import Path

import streamer
from benchmarks._report import write_json
from benchmarks.bench_pipeline import small_shards
from streamer.pipeline.bench import BenchConfig, bench_streamer
from streamer.pipeline.warmup import warmup
from testkit import s3servers
from testkit.servers import upload_tree

BUCKET = "bench"
KEY_ID, SECRET = "bench", "bench-secret"


def cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", choices=s3servers.KINDS, default="seaweedfs")
    parser.add_argument("--crops", type=int, default=400)
    parser.add_argument("--copies", type=int, default=8, help="copies of each demo episode")
    parser.add_argument("--block-kb", type=int, default=64)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        local = small_shards(Path(folder) / "data", args.copies)
        server = s3servers.start(args.server, Path(folder) / "server", KEY_ID, SECRET)
        try:
            upload_tree(server.url, local, BUCKET, "demo", KEY_ID, SECRET)
            options = {
                "endpoint_url": server.url,
                "key": KEY_ID,
                "secret": SECRET,
                "region_name": "us-east-1",
                "block_size": args.block_kb << 10,
                "max_request": args.block_kb << 10,  # one block per GET: many small GETs
            }
            dataset = streamer.open_dataset(f"s3://{BUCKET}/demo", **options)
            config = BenchConfig(crops=args.crops)
            s = bench_streamer(dataset, config, workers=0)
            len(s)  # plan (opens every shard) before measuring
            dataset.store.stats.reset()
            began_cpu, began = cpu(), time.perf_counter()
            report = warmup(s, concurrency=args.concurrency)
            seconds, spent = time.perf_counter() - began, cpu() - began_cpu
            gets = dataset.store.stats.requests
        finally:
            server.stop()
    result = {
        "streamer": streamer.__file__,
        "parameters": vars(args),
        "crops": report.crops,
        "gets": gets,
        "bytes": report.bytes,
        "seconds": seconds,
        "gets_per_second": gets / seconds,
        "cpu_per_get_ms": spent * 1e3 / max(gets, 1),
    }
    print(f"streamer from {streamer.__file__}")
    print(
        f"warmup of {report.crops} crops over {args.server} on loopback, block "
        f"{args.block_kb} KiB: {gets} GETs, {report.bytes / 1e6:.1f} MB in {seconds:.2f} s = "
        f"{gets / seconds:.0f} GET/s, {result['cpu_per_get_ms']:.2f} ms client CPU per GET"
    )
    print("wrote", write_json("bench_warmup", result))


if __name__ == "__main__":
    main()
