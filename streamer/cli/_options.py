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


def storage_options(args: argparse.Namespace) -> dict[str, object]:
    """The storage options a command line asked for (nothing for defaults)."""
    options: dict[str, object] = {}
    if getattr(args, "endpoint_url", None):
        options["endpoint_url"] = args.endpoint_url
    return options
