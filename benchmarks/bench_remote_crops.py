"""Decoded crops over S3 with injected latency (0, 20, 50 ms) vs local, in one run.

    python -m benchmarks.bench_remote_crops [--latency-ms 0 20 50] [--crops 20] [--minutes 60]
    python -m benchmarks.bench_remote_crops --quick

An hour-long episode per codec (``benchmarks/episodes.py``) is packed with its
seek index and uploaded to moto's S3 server on loopback, behind the test
suite's fault-injecting proxy (``testkit/servers.py``), which adds the latency
to every request. For each latency, a fresh store (cold block cache) reads
the same random 8 s crops with ``Dataset.read_crop``: one at a time, then
``--concurrency`` at once (``aread_crop``), against the same crops read
locally. The naive path downloads the whole blob per crop and decodes it.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import anyio

from benchmarks._report import write_json
from benchmarks.episodes import long_episode
from streamer.dataset.dataset import Dataset
from streamer.pipeline.bench import naive_crop
from streamer.storage.http import HTTPStore
from streamer.storage.s3 import S3Store
from streamer.synth import CODECS
from streamer.write.pack import pack
from testkit.servers import LoopbackServer, file_handler, proxy_handler, upload_tree

BUCKET = "bench"
CREDENTIALS = {"key": "bench", "secret": "bench-secret", "region_name": "us-east-1"}


def build_and_upload(folder: str, codecs: list[str], minutes: float, endpoint: str) -> str:
    src = os.path.join(folder, "src")
    os.makedirs(src)
    for codec in codecs:
        with open(os.path.join(src, f"{codec}.{CODECS[codec].extension}"), "wb") as file:
            file.write(long_episode(codec, minutes * 60))
    local = os.path.join(folder, "dataset")
    pack(src, local, progress=False)
    upload_tree(endpoint, local, BUCKET, "set", CREDENTIALS["key"], CREDENTIALS["secret"])
    return local


def crops_for(dataset: Dataset, codecs: list[str], count: int, duration: float) -> list:
    rng = random.Random(0)
    out = []
    for codec in codecs:
        index = dataset.seek_index(codec)
        length = index.num_samples / index.sample_rate
        out += [
            (codec, s, s + duration)
            for s in (rng.uniform(0, length - duration) for _ in range(count))
        ]
    rng.shuffle(out)
    return out


def sequential(dataset: Dataset, crops: list) -> float:
    began = time.perf_counter()
    for key, start, end in crops:
        dataset.read_crop(key, start, end)
    return len(crops) / (time.perf_counter() - began)


def concurrent(dataset: Dataset, crops: list, width: int) -> float:
    async def main() -> None:
        limit = anyio.CapacityLimiter(width)

        async def one(key: str, start: float, end: float) -> None:
            async with limit:
                await dataset.aread_crop(key, start, end)

        async with anyio.create_task_group() as group:
            for crop in crops:
                group.start_soon(one, *crop)

    began = time.perf_counter()
    anyio.run(main)
    return len(crops) / (time.perf_counter() - began)


def naive_remote(dataset: Dataset, crops: list) -> tuple[float, float]:
    """(crops/s, bytes per crop) downloading the whole blob, then decoding."""
    began, nbytes = time.perf_counter(), 0
    for key, start, end in crops:
        blob = dataset.blob(key)
        (cell,) = blob.reader.fetch_many_sync([(blob.offset, blob.length)])
        nbytes += len(cell)
        naive_crop(bytes(cell), start, end)
    return len(crops) / (time.perf_counter() - began), nbytes / len(crops)


def remote_dataset(kind: str, url: str, **options: object) -> Dataset:
    """A dataset over a fresh store (cold block cache) with its shards and indexes open."""
    if kind == "s3":
        store = S3Store("s3", {"endpoint_url": url, **CREDENTIALS, **options})
        dataset = Dataset(f"{BUCKET}/set", store=store)
    else:
        dataset = Dataset(url, store=HTTPStore("http", dict(options)))
    for key in {key for key in dataset}:
        dataset.seek_index(key), dataset.blob(key)
    dataset.store.stats.reset()
    return dataset


def measure(
    kind: str, url: str, latency: float, args: argparse.Namespace, crops: list
) -> dict[str, object]:
    dataset = remote_dataset(kind, url)
    rate = sequential(dataset, crops)
    stats = dataset.store.stats
    wide = remote_dataset(kind, url, max_concurrency=64)
    row = {
        "store": kind,
        "latency_ms": latency,
        "requests_per_crop": stats.requests / len(crops),
        "bytes_per_crop": stats.bytes_fetched / len(crops),
        "crops_per_s": rate,
        "crops_per_s_concurrent": concurrent(wide, crops, args.concurrency),
    }
    for used in (dataset, wide):
        anyio.run(used.store.aclose)
    return row


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _wait_for(url: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url, timeout=1)
            return
        except urllib.error.HTTPError:
            return  # it answers
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{url} did not come up")


def _serve(kind: str, target: str, latency: float, ports: multiprocessing.Queue) -> None:
    """A loopback server in a process of its own, so it never competes for our GIL:
    a proxy in front of moto (``kind="proxy"``) or a Range file server over a folder."""
    handler = proxy_handler(target) if kind == "proxy" else file_handler(Path(target))
    server = LoopbackServer(handler).start()
    server.faults.latency = latency
    ports.put(server.port)
    threading.Event().wait()


def start_server(kind: str, target: str, latency: float) -> tuple[multiprocessing.Process, str]:
    context = multiprocessing.get_context("spawn")
    ports = context.Queue()
    process = context.Process(target=_serve, args=(kind, target, latency, ports), daemon=True)
    process.start()
    return process, f"http://127.0.0.1:{ports.get(timeout=60)}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency-ms", type=float, nargs="+", default=[0.0, 20.0, 50.0])
    parser.add_argument("--codecs", nargs="+", default=["mp3", "aac", "opus", "flac"])
    parser.add_argument("--crops", type=int, default=10, help="crops per codec")
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--duration", type=float, default=8.0)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--quick", action="store_true", help="10-minute episodes, 0 and 50 ms")
    args = parser.parse_args()
    if args.quick:
        args.minutes, args.latency_ms, args.crops = 10.0, [0.0, 50.0], 5
    # moto and the proxy run in processes of their own: in this process they
    # would compete with decoding for the GIL, and the benchmark would measure that.
    port = _free_port()
    moto = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    upstream = f"http://127.0.0.1:{port}"
    _wait_for(upstream)
    rows = []
    try:
        with tempfile.TemporaryDirectory() as folder:
            local_path = build_and_upload(folder, args.codecs, args.minutes, upstream)
            local = Dataset(local_path)
            crops = crops_for(local, args.codecs, args.crops, args.duration)
            local_seq = sequential(local, crops)
            local_par = concurrent(local, crops, args.concurrency)
            print(
                f"{len(crops)} crops of {args.duration:g} s ({', '.join(args.codecs)}) out of "
                f"{args.minutes:g}-minute episodes; S3 = moto behind a latency proxy, "
                "HTTP = a Range file server with latency, each in its own process"
            )
            print(
                f"local: {local_seq:.1f} crops/s one at a time, {local_par:.1f} with "
                f"{args.concurrency} in flight"
            )
            print(
                f"{'store':<6}{'latency':>8}{'req/crop':>10}{'kB/crop':>9}{'crops/s':>9}"
                f"{'vs local':>9}{'crops/s x' + str(args.concurrency):>12}{'vs local':>9}"
            )
            for kind in ("s3", "http"):
                for latency in args.latency_ms:
                    target = upstream if kind == "s3" else local_path
                    server, url = start_server(
                        "proxy" if kind == "s3" else "files", target, latency / 1000
                    )
                    try:
                        row = measure(kind, url, latency, args, crops)
                    finally:
                        server.terminate()
                    row |= {
                        "local_crops_per_s": local_seq,
                        "local_crops_per_s_concurrent": local_par,
                    }
                    rows.append(row)
                    print(
                        f"{kind:<6}{latency:>6.0f}ms{row['requests_per_crop']:>10.2f}"
                        f"{row['bytes_per_crop'] / 1e3:>9.0f}{row['crops_per_s']:>9.1f}"
                        f"{row['crops_per_s'] / local_seq:>8.0%}"
                        f"{row['crops_per_s_concurrent']:>12.1f}"
                        f"{row['crops_per_s_concurrent'] / local_par:>8.0%}"
                    )
            server, url = start_server("files", local_path, args.latency_ms[-1] / 1000)
            remote = Dataset(f"{url}", store=HTTPStore("http", {}))
            naive_rate, naive_bytes = naive_remote(remote, crops[:3])
            print(
                f"naive (whole blob over HTTP + decode) at {args.latency_ms[-1]:g} ms: "
                f"{naive_rate:.2f} "
                f"crops/s, {naive_bytes / 1e6:.1f} MB and 1 request per crop"
            )
            rows.append({"naive_crops_per_s": naive_rate, "naive_bytes_per_crop": naive_bytes})
            anyio.run(remote.store.aclose)
            server.terminate()
    finally:
        moto.terminate()
        moto.wait()
    print(f"wrote {write_json('remote_crops', {'args': vars(args), 'rows': rows})}")


if __name__ == "__main__":
    main()
