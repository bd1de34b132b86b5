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

Run: ``python -m benchmarks.bench_index [--seconds 120] [--verify-seconds 300,1800]
[--verify-episodes 2] [--json PATH]``.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import tempfile
import time
from collections.abc import Callable

import av
import numpy as np

from streamer import open_dataset, synth
from streamer.formats import extract
from streamer.formats.frames import frame_to_float32
from streamer.index import INDEX_DIR
from streamer.index.table import INDEX_COLUMN
from streamer.write.index import build_index
from streamer.write.pack import pack

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
    with av.open(blob) as container:
        stream = container.streams.audio[0]
        return sum(frame_to_float32(f).shape[1] for f in container.decode(stream))


def index_job(root: str, verify: bool) -> None:
    """What ``streamer index --force [--no-verify]`` does: read each episode
    from its shard, build (and check) its index, write the index shard."""
    report = build_index(root, force=True, verify=verify, progress=False)
    want = "verified" if verify else "unverified"
    assert report.labels[want] == report.episodes > 0, (root, report.labels, report.reasons)


def bench_verify(
    work: str, lengths: list[float], episodes: int
) -> dict[str, dict[str, dict[str, float]]]:
    """Per episode length and codec, one dataset of ``episodes`` episodes:
    the index job without the check and with it, and FFmpeg's full decode of
    the same audio (CPU seconds, best of 3: the machine is shared); the
    check's overhead over the job, and its share of the full decode."""
    results: dict[str, dict[str, dict[str, float]]] = {}
    cpu = time.process_time
    for seconds in lengths:
        rows = {}
        for codec, rate in CODECS.items():
            src = os.path.join(work, f"verify-{seconds:g}-{codec}")
            os.makedirs(src)
            data = synth.encode(synth.signal(seconds, rate, 2), rate, codec)
            for n in range(episodes):
                with open(os.path.join(src, f"{n}.{synth.CODECS[codec].extension}"), "wb") as file:
                    file.write(data)
            root = src + "-ds"
            pack(src, root, progress=False, index=False)
            build = best_of(3, lambda root=root: index_job(root, False), cpu)
            checked = best_of(3, lambda root=root: index_job(root, True), cpu)
            blob = open_dataset(root).blob("0")
            decode = best_of(1, lambda blob=blob: full_decode(blob), cpu) * episodes
            hours = seconds * episodes / 3600
            rows[codec] = {
                "index_s_per_hour": build / hours,
                "index_and_verify_s_per_hour": checked / hours,
                "verify_s_per_hour": (checked - build) / hours,
                "verify_ms_per_episode": (checked - build) / episodes * 1e3,
                "overhead": (checked - build) / build,
                "full_decode_s_per_hour": decode / hours,
                "share_of_full_decode": (checked - build) / decode,
            }
        results[f"{seconds:g}"] = rows
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
        "--json", default=os.path.join(os.path.dirname(__file__), "results", "bench_index.json")
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        extraction = bench_extraction(work, args.seconds)
        lengths = [float(x) for x in args.verify_seconds.split(",") if x]
        verification = bench_verify(work, lengths, args.verify_episodes)
        read = bench_read(work, args.calls)
    print(f"index extraction, {args.seconds:g} s stereo per codec, from a packed local shard")
    print(
        f"{'codec':<8}{'MB':>8}{'index MB/s':>13}{'ffmpeg scan MB/s':>19}{'ratio':>8}{'points':>8}"
    )
    for codec, row in extraction.items():
        print(
            f"{codec:<8}{row['megabytes']:>8.1f}{row['index_mb_s']:>13.0f}"
            f"{row['ffmpeg_scan_mb_s']:>19.0f}{row['speedup']:>7.1f}x{row['points']:>8}"
        )
    for length, rows in verification.items():
        print(
            f"`streamer index` job, {length} s stereo episodes, per hour of audio:"
            " without the check -> with it"
        )
        print(
            f"{'codec':<8}{'index s/h':>11}{'+check s/h':>12}{'overhead':>10}"
            f"{'ms/episode':>12}{'full decode s/h':>17}{'check/decode':>14}"
        )
        for codec, row in rows.items():
            print(
                f"{codec:<8}{row['index_s_per_hour']:>11.3f}{row['verify_s_per_hour']:>12.3f}"
                f"{row['overhead']:>9.0%} {row['verify_ms_per_episode']:>11.1f}"
                f"{row['full_decode_s_per_hour']:>17.2f}{row['share_of_full_decode']:>13.1%}"
            )
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
