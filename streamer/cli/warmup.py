"""``streamer warmup URL --cache-dir DIR``: fill the disk cache with what a run will read."""

from __future__ import annotations

import argparse
import sys

from tqdm import tqdm

from ..dataset import open_dataset
from ..pipeline.bench import bench_streamer
from ..pipeline.warmup import warmup
from ._options import (
    UsageError,
    add_allow_incomplete_argument,
    add_crop_arguments,
    add_progress_argument,
    add_url_arguments,
    crop_config,
    show_progress,
    storage_options,
)


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "warmup", help="prefetch a run's bytes into a disk cache (no decoding)"
    )
    add_url_arguments(parser)
    add_allow_incomplete_argument(parser)
    add_crop_arguments(parser, crops=200)
    parser.set_defaults(cache_dir=None)
    add_progress_argument(parser)
    return parser


def run(args: argparse.Namespace) -> int:
    if not args.cache_dir:
        raise UsageError("--cache-dir is required")
    dataset = open_dataset(
        args.url, allow_incomplete=args.allow_incomplete, **storage_options(args)
    )
    streamer = bench_streamer(dataset, crop_config(args), workers=0)
    with tqdm(
        unit="B", unit_scale=True, desc="warmup", file=sys.stderr, disable=not show_progress(args)
    ) as bar:

        def total(nbytes: int) -> None:
            bar.reset(total=nbytes)

        report = warmup(streamer, progress=bar.update, total=total)
    skipped = sum(report.skipped.values())
    print(
        f"warmed {report.crops} crops ({report.bytes / 1e6:.1f} MB of crop data) in "
        f"{report.seconds:.1f} s: {report.fetched / 1e6:.1f} MB fetched, "
        f"{report.cached / 1e6:.1f} MB of blocks in {args.cache_dir}"
        + (f" ({skipped} skipped: {_reasons(report.skipped)})" if skipped else "")
    )
    return 0


def _reasons(skipped: dict[str, int]) -> str:
    return ", ".join(f"{count} {reason}" for reason, count in sorted(skipped.items()))
