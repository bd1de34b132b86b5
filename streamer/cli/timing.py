"""``streamer timing report FILES...``: merge phase-profiler files into one table."""

from __future__ import annotations

import argparse
import os

from ..errors import StreamerError
from ..timing_report import merge, render_table, write_chart
from ._options import writable_file


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("timing", help="phase profiler reports (STREAMER_TIMING=1)")
    actions = parser.add_subparsers(dest="timing_command", required=True, metavar="ACTION")
    report = actions.add_parser("report", help="merge per-process timing files")
    report.add_argument("files", nargs="+", metavar="FILE", help="streamer-timing.<pid> files")
    report.add_argument("--png", metavar="PATH", help="also write a bar chart (matplotlib)")
    return parser


def run(args: argparse.Namespace) -> int:
    for path in args.files:
        if os.path.isdir(path):
            raise IsADirectoryError(21, "a folder, not a timing file", path)
        if not os.path.isfile(path):
            raise FileNotFoundError(2, "no such timing file", path)
    if args.png:
        writable_file(args.png)
    for path in args.files:  # small files: each is checked alone, to name the bad one
        try:
            merge([path])
        except (ValueError, KeyError, TypeError) as exc:
            reason = type(exc).__name__
            raise StreamerError(f"{path}: not a streamer timing file ({reason})") from exc
    phases, wall, processes = merge(args.files)
    print(render_table(phases, wall, processes))
    if args.png:
        write_chart(phases, args.png)
        print(f"wrote {args.png}")
    return 0
