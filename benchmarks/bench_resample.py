"""Resamplers on this project's work: 8 s crops to 16 kHz, mono and stereo, in one run.

Each candidate resamples the same crops (a resampler's window around 8 s of
a test signal at 44.1 and 48 kHz, the way ``decode/resample.py`` feeds it);
CPU time per crop is the median of ``--repeats`` passes, and the ratio is
over python-soxr's default quality measured in the same run. The candidates:
FFmpeg's libswresample through PyAV (the resampler streamer used before),
python-soxr at its four quality presets (streamer offers HQ and VHQ, the
two that keep the crop contract), and scipy's ``resample_poly`` (only when
scipy is installed: it is not a dependency).

    python -m benchmarks.bench_resample [--repeats 20] [--seconds 8]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from math import gcd

import av
import numpy as np

from benchmarks._report import write_json
from streamer.decode.resample import DEFAULT_QUALITY, resample
from streamer.synth import signal

TARGET = 16000


def swresample(samples: np.ndarray, source: int, target: int) -> np.ndarray:
    """FFmpeg's resampler in one pass, flushed (streamer's resampler before soxr)."""
    layout = {1: "mono", 2: "stereo"}[samples.shape[0]]
    resampler = av.AudioResampler(format="fltp", layout=layout, rate=target)
    frame = av.AudioFrame.from_ndarray(samples, format="fltp", layout=layout)
    frame.sample_rate = source
    pieces = [out.to_ndarray() for out in resampler.resample(frame)]
    pieces += [out.to_ndarray() for out in resampler.resample(None)]
    return np.concatenate(pieces, axis=1)


def candidates() -> dict[str, Callable[[np.ndarray, int, int], np.ndarray]]:
    found: dict[str, Callable[[np.ndarray, int, int], np.ndarray]] = {
        "libswresample (PyAV)": swresample
    }
    for quality in ("LQ", "MQ", "HQ", "VHQ"):
        found[f"soxr {quality}"] = lambda x, s, t, q=quality: resample(x, s, t, quality=q)
    try:
        from scipy.signal import resample_poly
    except ImportError:
        print("scipy is not installed: resample_poly is left out")
    else:

        def poly(x: np.ndarray, s: int, t: int) -> np.ndarray:
            d = gcd(s, t)
            return resample_poly(x, t // d, s // d, axis=1).astype(np.float32)

        found["scipy resample_poly"] = poly
    return found


def cpu_per_call(
    run: Callable[[np.ndarray, int, int], np.ndarray], x: np.ndarray, rate: int, repeats: int
) -> float:
    """Median CPU seconds of one call."""
    run(x, rate, TARGET)  # warm: imports, filter design caches
    times = []
    for _ in range(repeats):
        began = time.process_time()
        run(x, rate, TARGET)
        times.append(time.process_time() - began)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=8.0)
    args = parser.parse_args()
    found = candidates()
    reference = f"soxr {DEFAULT_QUALITY}"
    rows = []
    for rate in (44100, 48000):
        for channels in (1, 2):
            x = signal(args.seconds, rate, channels, seed=1)
            cost = {name: cpu_per_call(run, x, rate, args.repeats) for name, run in found.items()}
            for name, seconds in cost.items():
                rows.append(
                    {
                        "rate": rate,
                        "channels": channels,
                        "resampler": name,
                        "cpu_ms": seconds * 1e3,
                        "vs_default": seconds / cost[reference] if cost[reference] else None,
                    }
                )
    print(f"{args.seconds:g} s crops to {TARGET} Hz, CPU ms per crop (median of {args.repeats})")
    print(f"{'input':<14}{'resampler':<24}{'cpu ms':>8}{'vs ' + reference:>14}")
    for row in rows:
        where = f"{row['rate']} Hz x{row['channels']}"
        print(f"{where:<14}{row['resampler']:<24}{row['cpu_ms']:>8.2f}{row['vs_default']:>13.2f}x")
    print("wrote", write_json("resample", {"args": vars(args), "rows": rows}))


if __name__ == "__main__":
    main()
