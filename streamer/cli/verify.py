"""``streamer verify URL``: check that a dataset is whole: every audio shard
with its twins, the same keys in the same order, each key once, and a
manifest that says what the store holds. Exit 0 when it is, 1 otherwise."""

from __future__ import annotations

import argparse

from ..write.verify import verify_dataset
from ._options import add_url_arguments, storage_options


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "verify", help="check a dataset's shards, twins, keys and manifest"
    )
    add_url_arguments(parser)
    parser.add_argument(
        "--no-index", action="store_true", help="do not require seek_index/ (packed --no-index)"
    )
    return parser


def run(args: argparse.Namespace) -> int:
    report = verify_dataset(
        args.url, storage_options=storage_options(args), index=not args.no_index
    )
    for problem in report.problems:
        print(f"problem: {problem}")
    twins = ", ".join(report.column_dirs) or "none"
    verdict = "ok" if report.ok else f"{len(report.problems)} problems"
    print(
        f"{report.url}: {report.shards} shards, {report.rows} rows "
        f"(checked against: {twins}): {verdict}"
    )
    return 0 if report.ok else 1
