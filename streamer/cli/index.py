"""``streamer index URL``: build the seek_index/ column directory of a dataset
(a local path, or a writable store such as ``s3://``), each index checked
before it is stored; ``--verify`` re-checks the indexes already stored."""

from __future__ import annotations

import argparse
import os

from ..dataset import INFO_DIR
from ..formats.registry import DEFAULT_DENSITY
from ..write.index import IndexReport, build_index, verify_index_shards
from ._options import (
    add_progress_argument,
    add_url_arguments,
    density,
    partition,
    process_count,
    show_progress,
    storage_options,
)


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("index", help="build seek indexes (seek_index/) for a dataset")
    add_url_arguments(parser)
    parser.add_argument("--force", action="store_true", help="rebuild shards already indexed")
    parser.add_argument(
        "--shards",
        metavar="SPEC",
        type=partition("--shards", or_names=True),
        help="only some shards: i/n (every n-th from the i-th, 0-based) or a comma list of names",
    )
    parser.add_argument(
        "--workers",
        type=process_count,
        default=os.cpu_count() or 1,
        help="worker processes, one shard at a time each (default: CPU count)",
    )
    parser.add_argument(
        "--density",
        type=density,
        default=DEFAULT_DENSITY,
        help=f"seek points per second of audio (default {DEFAULT_DENSITY:g})",
    )
    check = parser.add_mutually_exclusive_group()
    check.add_argument(
        "--no-verify",
        action="store_true",
        help="store indexes without checking them by probe crops (stored 'unverified')",
    )
    check.add_argument(
        "--verify",
        action="store_true",
        help="re-check the stored indexes instead of building: demote those that fail "
        "(keep those that fail on damaged audio, listed, exit 1), "
        "rebuild only rows that cannot be read or that an older streamer stored, "
        "rewrite the index shards with the verdicts",
    )
    add_progress_argument(parser)
    return parser


def run(args: argparse.Namespace) -> int:
    common = {
        "storage_options": storage_options(args),
        "shards": args.shards,
        "workers": args.workers,
        "progress": show_progress(args),
    }
    if args.verify:
        report = verify_index_shards(args.url, **common)
    else:
        report = build_index(
            args.url,
            force=args.force,
            density=args.density,
            verify=not args.no_verify,
            **common,
        )
    print_index_report(report, "checked" if args.verify else "indexed")
    return 1 if report.problems() else 0


def print_index_report(report: IndexReport, done: str = "indexed") -> None:
    """The closing summary: shards, episodes, counts per verdict and per "no index" reason, and
    the shards that could not be indexed, the episodes whose audio data
    is damaged or whose FFmpeg decode ends early, the ``audio_info`` rows that contradict the audio
    (``--verify``), a key the dataset holds twice, and planned shards
    missing (any of them: ``streamer index`` exits 1)."""
    failed = f", {len(report.failed)} failed" if report.failed else ""
    print(
        f"{done} {len(report.indexed)} shards ({len(report.skipped)} already indexed{failed}), "
        f"{report.episodes} episodes: {report.ok} ok, {sum(report.reasons.values())} without index"
    )
    if report.skipped:
        print(
            f"  left as they are: {len(report.skipped)} shards already indexed, "
            f"{report.skipped_episodes} episodes (--force rebuilds them)"
        )
    for label, count in sorted(report.labels.items()):
        if label != "no index":
            print(f"  {label}: {count}")
    if report.larger_preroll:
        print(f"  of them verified with a larger pre-roll: {report.larger_preroll}")
    for reason, count in report.reasons.most_common():
        print(f"  no index ({count}): {reason}")
    for name, reason in sorted(report.failed.items()):
        print(f"  failed shard {name}: {reason}")
    for name, episodes in sorted(report.damaged.items()):
        for key, spans in episodes.items():
            ranges = ", ".join(f"[{offset}, {offset + length})" for offset, length in spans)
            print(f"  damaged audio data in shard {name}, key {key!r}: bytes {ranges}")
    for name, episodes in sorted(report.ends_early.items()):
        for key, note in episodes.items():
            print(f"  shard {name}, key {key!r}: {note} (crops are served up to there)")
    for name, episodes in sorted(report.info.items()):
        for key, why in episodes.items():
            print(f"  {INFO_DIR}/{name}, key {key!r}: {why}")
    if report.duplicate_key:
        print(f"  the dataset cannot be streamed: {report.duplicate_key}")
    if report.incomplete:
        print(f"  {report.incomplete}")
