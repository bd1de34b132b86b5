"""Options shared by subcommands that take a dataset URL."""

from __future__ import annotations

import argparse


def add_url_arguments(parser: argparse.ArgumentParser) -> None:
    """``URL`` plus ``--endpoint-url`` (standard AWS variables are honoured too)."""
    parser.add_argument("url", metavar="URL", help="dataset path or URL")
    parser.add_argument(
        "--endpoint-url",
        help="S3-compatible endpoint (B2, MinIO, R2, ...); default: $AWS_ENDPOINT_URL",
    )


def positive_int(text: str) -> int:
    """An argparse type: a whole number of at least 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def storage_options(args: argparse.Namespace) -> dict[str, object]:
    """The storage options a command line asked for (nothing for defaults)."""
    options: dict[str, object] = {}
    if getattr(args, "endpoint_url", None):
        options["endpoint_url"] = args.endpoint_url
    return options


def options_for(url: str, options: dict[str, object]) -> dict[str, object]:
    """``options`` for a remote URL; none for a local path (local files take none)."""
    scheme, sep, _ = url.partition("://")
    return options if sep and scheme.lower() != "file" else {}


def add_crop_arguments(parser: argparse.ArgumentParser, *, crops: int) -> None:
    """The crops of a bench or warmup run: same options, same plan."""
    parser.add_argument("--duration", type=float, default=8.0, help="crop seconds (default 8)")
    parser.add_argument("--crops", type=int, default=crops, help=f"crops (default {crops})")
    parser.add_argument("--seed", type=int, default=0, help="crop positions seed (default 0)")
    parser.add_argument("--sample-rate", type=int, help="resample crops to this rate")
    parser.add_argument(
        "--cache-dir", help="disk tier of the block cache (remote datasets; `streamer warmup`)"
    )


def crop_config(args: argparse.Namespace) -> object:
    from ..pipeline.bench import BenchConfig

    return BenchConfig(
        duration=args.duration, crops=args.crops, seed=args.seed, sample_rate=args.sample_rate
    )


def storage_options_with_cache(args: argparse.Namespace) -> dict[str, object]:
    options = storage_options(args)
    if getattr(args, "cache_dir", None):
        options["cache_dir"] = args.cache_dir
    return options
