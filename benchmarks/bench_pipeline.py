"""The pipeline's throughput locally and over S3 with injected latency: one `streamer bench` run.

The demo episodes (seven 1.5-4 minute episodes, one per codec), copied
``--copies`` times and repacked one episode per shard (``small_shards``), are
uploaded to a real S3 server on loopback (SeaweedFS by default; ``--store
moto`` or ``rclone``) behind a proxy that delays every request by
``--latency`` seconds; then one ``streamer bench LOCAL S3 --workers 1 2
--rounds 3 --baseline --json`` run measures both, each worker count from a
cold memory cache, in interleaved rounds (the median stands), and the naive
whole-blob path on the same crops. The proxy (and moto) run in this
process, SeaweedFS and rclone in their own; the bench in a child process,
so they do not share its CPU time accounting.

    python -m benchmarks.bench_pipeline [--latency 0.05] [--crops 200] [--workers 1 2]
    python -m benchmarks.bench_pipeline --store moto   # or rclone, or http (a Range file server)

moto reads the whole object for every ranged GET (about 54 ms of server CPU
per 256 KiB GET of a 64 MB object), and that cost, on the same cores as the
bench, weighs on its figures; SeaweedFS and rclone read only the range.

``--split-cpus`` (Linux) keeps the server and the proxy off the bench's
CPUs, as a real object store is: the bench (its parent and decode workers)
runs on the first half of this process's CPUs, the server and the proxy on
the rest. On a 2-CPU machine that is one CPU each, so only ``--workers 1``
means anything there.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import streamer
from benchmarks._report import add_server_argument, write_json
from streamer.cli.bench import print_table
from streamer.demo import DEMO_EPISODES, demo_dataset
from streamer.synth import CODECS
from testkit import s3servers
from testkit.servers import LoopbackServer, file_handler, proxy_handler, upload_tree

BUCKET = "bench"
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench-secret"}


def small_shards(folder: Path, copies: int) -> Path:
    """The demo episodes, ``copies`` times each under different keys, one
    episode per shard (shards close after a record batch: one file a batch).

    Copies make crops land on different blocks, as they do in a big dataset
    (seven short episodes would serve most crops from blocks already cached).
    One episode per shard keeps the objects small: moto reads a whole object
    to answer each ranged GET (real S3 does not), and that server-side cost
    shares this machine's CPUs with the bench.
    """
    demo = streamer.open_dataset(demo_dataset())
    source = folder / "src"
    for copy in range(copies):
        for key, codec, *_ in DEMO_EPISODES:
            path = source / f"copy{copy}" / f"{key}.{CODECS[codec].extension}"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(demo.blob(key).view())
    streamer.pack(source, folder / "demo", shard_size=1, batch_size=1, progress=False)
    return folder / "demo"


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def run_bench(
    command: list[str],
    env: dict[str, str],
    url: str,
    args: argparse.Namespace,
    kind: str,
    server_process_cpu: Callable[[], float] = lambda: 0.0,
) -> None:
    """Run ``streamer bench`` in a child process and report it with the
    server's CPU: this process's (proxy, moto) and the server process's."""
    shown = " ".join(command).replace(url, "$SERVER")
    print(f"$ {shown} --json  # $SERVER: {kind} with {args.latency * 1000:.0f} ms per request")
    module = [sys.executable, "-m", "streamer.cli", *command[1:], "--json"]
    before = _cpu() + server_process_cpu()
    cpus = args.bench_cpus

    def pinned() -> None:  # in the child, before it runs the bench
        if cpus:
            os.sched_setaffinity(0, cpus)

    answer = subprocess.run(module, env=env, check=True, stdout=subprocess.PIPE, preexec_fn=pinned)
    server_cpu = _cpu() + server_process_cpu() - before
    result = json.loads(answer.stdout)
    print_table(result)
    # Every round streamed its crops; the naive baseline's whole-blob
    # downloads (once per dataset) are in the server's CPU time too.
    remote = result["rounds"] * sum(
        r["yielded"] for r in result["runs"] if not r["url"].startswith("/")
    )
    print(
        f"server side ({kind} and the latency proxy): {server_cpu:.1f} s CPU, "
        f"{server_cpu * 1000 / max(remote, 1):.1f} ms per remote crop streamed "
        f"(the baseline's downloads included), {where_server(args)}"
    )
    result["server_cpu_s"] = server_cpu
    name = "pipeline_http" if kind == "HTTP" else "pipeline"
    shape = {"latency_s": args.latency, "store": kind, "split_cpus": bool(args.bench_cpus)}
    print("wrote", write_json(name, {**shape, **result}))


def where_server(args: argparse.Namespace) -> str:
    if not args.bench_cpus:
        return f"on the same {os.cpu_count()} CPUs as the bench"
    server = sorted(os.sched_getaffinity(0))
    return f"on CPUs {server}, the bench on CPUs {sorted(args.bench_cpus)}"


def split_cpus() -> set[int]:
    """Keep this process (the proxy, moto, and the server it starts) on the
    second half of its CPUs; the bench's half. Called before any thread
    starts: a thread takes its CPUs from the one that starts it."""
    if not hasattr(os, "sched_setaffinity"):
        raise SystemExit("--split-cpus needs Linux (sched_setaffinity)")
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        raise SystemExit(f"--split-cpus needs at least 2 CPUs, this process has {len(cpus)}")
    half = len(cpus) // 2
    os.sched_setaffinity(0, cpus[half:])
    return set(cpus[:half])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--crops", type=int, default=200)
    parser.add_argument("--duration", type=float, default=8.0)
    parser.add_argument("--workers", nargs="+", default=["1", "2"])
    add_server_argument(parser, "--store", "http")
    parser.add_argument("--copies", type=int, default=4, help="copies of each demo episode")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (median)")
    parser.add_argument(
        "--split-cpus",
        action="store_true",
        help="the server and proxy on half the CPUs, the bench on the other half (Linux)",
    )
    args = parser.parse_args()
    args.bench_cpus = split_cpus() if args.split_cpus else None
    local = small_shards(Path(tempfile.mkdtemp(prefix="bench-pipeline-")), args.copies)
    if args.store == "http":
        server = LoopbackServer(file_handler(local.parent)).start()
        server.faults.latency = args.latency
        try:
            command = [
                *("streamer", "bench", str(local), f"{server.url}/demo"),
                *("--crops", str(args.crops), "--duration", str(args.duration)),
                *("--workers", *args.workers, "--rounds", str(args.rounds), "--baseline"),
            ]
            run_bench(command, os.environ, server.url, args, "HTTP")
        finally:
            server.stop()
        return
    with s3servers.running(args.store, local.parent / "server", *CREDENTIALS.values()) as (
        endpoint,
        server_cpu,
    ):
        proxy = LoopbackServer(proxy_handler(endpoint)).start()
        try:
            upload_tree(endpoint, local, BUCKET, "demo", *CREDENTIALS.values())
            proxy.faults.latency = args.latency
            command = [
                *("streamer", "bench", str(local), f"s3://{BUCKET}/demo"),
                *("--endpoint-url", proxy.url, "--crops", str(args.crops)),
                *("--duration", str(args.duration), "--workers", *args.workers),
                *("--rounds", str(args.rounds), "--baseline"),
            ]
            env = {**os.environ, **CREDENTIALS, "AWS_DEFAULT_REGION": "us-east-1"}
            run_bench(command, env, proxy.url, args, f"S3 ({args.store})", server_cpu)
        finally:
            proxy.stop()


if __name__ == "__main__":
    main()
