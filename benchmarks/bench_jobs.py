"""What the cloud jobs cost on an object store: requests by kind and bytes, per
GB packed, per GB indexed and per crop streamed, priced at list prices.

Synthetic episodes (``--minutes`` long, ``--episodes`` per codec: mp3, opus,
aac, flac, encoded by PyAV) are uploaded to a real S3 server on loopback
(SeaweedFS by default; ``--server moto``/``rclone``) behind a proxy that logs
every request, and the jobs of ``streamer.jobs`` run against it exactly as a
cloud job runs them (credentials from the AWS environment variables):

1. pack: ``pack_part`` over ``--parts`` file partitions, S3 source to S3
   dataset, without seek indexes;
2. index: ``index_part`` over ``--parts`` shard partitions, then
   ``finish_index`` (the manifest);
3. stream: ``stream_example``, ``--crops`` random 8 s crops resampled to
   16 kHz mono, cold (no disk cache), as a training consumer reads them.

Requests are counted by what the stores bill: writes (PUT, POST: S3's tier 1,
B2's class A), listings (S3 tier 1, B2 class C) and reads (GET, HEAD: S3 tier
2, B2 class B); bytes as the stores count them. The cost table prices them
with ``PRICES`` (list prices written down from memory: check them).

    python -m benchmarks.bench_jobs [--minutes 3] [--episodes 2] [--parts 2]
        [--crops 200] [--server seaweedfs|moto|rclone]
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from benchmarks._report import write_json
from streamer import jobs
from streamer.storage import open_url
from streamer.synth import CODECS, encode, signal
from testkit import s3servers
from testkit.servers import LoopbackServer, Seen, proxy_handler, upload_tree

BUCKET = "jobs"
KEY_ID, SECRET = "bench", "bench-secret"
#: (codec, sample rate, channels) of the synthetic episodes.
EPISODES = (("mp3", 44100, 2), ("opus", 48000, 1), ("aac", 44100, 2), ("flac", 22050, 1))

#: List prices in USD (S3 Standard, us-east-1; Backblaze B2), as published in
#: 2024-2025 and written down without a network to check them: verify before
#: budgeting. Per 1,000 requests, per GB.
PRICES: dict[str, dict[str, float]] = {
    "S3 Standard": {
        "write": 0.005,  # PUT, COPY, POST, LIST (tier 1)
        "list": 0.005,
        "read": 0.0004,  # GET, HEAD (tier 2)
        "egress_gb": 0.09,  # to the internet, first 10 TB/month; 0 inside the region
        "storage_gb_month": 0.023,
    },
    "Backblaze B2": {
        "write": 0.0,  # class A: free
        "list": 0.004,  # class C: $0.004 per 1,000 (2,500 a day free)
        "read": 0.0004,  # class B: $0.004 per 10,000 (2,500 a day free)
        "egress_gb": 0.01,  # free up to 3x the data stored per month, then $0.01/GB
        "storage_gb_month": 0.006,
    },
}


def kind(seen: Seen) -> str:
    """What a request is billed as: write, list or read."""
    if seen.method in ("PUT", "POST", "DELETE"):
        return "write"
    query = seen.path.partition("?")[2]
    if seen.method == "GET" and ("list-type=" in query or "prefix=" in query):
        return "list"
    return "read"


def build_sources(folder: Path, minutes: float, per_codec: int) -> int:
    """Encode the episodes into ``folder``; their total bytes."""
    total = 0
    for codec, rate, channels in EPISODES:
        for n in range(per_codec):
            data = encode(signal(minutes * 60, rate, channels, seed=n), rate, codec)
            path = folder / f"{codec}-{n}.{CODECS[codec].extension}"
            path.write_bytes(data)
            total += len(data)
    return total


def cpu_seconds() -> float:
    """CPU of this process and its finished children (index workers)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def measured(proxy: LoopbackServer, action) -> tuple[Any, dict[str, Any]]:  # type: ignore[no-untyped-def]
    """Run ``action()``; what came back, and the requests by kind, bytes and CPU it took."""
    proxy.reset()
    cpu, began = cpu_seconds(), time.perf_counter()
    result = action()
    figures = {
        "requests": dict(Counter(kind(seen) for seen in proxy.requests)),
        "wall_s": time.perf_counter() - began,
        "cpu_s": cpu_seconds() - cpu,
    }
    return result, figures


def price(requests: dict[str, float], egress_gb: float, prices: dict[str, float]) -> float:
    """USD for ``requests`` (by kind) and ``egress_gb`` at ``prices``."""
    fees = sum(prices[k] * n / 1000 for k, n in requests.items())
    return fees + egress_gb * prices["egress_gb"]


def run(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "raw"
        folder.mkdir()
        source_bytes = build_sources(folder, args.minutes, args.episodes)
        with s3servers.running(args.server, Path(tmp) / "server", KEY_ID, SECRET) as (endpoint, _):
            upload_tree(endpoint, folder, BUCKET, "raw", KEY_ID, SECRET)
            proxy = LoopbackServer(proxy_handler(endpoint)).start()
            os.environ.update(
                AWS_ACCESS_KEY_ID=KEY_ID,
                AWS_SECRET_ACCESS_KEY=SECRET,
                AWS_DEFAULT_REGION="us-east-1",
                AWS_ENDPOINT_URL=proxy.url,
            )
            try:
                return measure_jobs(proxy, args, source_bytes)
            finally:
                proxy.stop()


def measure_jobs(
    proxy: LoopbackServer, args: argparse.Namespace, source_bytes: int
) -> dict[str, Any]:
    src, url = f"s3://{BUCKET}/raw", f"s3://{BUCKET}/dataset"
    parts = jobs.partitions(args.parts)
    results: dict[str, Any] = {"source_bytes": source_bytes, "parts": args.parts}

    def pack() -> jobs.JobSummary:
        reports = [
            jobs.pack_part(src, url, p, index=False, shard_size=args.shard_mb << 20) for p in parts
        ]
        return jobs.merge("pack", parts, reports)

    def index() -> jobs.JobSummary:
        summary = jobs.merge("index", parts, [jobs.index_part(url, p) for p in parts])
        jobs.finish_index(url)
        return summary

    for name, action in (("pack", pack), ("index", index)):
        summary, figures = measured(proxy, action)
        assert summary.ok, (summary.failed, summary.problems)
        gb = source_bytes / 1e9
        files, shards = len(EPISODES) * args.episodes, summary.counts["shards written"]
        results[name] = {
            **figures,
            "per_file": {k: n / files for k, n in figures["requests"].items()},
            "shards": shards or results["pack"]["shards"],
            "bytes_read": summary.bytes_fetched,
            "bytes_written": summary.bytes_stored,
            "per_gb": {
                "requests": {k: n / gb for k, n in figures["requests"].items()},
                "gb_read": summary.bytes_fetched / source_bytes,
                "gb_written": summary.bytes_stored / source_bytes,
                "cpu_s": figures["cpu_s"] / gb,
            },
            "counts": dict(summary.counts),
        }
    # A training process starts cold: nothing of the jobs' reads in memory.
    open_url(url)[0].clear_memory_cache()
    report, figures = measured(
        proxy, lambda: jobs.stream_example(url, crops=args.crops, workers=args.workers)
    )
    episodes = len(EPISODES) * args.episodes
    results["stream"] = {
        **figures,
        # The naive consumer downloads each crop's whole episode: one GET of the blob.
        "naive_bytes_per_crop": source_bytes / episodes,
        "crops": report.crops,
        "skipped": report.skipped,
        "crops_per_s": report.crops_per_second,
        "bytes_per_crop": report.bytes_per_crop,
        "per_crop": {k: n / report.crops for k, n in figures["requests"].items()},
    }
    return results


def costs(results: dict[str, Any]) -> dict[str, dict[str, float]]:
    """USD per TB packed and indexed (in the store's region: no egress) and
    per million crops (inside the region, and streamed out of it; and the
    naive consumer's, out of it)."""
    table: dict[str, dict[str, float]] = {}
    for store, prices in PRICES.items():
        row = {}
        for job in ("pack", "index"):
            per_tb = {k: n * 1000 for k, n in results[job]["per_gb"]["requests"].items()}
            row[f"{job} per TB"] = price(per_tb, 0.0, prices)
        stream = results["stream"]
        per_million = {k: n * 1e6 for k, n in stream["per_crop"].items()}
        egress_gb = stream["bytes_per_crop"] * 1e6 / 1e9
        row["1M crops, in region"] = price(per_million, 0.0, prices)
        row["1M crops, egress"] = price(per_million, egress_gb, prices)
        naive_gb = stream["naive_bytes_per_crop"] * 1e6 / 1e9
        row["1M crops, egress, naive"] = price({"read": 1e6}, naive_gb, prices)
        table[store] = row
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=3.0, help="episode length")
    parser.add_argument("--episodes", type=int, default=2, help="episodes per codec")
    parser.add_argument("--parts", type=int, default=2, help="partitions of each job")
    parser.add_argument("--shard-mb", type=int, default=8, help="pack's shard size")
    parser.add_argument("--crops", type=int, default=200, help="crops streamed")
    parser.add_argument("--workers", type=int, default=1, help="decode workers when streaming")
    parser.add_argument("--server", default="seaweedfs", choices=("moto", *s3servers.KINDS))
    args = parser.parse_args()
    results = run(args)
    results["costs_usd"] = costs(results)
    results["prices"] = PRICES
    print(
        f"source audio: {results['source_bytes'] / 1e6:.1f} MB, {args.parts} parts, {args.server}"
    )
    for job in ("pack", "index"):
        r = results[job]
        per_gb = r["per_gb"]
        kinds = ", ".join(f"{n:.0f} {k}" for k, n in sorted(per_gb["requests"].items()))
        per_file = ", ".join(f"{n:.1f} {k}" for k, n in sorted(r["per_file"].items()))
        print(f"{job}: per file {per_file} requests ({r['shards']} shards)")
        print(
            f"{job}: per GB of audio {kinds} requests; {per_gb['gb_read']:.2f} GB read, "
            f"{per_gb['gb_written']:.2f} GB written; {per_gb['cpu_s']:.0f} CPU s "
            f"(run: {r['wall_s']:.1f} s wall, {r['cpu_s']:.1f} CPU s)"
        )
    s = results["stream"]
    kinds = ", ".join(f"{n:.3f} {k}" for k, n in sorted(s["per_crop"].items()))
    print(
        f"stream: {s['crops']} crops, per crop {kinds} requests, "
        f"{s['bytes_per_crop'] / 1e3:.1f} kB; "
        f"{s['crops_per_s']:.1f} crops/s (skipped: {s['skipped'] or 'none'})"
    )
    naive = s["naive_bytes_per_crop"]
    print(
        f"naive (the whole episode per crop): 1 read request, {naive / 1e6:.2f} MB per crop: "
        f"{naive / s['bytes_per_crop']:.0f}x streamer's bytes"
    )
    print("USD (list prices, see PRICES):")
    for store, row in results["costs_usd"].items():
        print(f"  {store}: " + ", ".join(f"{k} ${v:.4f}" for k, v in row.items()))
    print("results:", write_json("bench_jobs", results))


if __name__ == "__main__":
    main()
