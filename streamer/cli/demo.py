"""``streamer demo``: build the embedded demo dataset and read random crops from it."""

from __future__ import annotations

import argparse

from ..demo import default_cache_dir, run_demo
from ._options import add_count_arguments, add_progress_argument, show_progress, worker_count


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("demo", help="stream random crops from a built-in dataset")
    add_count_arguments(parser, crops=48, duration=4.0)
    parser.add_argument("--seed", type=int, default=0, help="crop positions seed (default 0)")
    parser.add_argument(
        "--workers", type=worker_count, help="decode processes (default: one per CPU)"
    )
    parser.add_argument(
        "--cache-dir", help=f"where the demo dataset is kept (default {default_cache_dir()})"
    )
    parser.add_argument("--rebuild", action="store_true", help="build the dataset again")
    add_progress_argument(parser)
    return parser


def run(args: argparse.Namespace) -> int:
    summary = run_demo(
        crops=args.crops,
        duration=args.duration,
        seed=args.seed,
        workers=args.workers,
        cache_dir=args.cache_dir,
        rebuild=args.rebuild,
        progress=show_progress(args),
    )
    rate = summary.crops / summary.seconds if summary.seconds else float("inf")
    print(f"dataset     {summary.dataset}")
    print(
        f"crops       {summary.crops} x {args.duration:g} s in {summary.seconds:.2f} s "
        f"({summary.workers} decode workers)"
    )
    print(
        f"throughput  {rate:.1f} crops/s ({summary.audio_seconds / summary.seconds:.0f}x real time)"
    )
    print(
        f"bytes read  {summary.bytes_read / 1e6:.1f} MB "
        f"({summary.bytes_read / max(summary.crops, 1) / 1e3:.0f} kB/crop, "
        f"{summary.bytes_read / max(summary.blob_bytes, 1):.0%} of the episodes' bytes)"
    )
    for codec, (count, nbytes) in sorted(summary.per_codec.items()):
        print(f"  {codec:<10} {count:>3} crops  {nbytes / max(count, 1) / 1e3:>8.0f} kB/crop")
    return 0
