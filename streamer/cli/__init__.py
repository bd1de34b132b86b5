"""The ``streamer`` command. Thin: each subcommand parses and calls the library.

Every subcommand lives in its own module here with two functions,
``add_parser(subparsers)`` and ``run(args) -> int``; adding a command is one
module plus one entry in ``COMMANDS``.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

from ..errors import StreamerError

__all__ = ["main"]

#: The name on the package index (``pip install streamer-audio``); the import name is ``streamer``.
DISTRIBUTION = "streamer-audio"
COMMANDS = ["demo", "pack", "index", "inspect", "crop", "bench", "warmup", "timing"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="streamer", description="Sample-exact audio crops from sharded Arrow datasets."
    )
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging")
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        module = importlib.import_module(f"{__name__}.{name}")
        sub = module.add_parser(subparsers)
        sub.set_defaults(handler=module.run)
    return parser


def version() -> str:
    """The installed distribution's version (package metadata); the source
    tree's ``__version__`` when run from a checkout that is not installed."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    from .. import __version__

    try:
        return installed(DISTRIBUTION)
    except PackageNotFoundError:
        return __version__


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    level = logging.WARNING - 10 * min(args.verbose, 2)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    try:
        return args.handler(args)
    except StreamerError as exc:
        print(f"streamer {args.command}: error: {exc}", file=sys.stderr)
        return 1
    except KeyError as exc:  # an unknown episode key: the message says which
        print(f"streamer {args.command}: error: {exc.args[0]}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"streamer {args.command}: interrupted", file=sys.stderr)
        return 130
