"""``streamer pack SRC OUT``: audio files (a folder, a store prefix, a list
of URLs) -> a dataset (a folder or a store prefix), whole or one partition
of a fanned-out pack (``--shards i/n``, ``--files i/n``)."""

from __future__ import annotations

import argparse
import sys

from ..errors import PackError
from ..write.pack import DEFAULT_BATCH_SIZE, DEFAULT_SHARD_SIZE, check_out_is_not_src, pack
from ._options import (
    UsageError,
    add_endpoint_argument,
    add_progress_argument,
    byte_size,
    partition,
    positive_int,
    printable,
    show_progress,
    storage_options,
)
from .index import print_index_report


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("pack", help="pack audio files into a dataset")
    parser.add_argument(
        "src",
        metavar="SRC",
        help="folder or store prefix (s3://, b2://, ...) to walk for audio files, "
        "or a list file of URLs, one per line",
    )
    parser.add_argument("out", metavar="OUT", help="dataset folder or store prefix to write")
    add_endpoint_argument(parser)
    part = parser.add_mutually_exclusive_group()
    part.add_argument(
        "--shards",
        metavar="I/N",
        type=partition("--shards"),
        help="pack only the planned shards j with j %% N == I (fan out over N runs)",
    )
    part.add_argument(
        "--files",
        metavar="I/N",
        type=partition("--files"),
        help="pack only the files j with j %% N == I, into shards named by the partition",
    )
    parser.add_argument(
        "--shard-size",
        type=byte_size,
        default=DEFAULT_SHARD_SIZE,
        help="target bytes per shard, e.g. 512M, 2G (default 1G)",
    )
    parser.add_argument(
        "--batch-size",
        type=positive_int,
        default=DEFAULT_BATCH_SIZE,
        help=f"files per record batch; bounds memory (default {DEFAULT_BATCH_SIZE})",
    )
    parser.add_argument(
        "--strict", action="store_true", help="fail on the first file that is not audio"
    )
    add_progress_argument(parser)
    parser.add_argument(
        "--no-index", action="store_true", help="do not build seek_index/ (see `streamer index`)"
    )
    parser.add_argument(
        "--columns",
        metavar="SIDECAR",
        help="CSV or JSON-lines file with a 'path' column (files under SRC): "
        "its other columns become a column directory",
    )
    parser.add_argument(
        "--columns-dir",
        default="labels",
        metavar="NAME",
        help="the column directory --columns writes (default labels)",
    )
    return parser


def run(args: argparse.Namespace) -> int:
    try:
        check_out_is_not_src(args.src, args.out)
    except PackError as exc:
        raise UsageError(str(exc)) from None
    report = pack(
        args.src,
        args.out,
        shards=args.shards,
        files=args.files,
        storage_options=storage_options(args, [args.src, args.out]),
        shard_size=args.shard_size,
        batch_size=args.batch_size,
        strict=args.strict,
        progress=show_progress(args),
        index=not args.no_index,
        columns=args.columns,
        columns_dir=args.columns_dir,
    )
    for source, reason in report.skipped:
        print(printable(f"skipped {source}: {reason}"), file=sys.stderr)
    for key, header, found in report.durations:
        print(
            f"warning: {printable(key)}: the header says {header:.1f} s, "
            f"the seek index {found:.1f} s; audio_info keeps the index's",
            file=sys.stderr,
        )
    for path in report.unmatched:
        print(f"warning: {args.columns}: {path!r} matches no packed file", file=sys.stderr)
    print(
        f"packed {report.files} files ({report.bytes / 1e6:.1f} MB) into "
        f"{len(report.shards)} shards in {report.out}; skipped {len(report.skipped)}"
    )
    if report.already_complete:
        print(f"  left as they are: {len(report.already_complete)} shards already complete")
    if report.manifest_written:
        print("  every planned shard is in place: manifest written")
    else:
        print("  manifest not written: shards of other partitions are still missing")
    if report.index is None:
        return 0
    print_index_report(report.index)
    return 1 if report.index.problems() else 0
