"""Seek-index benchmark: extraction MB/s per codec, the cost of checking an
index (``decode.verify``) against building it, and the time to read one
episode's index back from an open local shard.

Baselines from the same run, printed side by side as ratios (the machine is
shared and noisy):

- extraction: FFmpeg's own packet scan (PyAV demuxing every packet of the
  same blob, in C), which is what a "seek by scanning" decoder pays per crop;
- index read: the naive Arrow read of the same row (``as_py()`` on the struct
  scalar, then numpy arrays from the Python lists).

Verification is timed per codec and episode length (``--verify-seconds``) as
the ``streamer index`` job does it (``build_index`` on a dataset of
``--verify-episodes`` episodes: read each episode from its shard, build the
index, write the index shard) without the check and with it, and against
FFmpeg's full decode of the same audio; figures are per hour of audio made of
episodes of that length.

The job's cost is measured where its bytes come from (``--stores``):
``local`` (the shards in the page cache), ``cold`` (the same after
``posix_fadvise(DONTNEED)`` on the dataset's files before each run, so every
byte comes from the disk again) and ``seaweedfs`` (the dataset uploaded to a
SeaweedFS S3 server on loopback: the job's own CPU, and the server's apart).
Each is the in-process ``build_index`` call, which writes the index shards
and the manifest too; ``--cli`` also times ``streamer index`` as a command
(interpreter start and imports included, a fixed cost per run).

Run: ``python -m benchmarks.bench_index [--seconds 120] [--verify-seconds 300,1800]
[--verify-episodes 2] [--stores local,cold,seaweedfs] [--cli] [--json PATH]``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import av
import numpy as np

from streamer import open_dataset, synth
from streamer.formats import extract
from streamer.formats.ffmpeg import open_input
from streamer.formats.frames import frame_to_float32
from streamer.index import INDEX_DIR
from streamer.index.table import INDEX_COLUMN
from streamer.write.index import build_index
from streamer.write.pack import pack
from testkit import s3servers
from testkit.servers import upload_tree

CODECS = {
    "mp3": 44100,
    "vorbis": 44100,
    "opus": 48000,
    "flac": 44100,
    "aac": 44100,
    "alac": 44100,
    "wav": 44100,
}
INDEX_POINTS = 15_000
BUCKET = "bench-index"
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench-secret"}


def best_of(
    repeats: int, work: Callable[[], object], clock: Callable[[], float] = time.perf_counter
) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = clock()
        work()
        best = min(best, clock() - start)
    return best


def ffmpeg_scan(blob: io.RawIOBase) -> int:
    blob.seek(0)
    with av.open(blob) as container:
        return sum(1 for _ in container.demux(container.streams.audio[0]))


def long_mp3(points: int) -> bytes:
    """An mp3 of exactly ``points`` audio frames, made by repeating frames."""
    data = synth.encode(synth.signal(4.0, 44100, 1), 44100, "mp3")
    index = extract(io.BytesIO(data), density=float("inf"))
    first, last = int(index.byte_pos[2]), int(index.byte_pos[-2])
    frames = [data[a:b] for a, b in zip(index.byte_pos[2:-2], index.byte_pos[3:-1], strict=True)]
    assert len({len(f) for f in frames}) <= 2 and first < last
    return b"".join(frames[n % len(frames)] for n in range(points))


def bench_extraction(work: str, seconds: float) -> dict[str, dict[str, float]]:
    src = os.path.join(work, "src")
    os.makedirs(src)
    for codec, rate in CODECS.items():
        samples = synth.signal(seconds, rate, 2)
        with open(os.path.join(src, f"{codec}.{synth.CODECS[codec].extension}"), "wb") as file:
            file.write(synth.encode(samples, rate, codec))
    pack(src, os.path.join(work, "codecs"), progress=False, index=False)
    dataset = open_dataset(os.path.join(work, "codecs"))
    results = {}
    for codec in CODECS:
        blob = dataset.blob(codec)
        megabytes = len(blob) / 1e6
        ours = best_of(3, lambda blob=blob: extract(blob))
        theirs = best_of(3, lambda blob=blob: ffmpeg_scan(blob))
        points = len(extract(blob).sample_pos)
        results[codec] = {
            "megabytes": megabytes,
            "index_mb_s": megabytes / ours,
            "ffmpeg_scan_mb_s": megabytes / theirs,
            "speedup": theirs / ours,
            "points": points,
        }
    return results


def full_decode(blob: io.RawIOBase) -> int:
    blob.seek(0)
    with open_input(blob) as container:
        stream = container.streams.audio[0]
        return sum(frame_to_float32(f).shape[1] for f in container.decode(stream))


def index_job(url: str, verify: bool, options: dict[str, str] | None = None) -> None:
    """What ``streamer index --force [--no-verify]`` does: read each episode
    from its shard, build (and check) its index, write the index shard, then
    the manifest."""
    report = build_index(url, storage_options=options, force=True, verify=verify, progress=False)
    want = "verified" if verify else "unverified"
    assert report.labels[want] == report.episodes > 0, (url, report.labels, report.reasons)


def drop_cache(root: str) -> None:
    """Evict the dataset's files from the page cache (theirs only), so the
    next run reads them from the disk."""
    for folder, _, names in os.walk(root):
        for name in names:
            fd = os.open(os.path.join(folder, name), os.O_RDONLY)
            try:
                os.fdatasync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


@dataclass
class Where:
    """Where the index job reads a dataset from: its URL and options, what
    to do before each run, and the server's CPU seconds so far (0: none)."""

    name: str
    url: str
    options: dict[str, str] | None = None
    before: Callable[[], None] = lambda: None
    server_cpu: Callable[[], float] = lambda: 0.0


def job_cpu(where: Where, verify: bool, repeats: int = 3) -> tuple[float, float]:
    """The index job's CPU seconds (this process: all its threads, system
    time included) and the server's during that run, for the run with the
    least job CPU of ``repeats``."""
    best = (float("inf"), 0.0)
    for _ in range(repeats):
        where.before()
        server, start = where.server_cpu(), time.process_time()
        index_job(where.url, verify, where.options)
        used = time.process_time() - start
        if used < best[0]:
            best = (used, where.server_cpu() - server)
    return best


def cli_cpu(where: Where, verify: bool) -> float:
    """CPU seconds of ``streamer index`` run as a command (its child
    processes' rusage): interpreter start and imports included."""
    env = dict(os.environ)
    command = [sys.executable, "-m", "streamer.cli", "index", where.url, "--force", "--no-progress"]
    if not verify:
        command.append("--no-verify")
    if where.options:
        env.update(CREDENTIALS)
        command += ["--endpoint-url", where.options["endpoint_url"]]
    where.before()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def make_dataset(work: str, seconds: float, codec: str, episodes: int) -> str:
    """A packed dataset of ``episodes`` stereo episodes of ``seconds`` (not indexed)."""
    rate = CODECS[codec]
    src = os.path.join(work, f"verify-{seconds:g}-{codec}")
    os.makedirs(src)
    data = synth.encode(synth.signal(seconds, rate, 2), rate, codec)
    for n in range(episodes):
        with open(os.path.join(src, f"{n}.{synth.CODECS[codec].extension}"), "wb") as file:
            file.write(data)
    root = os.path.join(work, f"datasets-{seconds:g}", codec)
    pack(src, root, progress=False, index=False)
    return root


@contextlib.contextmanager
def places(
    work: str, roots: dict[str, str], stores: list[str]
) -> Iterator[dict[str, dict[str, Where]]]:
    """For each store kind, codec -> where its dataset is read from (the
    S3 server runs, the datasets uploaded, until the block ends)."""
    kinds = [s for s in stores if s in s3servers.KINDS or s == "moto"]
    local = {
        "local": {c: Where("local", r) for c, r in roots.items()},
        "cold": {c: Where("cold", r, before=lambda r=r: drop_cache(r)) for c, r in roots.items()},
    }
    chosen = {s: local[s] for s in stores if s in local}
    if not kinds:
        yield chosen
        return
    (kind,) = kinds
    keys = CREDENTIALS.values()
    with s3servers.running(kind, os.path.join(work, kind), *keys) as (endpoint, server_cpu):
        (parent,) = {os.path.dirname(root) for root in roots.values()}
        upload_tree(endpoint, parent, BUCKET, "", *keys)
        options = {"endpoint_url": endpoint, "key": CREDENTIALS["AWS_ACCESS_KEY_ID"]}
        options |= {"secret": CREDENTIALS["AWS_SECRET_ACCESS_KEY"], "region_name": "us-east-1"}
        chosen[kind] = {
            c: Where(kind, f"s3://{BUCKET}/{c}", options, server_cpu=server_cpu) for c in roots
        }
        yield chosen


def bench_verify(
    work: str, lengths: list[float], episodes: int, stores: list[str], cli: bool
) -> dict[str, dict[str, dict[str, dict[str, float]]]]:
    """Per episode length, store and codec, one dataset of ``episodes``
    episodes: the index job without the check and with it (CPU seconds, best
    of 3: the machine is shared), the check's overhead over the job, the
    server's CPU (S3), and for scale the parse alone (``formats.extract`` of
    an episode in memory) and FFmpeg's full decode of the same audio; per
    hour of audio."""
    results: dict[str, dict[str, dict[str, dict[str, float]]]] = {}
    for seconds in lengths:
        roots = {codec: make_dataset(work, seconds, codec, episodes) for codec in CODECS}
        hours = seconds * episodes / 3600
        decode, parse = {}, {}
        for codec, root in roots.items():
            blob = open_dataset(root).blob("0")
            decode[codec] = best_of(1, lambda b=blob: full_decode(b), time.process_time)
            parse[codec] = best_of(3, lambda b=blob: extract(b), time.process_time)
        per_store: dict[str, dict[str, dict[str, float]]] = {}
        with places(work, roots, stores) as where:
            for store, codecs in where.items():
                rows = {}
                for codec, place in codecs.items():
                    build, build_server = job_cpu(place, False)
                    checked, checked_server = job_cpu(place, True)
                    row = {
                        "parse_s_per_hour": parse[codec] * episodes / hours,
                        "index_s_per_hour": build / hours,
                        "index_and_verify_s_per_hour": checked / hours,
                        "verify_s_per_hour": (checked - build) / hours,
                        "verify_ms_per_episode": (checked - build) / episodes * 1e3,
                        "overhead": (checked - build) / build,
                        "server_s_per_hour": build_server / hours,
                        "server_with_check_s_per_hour": checked_server / hours,
                        "full_decode_s_per_hour": decode[codec] * episodes / hours,
                        "share_of_full_decode": (checked - build) / (decode[codec] * episodes),
                    }
                    if cli:
                        row["cli_s_per_hour"] = cli_cpu(place, False) / hours
                        row["cli_with_check_s_per_hour"] = cli_cpu(place, True) / hours
                    rows[codec] = row
                per_store[store] = rows
        results[f"{seconds:g}"] = per_store
    return results


def bench_read(work: str, calls: int) -> dict[str, float]:
    src = os.path.join(work, "long")
    os.makedirs(src)
    with open(os.path.join(src, "episode.mp3"), "wb") as file:
        file.write(long_mp3(INDEX_POINTS))
    root = os.path.join(work, "long-ds")
    pack(src, root, progress=False, index=False)
    build_index(root, density=float("inf"), progress=False)
    dataset = open_dataset(root)
    index = dataset.seek_index("episode")
    assert len(index.sample_pos) == INDEX_POINTS, len(index.sample_pos)
    shard = dataset.shard(dataset.shard_names[0], INDEX_DIR)
    column = shard.column(INDEX_COLUMN)

    def ours() -> None:
        for _ in range(calls):
            dataset.seek_index("episode")

    def naive() -> None:
        for _ in range(calls // 100):
            row = column[0].as_py()
            np.array(row["sample_pos"], dtype=np.int64), np.array(row["byte_pos"], dtype=np.int64)

    ours_us = best_of(5, ours) / calls * 1e6
    naive_us = best_of(3, naive) / (calls // 100) * 1e6
    return {
        "points": INDEX_POINTS,
        "read_us": ours_us,
        "naive_as_py_us": naive_us,
        "speedup": naive_us / ours_us,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--seconds", type=float, default=120.0, help="audio per codec (default 120)"
    )
    parser.add_argument("--calls", type=int, default=20_000, help="index reads to time")
    parser.add_argument(
        "--verify-seconds",
        default="300,1800",
        help="episode lengths (s, comma list) to time the index check on (default 300,1800)",
    )
    parser.add_argument(
        "--verify-episodes", type=int, default=2, help="episodes per checked dataset (default 2)"
    )
    parser.add_argument(
        "--stores",
        default="local,cold,seaweedfs",
        help="where the index job reads from: local, cold, and one S3 server of "
        f"{', '.join(['moto', *s3servers.KINDS])} (comma list; default local,cold,seaweedfs)",
    )
    parser.add_argument(
        "--cli", action="store_true", help="also time `streamer index` as a command"
    )
    parser.add_argument(
        "--parts",
        default="extraction,verify,read",
        help="what to measure (comma list; default extraction,verify,read)",
    )
    parser.add_argument(
        "--json", default=os.path.join(os.path.dirname(__file__), "results", "bench_index.json")
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        parts = set(args.parts.split(","))
        extraction = bench_extraction(work, args.seconds) if "extraction" in parts else {}
        lengths = [float(x) for x in args.verify_seconds.split(",") if x]
        stores = [x for x in args.stores.split(",") if x]
        verification = (
            bench_verify(work, lengths, args.verify_episodes, stores, args.cli)
            if "verify" in parts
            else {}
        )
        read = bench_read(work, args.calls) if "read" in parts else None
    if extraction:
        print(f"index extraction, {args.seconds:g} s stereo per codec, from a packed local shard")
        print(
            f"{'codec':<8}{'MB':>8}{'index MB/s':>13}{'ffmpeg scan MB/s':>19}{'ratio':>8}"
            f"{'points':>8}"
        )
    for codec, row in extraction.items():
        print(
            f"{codec:<8}{row['megabytes']:>8.1f}{row['index_mb_s']:>13.0f}"
            f"{row['ffmpeg_scan_mb_s']:>19.0f}{row['speedup']:>7.1f}x{row['points']:>8}"
        )
    for length, per_store in verification.items():
        for store, rows in per_store.items():
            print(
                f"`streamer index` job, {length} s stereo episodes, read from {store},"
                " CPU per hour of audio: without the check -> with it"
            )
            print(
                f"{'codec':<8}{'parse s/h':>11}{'index s/h':>11}{'+check s/h':>12}{'overhead':>10}"
                f"{'ms/episode':>12}{'server s/h':>12}{'full decode s/h':>17}"
                f"{'check/decode':>14}{'cli s/h':>16}"
            )
            for codec, row in rows.items():
                cli = (
                    f"{row['cli_s_per_hour']:>7.2f}->{row['cli_with_check_s_per_hour']:<6.2f}"
                    if "cli_s_per_hour" in row
                    else ""
                )
                print(
                    f"{codec:<8}{row['parse_s_per_hour']:>11.3f}"
                    f"{row['index_s_per_hour']:>11.3f}{row['verify_s_per_hour']:>12.3f}"
                    f"{row['overhead']:>9.0%} {row['verify_ms_per_episode']:>11.1f}"
                    f"{row['server_s_per_hour']:>12.3f}{row['full_decode_s_per_hour']:>17.2f}"
                    f"{row['share_of_full_decode']:>13.1%}  {cli}"
                )
    if read:
        print(
            f"index read ({read['points']} points, open local shard): {read['read_us']:.1f} us "
            f"vs naive as_py {read['naive_as_py_us']:.0f} us ({read['speedup']:.0f}x)"
        )
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    with open(args.json, "w") as file:
        report = {
            "machine": platform.platform(),
            "extraction": extraction,
            "verification": verification,
            "read": read,
        }
        json.dump(report, file, indent=2)
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
