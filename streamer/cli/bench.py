"""``streamer bench URL [URL ...]``: crops/s, CPU, requests, bytes and latency per crop."""

from __future__ import annotations

import argparse
import json

from ..dataset import open_dataset
from ..pipeline.bench import bench
from ._options import (
    add_allow_incomplete_argument,
    add_crop_arguments,
    add_endpoint_argument,
    crop_config,
    limited,
    options_for,
    positive_int,
    storage_options,
    worker_count,
)


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "bench", help="measure the pipeline (and, with --baseline, the naive path)"
    )
    parser.add_argument(
        "url", metavar="URL", nargs="+", help="dataset path or URL; several are compared"
    )
    add_endpoint_argument(parser, give_up=False)
    add_crop_arguments(parser, crops=200)
    add_allow_incomplete_argument(parser)
    parser.add_argument(
        "--workers",
        type=worker_count,
        nargs="+",
        default=[2],
        help="decode processes; several: one run each",
    )
    parser.add_argument(
        "--baseline",
        action="store_true",
        help="also time whole-blob PyAV decoding of the same crops",
    )
    parser.add_argument(
        "--no-limit",
        dest="limit",
        action="store_false",
        help="do not measure the pure decode of the same crops (the limit)",
    )
    parser.add_argument(
        "--rounds",
        type=limited("rounds", positive_int),
        default=1,
        help="run every configuration this many times, interleaved, and report the median",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    return parser


def run(args: argparse.Namespace) -> int:
    options = storage_options(args)
    datasets = [
        open_dataset(url, allow_incomplete=args.allow_incomplete, **options_for(url, options))
        for url in args.url
    ]
    result = bench(
        datasets,
        args.workers,
        crop_config(args),
        baseline=args.baseline,
        rounds=args.rounds,
        limit=args.limit,
    )
    if args.json:
        print(json.dumps(result))
    else:
        print_table(result)
    return 0


def print_table(result: dict) -> None:
    """One row per run: throughput, its ratio to the first URL, cost per crop
    (CPU of parent and workers, the parent's share, the pure decode's, and
    the ratio of the first to the last), requests and bytes per crop, crop
    latency, the milliseconds to the pass's first crop."""
    header = (
        f"{'dataset':<40} {'workers':>7} {'crops/s':>8} {'relative':>8} {'cpu ms':>7} "
        f"{'parent':>7} {'limit':>6} {'/limit':>6} "
        f"{'req':>5} {'kB':>7} {'p50 ms':>7} {'p99 ms':>7} {'first':>6} {'hits':>5} "
        f"{'baseline':>9} {'speedup':>7}"
    )
    print(header)
    for run in result["runs"]:
        hits = run["cache_hit_rate"]
        print(
            f"{run['url'][-40:]:<40} {run['workers']:>7} {run['crops_per_s']:>8.1f} "
            f"{_figure(run, 'relative', '.2f'):>8} {run['cpu_ms_per_crop']:>7.1f} "
            f"{run['parent_cpu_ms_per_crop']:>7.2f} {_figure(run, 'limit_ms_per_crop'):>6} "
            f"{_figure(run, 'cpu_over_limit', '.2f'):>6} "
            f"{run['requests_per_crop']:>5.2f} {run['bytes_per_crop'] / 1e3:>7.0f} "
            f"{run['p50_ms'] or 0:>7.1f} {run['p99_ms'] or 0:>7.1f} "
            f"{_figure(run, 'first_crop_ms', '.0f'):>6} "
            f"{'-' if hits is None else f'{hits:.0%}':>5} "
            f"{_figure(run, 'baseline_crops_per_s'):>9} {_figure(run, 'speedup'):>7}"
        )
    if result.get("rounds", 1) > 1:
        print(f"median of {result['rounds']} interleaved rounds")
    for run in result["runs"]:
        names = ("paths", "skipped", "baseline_failed", "limit_failed")
        counts = {name: run.get(name) for name in names}
        said = "; ".join(f"{name.replace('_', ' ')} {c}" for name, c in counts.items() if c)
        if said:
            print(f"{run['url'][-40:]} workers={run['workers']}: {said}")


def _figure(run: dict, name: str, form: str = ".1f") -> str:
    """A figure, or "-" when the run has none (no ``--baseline``,
    ``--no-limit``; no ``relative`` when the first dataset yielded no crop)."""
    value = run.get(name)
    return "-" if value is None or value != value else f"{value:{form}}"
