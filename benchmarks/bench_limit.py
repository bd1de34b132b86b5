"""The pipeline against the physical limit, per codec: one ``streamer bench`` run per setting.

Long episodes (``--minutes``, ``--episodes`` per codec, built by
``episodes.py``), one dataset per codec; then ``streamer bench`` over all of
them, at the native rate and resampled to 16 kHz mono, with 1 and 2 decode
workers. Per codec: CPU per crop (parent and workers), the limit (the pure
decode of the same crops, measured in the same run), their ratio, the
parent's own CPU per crop, and crops/s at 2 workers over 1; then the same
aggregated (total CPU over total limit; crops/s over all codecs' crops at 2
workers over 1: the goal is 1.85x on 2 cores). The machine's load average is
printed before and after: CPU time is what to compare on a shared machine,
and the 2-worker scaling means something only on an otherwise idle one.

    python -m benchmarks.bench_limit [--minutes 23] [--episodes 2] [--crops 300]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from typing import Any

from benchmarks._report import write_json
from benchmarks.episodes import BENCH_CODECS, pack_episodes

SETTINGS = {"native": [], "16k mono": ["--sample-rate", "16000", "--mono"]}


def build(folder: str, codecs: list[str], minutes: float, episodes: int) -> list[str]:
    """One dataset per codec; their paths, in ``codecs`` order."""
    paths = []
    for codec in codecs:
        where = os.path.join(folder, codec)
        os.makedirs(where)
        keys = [(f"{codec}-{n}", codec, minutes * 60) for n in range(episodes)]
        paths.append(pack_episodes(where, keys).url)
    return paths


def run_bench(paths: list[str], args: argparse.Namespace, extra: list[str]) -> dict[str, Any]:
    command = [sys.executable, "-m", "streamer.cli", "bench", *paths]
    command += ["--crops", str(args.crops), "--duration", str(args.duration)]
    command += ["--workers", "1", "2", "--rounds", str(args.rounds), "--json", *extra]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=23.0)
    parser.add_argument("--episodes", type=int, default=2, help="episodes per codec")
    parser.add_argument("--crops", type=int, default=300, help="crops per codec and run")
    parser.add_argument("--duration", type=float, default=8.0)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--codecs", nargs="+", default=list(BENCH_CODECS))
    args = parser.parse_args()
    results: dict[str, Any] = {"load_before": load()}
    with tempfile.TemporaryDirectory() as folder:
        paths = build(folder, args.codecs, args.minutes, args.episodes)
        results["load_built"] = load()
        for name, extra in SETTINGS.items():
            results[name] = run_bench(paths, args, extra)
    results["load_after"] = load()
    print(
        f"{args.duration:g} s crops, {args.episodes} x {args.minutes:g}-minute episodes per "
        f"codec, {args.crops} crops per run; load average (1, 5, 15 min) before "
        f"{results['load_before']}, after {results['load_after']} on {os.cpu_count()} CPUs"
    )
    print(
        f"{'codec':<8}{'setting':<10}{'limit ms':>9}{'cpu ms 1w':>10}{'x limit':>8}"
        f"{'cpu ms 2w':>10}{'x limit':>8}{'parent ms':>10}{'crops/s 1w':>11}{'2w':>7}{'2w/1w':>7}"
    )
    rows = []
    for name in SETTINGS:
        runs = results[name]["runs"]
        totals = {"limit": 0.0, 1: 0.0, 2: 0.0, "crops": 0, "seconds_1": 0.0, "seconds_2": 0.0}
        for number, codec in enumerate(args.codecs):
            one, two = (r for r in runs[2 * number : 2 * number + 2])
            assert (one["workers"], two["workers"]) == (1, 2)
            for run in (one, two):
                if not run["yielded"]:
                    sys.exit(
                        f"bench_limit: no crop of {codec} ({name}, {run['workers']} workers) "
                        f"was decoded; skipped: {run['skipped']}"
                    )
            limit = one["limit_ms_per_crop"]
            row = {
                "codec": codec,
                "setting": name,
                "limit_ms": limit,
                "cpu_ms_1": one["cpu_ms_per_crop"],
                "cpu_ms_2": two["cpu_ms_per_crop"],
                "over_limit_1": one["cpu_over_limit"],
                "over_limit_2": two["cpu_over_limit"],
                "parent_ms_1": one["parent_cpu_ms_per_crop"],
                "crops_per_s_1": one["crops_per_s"],
                "crops_per_s_2": two["crops_per_s"],
                "skipped": {**one["skipped"], **two["skipped"]},
            }
            rows.append(row)
            n = one["yielded"]
            totals["limit"] += limit * n
            totals[1] += one["cpu_ms_per_crop"] * n
            totals[2] += two["cpu_ms_per_crop"] * two["yielded"]
            totals["crops"] += n
            totals["seconds_1"] += one["seconds"]
            totals["seconds_2"] += two["seconds"] * n / max(two["yielded"], 1)
            print(_line(row))
        crops = max(totals["crops"], 1)
        print(
            f"{'all':<8}{name:<10}{totals['limit'] / crops:>9.2f}{totals[1] / crops:>10.2f}"
            f"{totals[1] / totals['limit']:>7.2f}x{totals[2] / crops:>10.2f}"
            f"{totals[2] / totals['limit']:>7.2f}x{'':>10}"
            f"{crops / totals['seconds_1']:>11.1f}{crops / totals['seconds_2']:>7.1f}"
            f"{totals['seconds_1'] / totals['seconds_2']:>6.2f}x"
        )
        results[f"scaling_{name}"] = totals["seconds_1"] / totals["seconds_2"]
    results["rows"] = rows
    print("wrote", write_json("limit", {"args": vars(args), **results}))


def _line(row: dict[str, Any]) -> str:
    scaling = row["crops_per_s_2"] / row["crops_per_s_1"]
    return (
        f"{row['codec']:<8}{row['setting']:<10}{row['limit_ms']:>9.2f}{row['cpu_ms_1']:>10.2f}"
        f"{row['over_limit_1']:>7.2f}x{row['cpu_ms_2']:>10.2f}{row['over_limit_2']:>7.2f}x"
        f"{row['parent_ms_1']:>10.2f}{row['crops_per_s_1']:>11.1f}{row['crops_per_s_2']:>7.1f}"
        f"{scaling:>6.2f}x"
    )


if __name__ == "__main__":
    main()
