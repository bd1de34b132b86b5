"""``workers=0`` against a plain ``read_crop`` loop on the same crops, per codec.

A Streamer with ``workers=0`` decodes in the calling process (the store
loop's thread plans, a thread decodes); it should cost no more CPU than the
loop a user would write without it: ``dataset.read_crop`` for each crop of
the same plan, one after the other. Both run on the same dataset object
(shards open, page cache warm), alternating round by round so that a change
in the machine's load falls on both; the ratio of their CPU (this process,
every thread) is printed per codec, its median over the rounds, and the
crop-weighted total.

    python -m benchmarks.bench_in_process [--minutes 10] [--crops 200] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import tempfile
from typing import Any

from benchmarks._report import write_json
from benchmarks.bench_limit import SETTINGS, build, load
from benchmarks.episodes import BENCH_CODECS
from streamer.dataset.dataset import Dataset
from streamer.pipeline.bench import BenchConfig, bench_streamer


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def plain_loop(dataset: Dataset, config: BenchConfig) -> tuple[float, int]:
    """CPU seconds of ``read_crop`` over the bench plan's crops, and their count."""
    s = bench_streamer(dataset, config, workers=0)
    requests = [s.request(position)[1] for position in range(len(s))]
    began = cpu_seconds()
    for r in requests:
        dataset.read_crop(r.key, r.start, r.end, sample_rate=r.sample_rate, mono=r.mono, pad=r.pad)
    return cpu_seconds() - began, len(requests)


def streamed(dataset: Dataset, config: BenchConfig) -> tuple[float, int]:
    """CPU seconds of a ``workers=0`` Streamer over the same crops, and the crops it yielded."""
    s = bench_streamer(dataset, config, workers=0)
    with s:
        began = cpu_seconds()
        count = sum(1 for _ in s)
        return cpu_seconds() - began, count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--crops", type=int, default=200, help="crops per codec and run")
    parser.add_argument("--duration", type=float, default=8.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--codecs", nargs="+", default=list(BENCH_CODECS))
    args = parser.parse_args()
    before = load()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as folder:
        datasets = [Dataset(p) for p in build(folder, args.codecs, args.minutes, 1)]
        for setting, extra in SETTINGS.items():
            config = BenchConfig(
                duration=args.duration,
                crops=args.crops,
                sample_rate=16000 if extra else None,
                mono=bool(extra),
            )
            for codec, dataset in zip(args.codecs, datasets, strict=True):
                plain_loop(dataset, BenchConfig(duration=args.duration, crops=5))  # warm
                ratios, plain_ms, ours_ms = [], [], []
                for _ in range(args.rounds):
                    plain, n = plain_loop(dataset, config)
                    ours, m = streamed(dataset, config)
                    if m != n:
                        raise SystemExit(f"{codec}: the Streamer yielded {m} of {n} crops")
                    plain_ms.append(plain * 1000 / n)
                    ours_ms.append(ours * 1000 / n)
                    ratios.append(ours / plain)
                rows.append(
                    {
                        "codec": codec,
                        "setting": setting,
                        "crops": n,
                        "plain_ms": statistics.median(plain_ms),
                        "workers0_ms": statistics.median(ours_ms),
                        "ratio": statistics.median(ratios),
                        "ratios": ratios,
                    }
                )
    after = load()
    print(
        f"{args.duration:g} s crops, {args.crops} per codec, {args.rounds} rounds; load "
        f"average before {before}, after {after} on {os.cpu_count()} CPUs"
    )
    print(
        f"{'codec':<8}{'setting':<10}{'read_crop ms':>13}{'workers=0 ms':>13}{'ratio':>7}  rounds"
    )
    for row in rows:
        shown = " ".join(f"{r:.2f}" for r in row["ratios"])
        print(
            f"{row['codec']:<8}{row['setting']:<10}{row['plain_ms']:>13.2f}"
            f"{row['workers0_ms']:>13.2f}{row['ratio']:>6.2f}x  {shown}"
        )
    for setting in SETTINGS:
        mine = [r for r in rows if r["setting"] == setting]
        plain = sum(r["plain_ms"] * r["crops"] for r in mine)
        ours = sum(r["workers0_ms"] * r["crops"] for r in mine)
        print(f"{'all':<8}{setting:<10}{'':>13}{'':>13}{ours / plain:>6.2f}x")
    print("wrote", write_json("in_process", {"args": vars(args), "rows": rows}))


if __name__ == "__main__":
    main()
