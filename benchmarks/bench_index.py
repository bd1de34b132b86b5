"""Seek-index benchmark: extraction MB/s per codec, the cost of checking an
index (``decode.verify``) against building it, and the time to read one
episode's index back from an open local shard.

Baselines from the same run, printed side by side as ratios (the machine is
shared and noisy):

- extraction: FFmpeg's own packet scan (PyAV demuxing every packet of the
  same blob, in C), which is what a "seek by scanning" decoder pays per crop;
- index read: the naive Arrow read of the same row (``as_py()`` on the struct
  scalar, then numpy arrays from the Python lists).

Verification is timed per codec and episode length (``--verify-seconds``):
building the index (``extract``) against building and checking it
(``choose_index``), and FFmpeg's full decode for scale; overhead is per hour
of audio made of episodes of that length.

Run: ``python -m benchmarks.bench_index [--seconds 120] [--verify-seconds 300,1800] [--json PATH]``.
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
from streamer.decode.verify import choose_index
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


def bench_verify(work: str, lengths: list[float]) -> dict[str, dict[str, dict[str, float]]]:
    """Per episode length and codec: index build, build + check, full decode
    (CPU seconds per episode, best of 3: the machine is shared), and the
    check's overhead."""
    results: dict[str, dict[str, dict[str, float]]] = {}
    for seconds in lengths:
        src = os.path.join(work, f"verify-{seconds:g}")
        os.makedirs(src)
        for codec, rate in CODECS.items():
            samples = synth.signal(seconds, rate, 2)
            with open(os.path.join(src, f"{codec}.{synth.CODECS[codec].extension}"), "wb") as file:
                file.write(synth.encode(samples, rate, codec))
        root = os.path.join(work, f"verify-{seconds:g}-ds")
        pack(src, root, progress=False, index=False)
        dataset = open_dataset(root)
        rows = {}
        for codec in CODECS:
            blob = dataset.blob(codec)
            assert choose_index(blob, key=codec).verdict == "verified", codec
            cpu = time.process_time
            build = best_of(3, lambda blob=blob: extract(blob), cpu)
            checked = best_of(3, lambda blob=blob, codec=codec: choose_index(blob, key=codec), cpu)
            decode = best_of(1, lambda blob=blob: full_decode(blob), cpu)
            rows[codec] = {
                "index_s": build,
                "index_and_verify_s": checked,
                "full_decode_s": decode,
                "overhead": (checked - build) / build,
                "verify_s_per_hour": (checked - build) * 3600 / seconds,
                "index_s_per_hour": build * 3600 / seconds,
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
        "--json", default=os.path.join(os.path.dirname(__file__), "results", "bench_index.json")
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        extraction = bench_extraction(work, args.seconds)
        lengths = [float(x) for x in args.verify_seconds.split(",") if x]
        verification = bench_verify(work, lengths)
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
            f"index check, {length} s stereo episodes (per hour of audio: build -> build + check)"
        )
        print(
            f"{'codec':<8}{'build s/h':>11}{'check s/h':>11}{'overhead':>10}{'full decode s/h':>17}"
        )
        for codec, row in rows.items():
            hour = 3600 / float(length)
            print(
                f"{codec:<8}{row['index_s_per_hour']:>11.3f}{row['verify_s_per_hour']:>11.3f}"
                f"{row['overhead']:>9.0%}{row['full_decode_s'] * hour:>17.2f}"
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
