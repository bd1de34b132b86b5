"""What a crop costs without an index: the fallback decodes from the episode's
first frame, so its time grows with the crop's position; next to it, the same
crop through the seek index.

    python -m benchmarks.bench_fallback [--minutes 10] [--duration 4] [--repeats 3]
    python -m benchmarks.bench_fallback --quick      # 2-minute episodes

Per codec and crop position (fractions of the episode): milliseconds per crop
(best of ``--repeats``) through ``decode_range`` (the fallback) and through
``Dataset.read_crop`` (the index), and the fallback's decode speed (seconds
of audio decoded per second of CPU, from the last position).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable

from benchmarks._report import write_json
from benchmarks.episodes import BENCH_CODECS, build_dataset
from streamer.dataset.dataset import Dataset
from streamer.decode.fallback import decode_range

POSITIONS = (0.0, 0.1, 0.25, 0.5, 1.0)


def best_ms(call: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        call()
        times.append(time.perf_counter() - began)
    return min(times) * 1000


def measure(dataset: Dataset, codec: str, args: argparse.Namespace) -> dict[str, object]:
    blob = dataset.blob(codec)
    index = dataset.seek_index(codec)
    length = index.num_samples / index.sample_rate
    rows = []
    for fraction in POSITIONS:
        start = min(fraction * length, length - args.duration)
        end = start + args.duration
        fallback = best_ms(lambda: decode_range(blob, start, end), args.repeats)  # noqa: B023
        indexed = best_ms(lambda: dataset.read_crop(codec, start, end), args.repeats)  # noqa: B023
        rows.append({"start_s": start, "fallback_ms": fallback, "index_ms": indexed})
    last = rows[-1]
    speed = (last["start_s"] + args.duration) / (last["fallback_ms"] / 1000)
    return {"codec": codec, "seconds": length, "rows": rows, "x_realtime": speed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="episode length")
    parser.add_argument("--duration", type=float, default=4.0, help="crop seconds")
    parser.add_argument("--repeats", type=int, default=3, help="best of this many")
    parser.add_argument("--codecs", nargs="+", default=list(BENCH_CODECS), help="which codecs")
    parser.add_argument("--quick", action="store_true", help="2-minute episodes, best of 1")
    args = parser.parse_args()
    if args.quick:
        args.minutes, args.repeats = 2.0, 1
    results = []
    with tempfile.TemporaryDirectory() as folder:
        dataset = build_dataset(folder, args.minutes)
        print(
            f"{args.duration:g} s crops out of {args.minutes:g}-minute episodes, one core: "
            f"ms per crop, fallback (from the start) / index, by crop start"
        )
        print(
            f"{'codec':<8}"
            + "".join(f"{f'{p:.0%}':>16}" for p in POSITIONS)
            + f"{'x realtime':>12}"
        )
        for codec in args.codecs:
            dataset.read_crop(codec, 0.0, 1.0)  # open the shards, load the decoder
            result = measure(dataset, codec, args)
            results.append(result)
            cells = "".join(
                f"{row['fallback_ms']:>9.0f} /{row['index_ms']:>5.1f}" for row in result["rows"]
            )
            print(f"{codec:<8}{cells}{result['x_realtime']:>12.0f}")
    print(f"wrote {write_json('fallback', {'args': vars(args), 'codecs': results})}")


if __name__ == "__main__":
    main()
