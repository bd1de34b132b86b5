"""Episode length scaling: a crop out of a 36-hour episode costs what one out
of a 1-hour episode costs (bytes read and time), per codec, in one run.

    python -m benchmarks.bench_scaling [--hours 1 36] [--crops 20] [--codecs mp3 opus aac]
    python -m benchmarks.bench_scaling --quick      # 1 h vs 4 h, 10 crops

Episodes are built by remuxing a short encode (``benchmarks/episodes.py``);
the long ones take a few GB of disk in a temporary directory.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time

from benchmarks._report import write_json
from benchmarks.episodes import pack_episodes
from streamer.dataset.dataset import Dataset


def build(folder: str, codecs: list[str], hours: list[float]) -> Dataset:
    episodes = [
        (f"{codec}-{length:g}h", codec, length * 3600) for codec in codecs for length in hours
    ]
    return pack_episodes(folder, episodes)


def per_crop(dataset: Dataset, key: str, crops: int, duration: float) -> tuple[float, float]:
    """(median seconds, mean planned bytes) of random crops over the whole episode."""
    index = dataset.seek_index(key)
    length = index.num_samples / index.sample_rate
    rng = random.Random(key.split("-")[0])
    starts = [rng.uniform(0, length - duration) for _ in range(crops)]
    dataset.read_crop(key, starts[0], starts[0] + duration)  # open shards and decoders
    before = dataset.decode_stats.planned_bytes
    times = []
    for start in starts:
        began = time.perf_counter()
        dataset.read_crop(key, start, start + duration)
        times.append(time.perf_counter() - began)
    return statistics.median(times), (dataset.decode_stats.planned_bytes - before) / crops


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hours", type=float, nargs=2, default=[1.0, 36.0])
    parser.add_argument("--crops", type=int, default=20)
    parser.add_argument("--duration", type=float, default=8.0)
    parser.add_argument("--codecs", nargs="+", default=["mp3", "opus", "aac"])
    parser.add_argument("--quick", action="store_true", help="1 h vs 4 h, 10 crops")
    args = parser.parse_args()
    if args.quick:
        args.hours, args.crops = [1.0, 4.0], 10
    short, long = args.hours
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        dataset = build(folder, args.codecs, [short, long])
        print(f"{args.duration:g} s crops, {short:g} h vs {long:g} h episodes, local mmap")
        print(
            f"{'codec':<7}{'ms ' + f'{short:g}h':>10}{'ms ' + f'{long:g}h':>10}{'time ratio':>12}"
            f"{'kB ' + f'{short:g}h':>10}{'kB ' + f'{long:g}h':>10}{'bytes ratio':>13}"
        )
        for codec in args.codecs:
            t_short, b_short = per_crop(dataset, f"{codec}-{short:g}h", args.crops, args.duration)
            t_long, b_long = per_crop(dataset, f"{codec}-{long:g}h", args.crops, args.duration)
            rows.append(
                {
                    "codec": codec,
                    "short_s": t_short,
                    "long_s": t_long,
                    "short_bytes": b_short,
                    "long_bytes": b_long,
                }
            )
            print(
                f"{codec:<7}{t_short * 1e3:>10.1f}{t_long * 1e3:>10.1f}{t_long / t_short:>11.2f}x"
                f"{b_short / 1e3:>10.0f}{b_long / 1e3:>10.0f}{b_long / b_short:>12.2f}x"
            )
    print(f"wrote {write_json('scaling', {'args': vars(args), 'rows': rows})}")


if __name__ == "__main__":
    main()
