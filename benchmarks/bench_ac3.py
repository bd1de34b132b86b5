"""AC-3 and E-AC-3 crops by position: the seek index's plan (0.1 s of
pre-roll, their dither seeded per frame) against decoding from the first
packet (what their crops did before: a pre-roll longer than the episode), in one run.

    python -m benchmarks.bench_ac3 [--minutes 30] [--repeats 3]

Per codec and container (raw, through the generic index, and MP4, native)
and crop position (fractions of the episode): milliseconds per 1 s crop
(best of ``--repeats``) both ways and their ratio, and whether the two
crops are identical (they must be: the reference is the full decode).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import av
import numpy as np

from benchmarks._report import write_json
from streamer.dataset.dataset import Dataset, open_dataset
from streamer.decode.crop import CropRequest, read_crop
from streamer.write.pack import pack

POSITIONS = (0.01, 0.5, 0.99)
FILES = {"ac3-raw": ("ac3", "ac3"), "ac3-mp4": ("ac3", "mp4"), "eac3-mp4": ("eac3", "mp4")}
RATE = 48000


def encode(path: Path, codec: str, container: str, minutes: float) -> None:
    """Quiet stereo tones in noise (zero-bit mantissas: dither to place)."""
    rng = np.random.default_rng(0)
    with av.open(str(path), "w", format=container) as output:
        stream = output.add_stream(codec, rate=RATE, layout="stereo")
        step = 1536 * 100
        for first in range(0, round(minutes * 60 * RATE), step):
            t = np.arange(first, first + step) / RATE
            x = 0.05 * np.sin(2 * np.pi * 220 * t) + 0.01 * rng.standard_normal(step)
            frame = av.AudioFrame.from_ndarray(
                np.stack([x, np.roll(x, 7)]).astype(np.float32), format="fltp", layout="stereo"
            )
            frame.sample_rate, frame.pts = RATE, first
            for packet in stream.encode(frame):
                output.mux(packet)
        for packet in stream.encode(None):
            output.mux(packet)


def best_ms(dataset: Dataset, request: CropRequest, repeats: int) -> tuple[float, np.ndarray]:
    times, audio = [], None
    for _ in range(repeats):
        began = time.perf_counter()
        audio = read_crop(dataset.episode(request.key), request).audio
        times.append(time.perf_counter() - began)
    assert audio is not None
    return min(times) * 1000, audio


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="episode length")
    parser.add_argument("--repeats", type=int, default=3, help="best of")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as work:
        source = Path(work) / "src"
        source.mkdir()
        for key, (codec, container) in FILES.items():
            encode(source / f"{key}.{container}", codec, container, args.minutes)
        pack(source, Path(work) / "ds", progress=False)
        dataset = open_dataset(Path(work) / "ds")
        print(f"{args.minutes:g}-minute stereo episodes at {RATE} Hz, 1 s crops")
        print(
            f"{'file':10} {'index':>9} {'position':>8} {'plan ms':>9} {'from start ms':>14} "
            f"{'ratio':>7}  identical"
        )
        for key in FILES:
            index = dataset.seek_index(key)
            duration = dataset.info(key)["duration"]
            for position in POSITIONS:
                start = min(position * duration, duration - 1.0)
                request = CropRequest(key, start, start + 1.0)
                planned, audio = best_ms(dataset, request, args.repeats)
                whole = CropRequest(key, start, start + 1.0, preroll=duration + 1.0)
                from_start, reference = best_ms(dataset, whole, args.repeats)
                same = np.array_equal(audio, reference)
                print(
                    f"{key:10} {index.verdict:>9} {position:8.2f} {planned:9.1f} "
                    f"{from_start:14.1f} {from_start / planned:7.0f}x  {same}"
                )
                rows.append(
                    {
                        "file": key,
                        "verdict": index.verdict,
                        "position": position,
                        "plan_ms": planned,
                        "from_start_ms": from_start,
                        "identical": same,
                    }
                )
    print("wrote", write_json("bench_ac3", {"minutes": args.minutes, "rows": rows}))


if __name__ == "__main__":
    main()
