"""Crop throughput per codec on one core: the naive path, streamer, and the
pure decode of exactly the crop's frames (the physical limit), in one run.

    python -m benchmarks.bench_decode [--minutes 60] [--crops 30] [--duration 8]
    python -m benchmarks.bench_decode --quick      # 10-minute episodes, 10 crops

- naive: copy the whole blob out of the shard, open it with PyAV, seek,
  decode, slice (what training loops do today);
- streamer: ``Dataset.read_crop`` (seek index, byte plan, bare decoder);
- pure decode: the packets overlapping the crop, already demuxed in memory,
  through a fresh decoder (no pre-roll, no I/O, no seeking); for WAV the
  numpy conversion of the crop's bytes.

Every method reads the same crops (local shards, page cache warm).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable

import numpy as np

from benchmarks._report import write_json
from benchmarks.episodes import BENCH_CODECS, build_dataset, random_crops
from streamer.dataset.dataset import Dataset
from streamer.pipeline.bench import naive_crop
from streamer.pipeline.limit import PureDecode


def pure_pcm(dataset: Dataset, key: str) -> Callable[[float, float], np.ndarray]:
    index = dataset.seek_index(key)
    blob = dataset.blob(key)

    def decode(start: float, end: float) -> np.ndarray:
        first, last = round(start * index.sample_rate), round(end * index.sample_rate)
        raw = blob.read_range(index.data_start + first * 2, (last - first) * 2)
        return (np.frombuffer(raw, "<i2").astype(np.float64) / 32768).astype(np.float32)[None]

    return decode


def timed(method: Callable[[float, float], object], crops: list[tuple[float, float]]) -> float:
    began = time.perf_counter()
    for start, end in crops:
        method(start, end)
    return (time.perf_counter() - began) / len(crops)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=60.0, help="episode length")
    parser.add_argument("--crops", type=int, default=30, help="crops per codec")
    parser.add_argument("--duration", type=float, default=8.0, help="crop seconds")
    parser.add_argument("--naive-crops", type=int, default=5, help="crops for the naive path")
    parser.add_argument("--quick", action="store_true", help="10-minute episodes, 10 crops")
    args = parser.parse_args()
    if args.quick:
        args.minutes, args.crops, args.naive_crops = 10.0, 10, 3
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        dataset = build_dataset(folder, args.minutes)
        print(
            f"{args.duration:g} s crops out of {args.minutes:g}-minute episodes, local mmap, "
            f"one core; crops/s (higher is better)"
        )
        print(
            f"{'codec':<8}{'naive':>9}{'streamer':>10}{'pure':>9}"
            f"{'stream/pure':>13}{'vs naive':>10}{'kB/crop':>9}{'MB/episode':>12}"
        )
        for codec in BENCH_CODECS:
            rows.append(measure(dataset, codec, args))
            row = rows[-1]
            print(
                f"{codec:<8}{1 / row['naive_s']:>9.1f}{1 / row['streamer_s']:>10.1f}"
                f"{1 / row['pure_s']:>9.1f}{row['streamer_s'] / row['pure_s']:>12.2f}x"
                f"{row['naive_s'] / row['streamer_s']:>9.1f}x{row['planned_bytes'] / 1e3:>9.0f}"
                f"{row['episode_bytes'] / 1e6:>12.1f}"
            )
    print(f"wrote {write_json('decode', {'args': vars(args), 'rows': rows})}")


def measure(dataset: Dataset, codec: str, args: argparse.Namespace) -> dict[str, object]:
    key = codec
    info = dataset.info(key)
    crops = random_crops(dataset, key, args.crops, args.duration)
    blob = dataset.blob(key)
    pure = pure_pcm(dataset, key) if codec == "wav" else PureDecode(bytes(blob.view()))

    def naive(start: float, end: float) -> object:
        return naive_crop(bytes(dataset.blob(key).view()), start, end)

    def streamer(start: float, end: float) -> object:
        return dataset.read_crop(key, start, end)

    streamer(*crops[0]), pure(*crops[0])  # warm up: open shards, load decoders
    before = dataset.decode_stats.planned_bytes
    streamer_s = timed(streamer, crops)
    planned = (dataset.decode_stats.planned_bytes - before) / len(crops)
    return {
        "codec": codec,
        "episode_bytes": info["num_bytes"],
        "planned_bytes": planned,
        "naive_s": timed(naive, crops[: args.naive_crops]),
        "streamer_s": streamer_s,
        "pure_s": timed(pure, crops),
    }


if __name__ == "__main__":
    main()
