"""A fanned-out pack + index from S3 to S3, one partition killed and re-run.

A handful of distinct long episodes (a synthetic signal encoded by Debian's
lame, oggenc and flac) are uploaded to a real S3 server on loopback
(SeaweedFS by default) and copied server-side under distinct keys until the
source holds ``--gigabytes`` of audio. Then ``--workers`` processes run
``streamer pack s3://bench/raw s3://bench/out --shards i/N`` at once (each
also builds its shards' seek indexes). Partition 1 is SIGKILLed as its
first audio shard goes up (a multipart upload's first part, for shards over
the 64 MiB multipart threshold); the others
finish; partition 1 is run again; ``streamer verify`` checks the result.

Every request goes through a counting proxy in front of the server, so the
figures include the killed process: requests by kind (ranged GETs of the
source, listings, PUTs, multipart parts, ...) and bytes read and written on
the wire. The surviving processes also report their store's own stats.
Two references from the same run: the source size (a pack reads each
source byte once and writes about as much), and a baseline copy of the
same files by as many processes along pack's own I/O path (read through
the store into memory, stored from a local file) with no probing, Arrow or
indexing: the I/O limit of this setup. Pack is reported over it.

    python -m benchmarks.bench_fanout [--gigabytes 2] [--minutes 10] [--workers 4]
        [--shard-size 256M] [--server seaweedfs|moto|rclone]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import wave
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._report import write_json
from streamer.synth import signal as test_signal
from testkit import s3servers
from testkit.servers import LoopbackServer, Seen, proxy_handler

BUCKET = "bench"
KEY_ID, SECRET = "bench", "bench-secret-key"
RATE = 44100
VERIFY = [sys.executable, "-m", "streamer.cli", "verify"]
#: Files per record batch: a packer holds about this many episodes in memory.
BATCH_SIZE = 4
#: (codec, extension, command reading a WAV file and writing the encoded one).
ENCODERS = (
    ("mp3", "mp3", ["lame", "--quiet", "-b", "128"]),
    ("vorbis", "ogg", ["oggenc", "--quiet", "-q", "3", "-o"]),
    ("flac", "flac", ["flac", "--silent", "-5", "-o"]),
)


def make_episodes(folder: Path, minutes: float) -> list[Path]:
    """One stereo WAV of ``minutes``, encoded once per encoder."""
    wav = folder / "episode.wav"
    with wave.open(str(wav), "wb") as out:
        out.setnchannels(2)
        out.setsampwidth(2)
        out.setframerate(RATE)
        for minute in range(int(np.ceil(minutes))):
            seconds = min(60.0, minutes * 60 - minute * 60)
            chunk = test_signal(seconds, RATE, 2, seed=minute % 7)
            out.writeframes((chunk.T * 32767).astype("<i2").tobytes())
    made = []
    for _, extension, command in ENCODERS:
        target = folder / f"episode.{extension}"
        if command[0] == "lame":
            subprocess.run([*command, str(wav), str(target)], check=True)
        else:
            subprocess.run([*command, str(target), str(wav)], check=True)
        made.append(target)
    wav.unlink()
    return made


def s3_client(endpoint: str) -> Any:
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=KEY_ID,
        aws_secret_access_key=SECRET,
        region_name="us-east-1",
    )


def fill_source(endpoint: str, episodes: list[Path], target_bytes: int) -> tuple[int, int]:
    """Upload each episode once, then copy server-side to ``raw/dNN/epNNNN.ext``
    until the prefix holds ``target_bytes``; returns (files, bytes)."""
    client = s3_client(endpoint)
    client.create_bucket(Bucket=BUCKET)
    seeds = []
    for path in episodes:
        key = f"seed/{path.name}"
        client.upload_file(str(path), BUCKET, key)
        seeds.append((key, path.suffix, path.stat().st_size))
    total = files = 0
    while total < target_bytes:
        key, suffix, size = seeds[files % len(seeds)]
        client.copy_object(
            Bucket=BUCKET,
            Key=f"raw/d{files % 10:02d}/ep{files:04d}{suffix}",
            CopySource={"Bucket": BUCKET, "Key": key},
        )
        total += size
        files += 1
    return files, total


def pack_command(endpoint: str, part: str, shard_size: str, stats: Path) -> list[str]:
    """A partition's ``streamer pack`` run, its store's stats written to ``stats``."""
    code = (
        "import json, sys\n"
        "from streamer.cli import main\n"
        "from streamer.storage import open_url\n"
        "code = main(sys.argv[1:])\n"
        "store, _ = open_url(sys.argv[2], endpoint_url=sys.argv[5])\n"
        f"open({str(stats)!r}, 'w').write(json.dumps(store.stats.snapshot()))\n"
        "sys.exit(code)\n"
    )
    argv = ["pack", f"s3://{BUCKET}/raw", f"s3://{BUCKET}/out", "--endpoint-url", endpoint]
    argv += ["--shards", part, "--shard-size", shard_size, "--batch-size", str(BATCH_SIZE)]
    argv += ["--no-progress"]
    return [sys.executable, "-c", code, *argv]


def copy_command(endpoint: str, part: str) -> list[str]:
    """The baseline: a partition's files copied as they are from ``raw/`` to
    ``copy/`` along pack's own I/O path (read into memory through the store,
    written to a local file, stored), without probing, Arrow or indexing."""
    code = (
        "import sys, tempfile\n"
        "from streamer.storage import open_url\n"
        "from streamer.write.sources import list_sources, read_into\n"
        "part, count = map(int, sys.argv[1].split('/'))\n"
        "options = {'endpoint_url': sys.argv[2]}\n"
        f"files = list_sources('s3://{BUCKET}/raw', options)[part::count]\n"
        f"store, root = open_url('s3://{BUCKET}/copy', **options)\n"
        "for file in files:\n"
        "    buffer = bytearray(file.size)\n"
        "    read_into(file, memoryview(buffer))\n"
        "    with tempfile.NamedTemporaryFile(delete=False) as temp:\n"
        "        temp.write(buffer)\n"
        "    store.move_in_sync(store.join(root, file.source), temp.name)\n"
    )
    return [sys.executable, "-c", code, part, endpoint]


def run_all(commands: list[list[str]], env: dict[str, str]) -> float:
    """Run ``commands`` at once; their wall time (each must succeed)."""
    start = time.perf_counter()
    processes = [subprocess.Popen(c, env=env, stderr=subprocess.PIPE) for c in commands]
    for process in processes:
        _, err = process.communicate()
        if process.returncode != 0:
            raise SystemExit(f"baseline copy failed: {err.decode()}")
    return time.perf_counter() - start


def kind_of(seen: Seen) -> str:
    """What a request was, from its method and URL."""
    query = seen.path.partition("?")[2]
    where = "out" if f"/{BUCKET}/out/" in seen.path else "raw"
    if seen.method == "GET" and ("list-type" in query or "delimiter" in query):
        return "LIST"
    if seen.method == "GET":
        return f"GET {where}" + (" (ranged)" if seen.range else "")
    if seen.method == "PUT" and "partNumber" in query:
        return "PUT part"
    if seen.method == "POST" and "uploads" in query and "uploadId" not in query:
        return "POST start multipart"
    if seen.method == "POST" and "uploadId" in query:
        return "POST complete multipart"
    if seen.method == "DELETE" and "uploadId" in query:
        return "DELETE abort multipart"
    return f"{seen.method} {where}"


def wire_bytes(requests: list[Seen]) -> tuple[int, int]:
    """(bytes read by ranged GETs, bytes sent by PUTs), from the request headers."""
    read = written = 0
    for seen in requests:
        if seen.method == "GET" and seen.range:
            found = re.fullmatch(r"bytes=(\d+)-(\d+)", seen.range)
            if found:
                read += int(found[2]) - int(found[1]) + 1
        elif seen.method == "PUT":
            written += int(seen.headers.get("Content-Length", 0))
    return read, written


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gigabytes", type=float, default=2.0)
    parser.add_argument("--minutes", type=float, default=10.0, help="episode length")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--shard-size", default="256M")
    parser.add_argument("--server", default="seaweedfs", choices=s3servers.KINDS)
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = parser.parse_args()
    logging.getLogger("aiohttp.server").setLevel(logging.CRITICAL)  # a killed client's reset
    work = Path(tempfile.mkdtemp(prefix="bench-fanout-"))
    env = {
        **os.environ,
        "AWS_ACCESS_KEY_ID": KEY_ID,
        "AWS_SECRET_ACCESS_KEY": SECRET,
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    server = None
    proxy = None
    try:
        began = time.perf_counter()
        episodes = make_episodes(work, args.minutes)
        sizes = {p.suffix: p.stat().st_size for p in episodes}
        print(f"episodes of {args.minutes:g} min: {sizes} ({time.perf_counter() - began:.0f} s)")
        server = s3servers.start(args.server, work / "server", KEY_ID, SECRET)
        proxy = LoopbackServer(proxy_handler(server.url)).start()
        files, total = fill_source(server.url, episodes, int(args.gigabytes * 1e9))
        print(f"source: {files} files, {total / 1e9:.2f} GB in s3://{BUCKET}/raw")
        proxy.reset()
        server_cpu0, cpu0, proxy_cpu0 = server.cpu_seconds(), children_cpu(), time.process_time()
        parts = [f"{i}/{args.workers}" for i in range(args.workers)]
        copy_seconds = run_all([copy_command(proxy.url, p) for p in parts], env)
        copy_read, copy_written = wire_bytes(list(proxy.requests))
        copy_cpu = {
            "copiers": children_cpu() - cpu0,
            "server": server.cpu_seconds() - server_cpu0,
            "proxy": time.process_time() - proxy_cpu0,
        }
        print(
            f"baseline copy: {copy_seconds:.1f} s, read {copy_read / 1e9:.2f} GB, "
            f"wrote {copy_written / 1e9:.2f} GB, CPU {copy_cpu}"
        )
        proxy.reset()
        server_cpu0, cpu0, proxy_cpu0 = server.cpu_seconds(), children_cpu(), time.process_time()
        stats = {i: work / f"stats-{i}.json" for i in range(args.workers)}
        start = time.perf_counter()
        processes = {
            i: subprocess.Popen(
                pack_command(proxy.url, f"{i}/{args.workers}", args.shard_size, stats[i]),
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            for i in range(args.workers)
        }
        victim = "/out/audio/shard-000001.wsds"  # partition 1's first shard
        while not any(victim in r.path and r.method == "PUT" for r in list(proxy.requests)):
            if processes[1].poll() is not None:
                error = processes[1].communicate()[1].decode()
                raise SystemExit(f"partition 1 ended before it was killed: {error}")
            time.sleep(0.01)
        processes[1].send_signal(signal.SIGKILL)
        killed_at = time.perf_counter() - start
        outputs = {}
        for i, process in processes.items():
            out, err = process.communicate()
            outputs[i] = (process.returncode, out.decode(), err.decode())
        fanout_seconds = time.perf_counter() - start
        for i, (code, _, err) in outputs.items():
            if i != 1 and code != 0:
                raise SystemExit(f"partition {i} failed: {err}")
        visible = [
            r.path
            for r in proxy.requests
            if victim in r.path and r.method == "POST" and "uploadId" in r.path
        ]
        first_round = list(proxy.requests)
        rerun_start = time.perf_counter()
        rerun = subprocess.run(
            pack_command(proxy.url, f"1/{args.workers}", args.shard_size, stats[1]),
            env=env,
            capture_output=True,
            text=True,
        )
        rerun_seconds = time.perf_counter() - rerun_start
        if rerun.returncode != 0:
            raise SystemExit(f"re-run failed: {rerun.stderr}")
        pack_requests = list(proxy.requests)
        pack_cpu = children_cpu() - cpu0
        server_cpu = server.cpu_seconds() - server_cpu0
        proxy_cpu = time.process_time() - proxy_cpu0
        verify = subprocess.run(
            [*VERIFY, f"s3://{BUCKET}/out", "--endpoint-url", server.url],
            env=env,
            capture_output=True,
            text=True,
        )
        read, written = wire_bytes(pack_requests)
        result = {
            "server": args.server,
            "workers": args.workers,
            "shard_size": args.shard_size,
            "batch_size": BATCH_SIZE,
            "source_files": files,
            "source_bytes": total,
            "episode_bytes": sizes,
            "killed_after_seconds": round(killed_at, 1),
            "killed_shard_completed_before_kill": bool(visible),
            "fanout_seconds": round(fanout_seconds, 1),
            "rerun_seconds": round(rerun_seconds, 1),
            "wall_seconds": round(fanout_seconds + rerun_seconds, 1),
            "pack_cpu_seconds": round(pack_cpu, 1),
            "server_cpu_seconds": round(server_cpu, 1),
            "proxy_cpu_seconds": round(proxy_cpu, 1),
            "baseline_copy": {
                "wall_seconds": round(copy_seconds, 1),
                "bytes_read": copy_read,
                "bytes_written": copy_written,
                "cpu_seconds": {k: round(v, 1) for k, v in copy_cpu.items()},
            },
            "pack_over_copy": {
                "wall_first_round": round(fanout_seconds / copy_seconds, 2),
                "wall_with_rerun": round((fanout_seconds + rerun_seconds) / copy_seconds, 2),
                "client_cpu": round(pack_cpu / copy_cpu["copiers"], 2),
            },
            "requests_first_round": dict(Counter(kind_of(r) for r in first_round)),
            "requests_total": dict(Counter(kind_of(r) for r in pack_requests)),
            "bytes_read": read,
            "bytes_written": written,
            "read_per_source_byte": round(read / total, 3),
            "written_per_source_byte": round(written / total, 3),
            "store_stats": {
                i: json.loads(path.read_text()) for i, path in stats.items() if path.exists()
            },
            "rerun_output": rerun.stdout.strip().splitlines(),
            "verify_exit": verify.returncode,
            "verify_output": verify.stdout.strip().splitlines()[-1:],
        }
        for name in ("source_bytes", "wall_seconds", "fanout_seconds", "rerun_seconds"):
            print(f"{name}: {result[name]}")
        print(
            f"read {read / 1e9:.2f} GB ({result['read_per_source_byte']} x source), "
            f"wrote {written / 1e9:.2f} GB ({result['written_per_source_byte']} x source)"
        )
        print(f"throughput: {total / 1e6 / result['wall_seconds']:.0f} MB/s of source")
        print("requests:", json.dumps(result["requests_total"], indent=1))
        print(f"CPU: packers {pack_cpu:.0f} s, server {server_cpu:.0f} s, proxy {proxy_cpu:.0f} s")
        print("pack over the baseline copy:", result["pack_over_copy"])
        print("re-run:", " | ".join(result["rerun_output"]))
        print(f"verify exit {verify.returncode}:", verify.stdout.strip().splitlines()[-1:])
        print("wrote", write_json("bench_fanout", result))
    finally:
        if proxy is not None:
            proxy.stop()
        if server is not None:
            server.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
