"""The ``streamer`` command. Thin: each subcommand parses and calls the library.

Every subcommand lives in its own module here with two functions,
``add_parser(subparsers)`` and ``run(args) -> int``; adding a command is one
module plus one entry in ``COMMANDS``.

Every error is one line on stderr, ``streamer COMMAND: error: ...``: exit
code 2 for a command line that cannot mean anything (argparse's checks, each
argument's type, ``UsageError``, a URL no store serves:
``UnsupportedURLError``), 1 for a failure while working. A traceback is
printed only with ``-v`` (redacted like every message). A warning is one
line too, ``streamer COMMAND: warning: ...`` (with ``-v``, Python's form,
which names the line of code that warned). A reader that
stops early (``streamer inspect URL | head -1``) ends the command quietly
with exit code 141, as a command killed by SIGPIPE; ``streamer help
[COMMAND]`` is ``streamer [COMMAND] --help``. SIGTERM stops every command
as Ctrl-C does (temporary files removed, exit code 130), and so does a
Ctrl-C while the command loads: this module imports nothing heavy, so that
the commands' modules (PyAV, pyarrow, the S3 client: half a second) load
inside ``main``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import logging
import os
import sys
import traceback
import typing
import warnings
from collections.abc import Iterator, Sequence

from ..errors import StreamerError, UnsupportedURLError

__all__ = ["main"]

#: The name on the package index (``pip install streamer-audio``); the import name is ``streamer``.
DISTRIBUTION = "streamer-audio"
#: An error line longer than this (a library's message quoting bytes) is cut.
MAX_MESSAGE = 500
#: The exit code of a command whose reader closed the pipe (128 + SIGPIPE, as the shell reports it).
BROKEN_PIPE = 141
COMMANDS = ["demo", "pack", "index", "verify", "inspect", "crop", "bench", "warmup", "timing"]


class _Parser(argparse.ArgumentParser):
    """argparse with its errors on one line (no usage block): ``--help`` shows usage."""

    def error(self, message: str) -> typing.NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="streamer", description="Sample-exact audio crops from sharded Arrow datasets."
    )
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging")
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        module = importlib.import_module(f"{__name__}.{name}")
        sub = module.add_parser(subparsers)
        sub.set_defaults(handler=module.run)
    helper = subparsers.add_parser("help", help="show a command's usage (streamer help crop)")
    helper.add_argument("topic", metavar="COMMAND", nargs="?", choices=COMMANDS)
    helper.add_argument(
        "sub", metavar="SUBCOMMAND", nargs="*", help="e.g. streamer help timing report"
    )
    helper.set_defaults(handler=lambda args: _help(parser, args.topic, args.sub))
    return parser


def _help(parser: argparse.ArgumentParser, topic: str | None, sub: list[str]) -> int:
    """``streamer help [COMMAND [SUBCOMMAND]]``: the usage ``--help`` prints, exit code 0
    (an unknown subcommand: exit code 2, as ``streamer COMMAND SUBCOMMAND --help``)."""
    if topic is None:
        parser.print_help()
        return 0
    try:
        parser.parse_args([topic, *sub, "--help"])
    except SystemExit as done:  # argparse prints the usage and exits 0
        return int(done.code or 0)
    return 0


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
    try:
        code = _main(argv)
        sys.stdout.flush()  # here, not at exit: a closed pipe found then is not caught
        return code
    except BrokenPipeError:
        return _reader_gone()
    except Exception as exc:  # before the command ran: its modules loading, parsing
        if not _raised_while_interrupted(exc):
            raise
        return _interrupted_early(argv)  # a library's error made of a Ctrl-C (in an import)
    except KeyboardInterrupt:
        return _interrupted_early(argv)


def _interrupted_early(argv: Sequence[str] | None) -> int:
    """Say that the command was interrupted before it ran (its modules
    loading: half a second), as later: one line, exit code 130. (Python
    may then end the process by SIGINT instead, which a shell reports as
    130 too: it does so when a library let the interrupt pass through.)"""
    words = sys.argv[1:] if argv is None else argv
    command = next((f" {word}" for word in words if not word.startswith("-")), "")
    print(f"streamer{command}: interrupted", file=sys.stderr)
    return 130


def _reader_gone() -> int:
    """The reader of stdout went away (``| head -1``): nothing more can be
    said there, and it is not an error worth a line. Later writes (the
    interpreter's flush at exit) go to /dev/null instead of failing again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # stdout replaced (tests) or closed
        pass
    return BROKEN_PIPE


def _main(argv: Sequence[str] | None) -> int:
    for stream in (sys.stdout, sys.stderr):  # an ASCII locale: a name with é is written as \xe9
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None and stream.errors == "strict":
            reconfigure(errors="backslashreplace")
    args = build_parser().parse_args(argv)
    level = logging.WARNING - 10 * min(args.verbose, 2)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    from ..interrupts import interrupts_as_ctrl_c

    try:
        # SIGTERM (a job runner's stop, ``timeout``, ``kill``) unwinds every
        # command as Ctrl-C does: temporary files and folders are removed,
        # worker processes stopped, exit code 130.
        with interrupts_as_ctrl_c(), _warnings_as_lines(args.command, args.verbose):
            return args.handler(args)
    except KeyboardInterrupt:
        print(f"streamer {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        raise
    except Exception as exc:
        from ..storage import redact
        from ._options import UsageError

        interrupted = _raised_while_interrupted(exc)
        code = 130 if interrupted else 2 if isinstance(exc, UsageError | UnsupportedURLError) else 1
        if args.verbose:  # redacted like the error line: chained messages quote URLs too
            sys.stderr.write(redact(traceback.format_exc()))
        outcome = "interrupted" if interrupted else f"error: {_describe(exc)}"
        print(f"streamer {args.command}: {outcome}", file=sys.stderr)
        return code


@contextlib.contextmanager
def _warnings_as_lines(command: str, verbose: int) -> Iterator[None]:
    """Warnings shown as one line each, as errors are, without the
    library's file and line of code (``-v``: Python's form)."""

    def line(message: Warning | str, *_: object, **__: object) -> str:
        from ..storage import redact

        text = " ".join(str(message).split())
        return f"streamer {command}: warning: {redact(text)}\n"

    formatwarning = warnings.formatwarning
    if not verbose:
        warnings.formatwarning = line
    try:
        yield
    finally:
        warnings.formatwarning = formatwarning


def _raised_while_interrupted(exc: BaseException) -> bool:
    """Whether ``exc`` was raised while an interrupt unwound the command (a
    ``KeyboardInterrupt`` in its context chain): a file closed twice as the
    interrupt cut a writer's ``close`` ("Bad file descriptor") is the
    interrupt's doing, and the command was interrupted, not failed."""
    seen: set[int] = set()
    cause = exc.__context__
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, KeyboardInterrupt):
            return True
        seen.add(id(cause))
        cause = cause.__context__
    return False


def _describe(exc: Exception) -> str:
    """One line naming what went wrong: streamer's own messages as they are
    (with their notes: the crop a storage error met), an OS error with its
    file, anything else with its class (a library's error, or a bug: ``-v``
    shows the traceback)."""
    from ..storage import redact
    from ._options import UsageError

    if isinstance(exc, StreamerError | UsageError):
        text = "; ".join([str(exc), *getattr(exc, "__notes__", ())])
    elif isinstance(exc, KeyError):  # an unknown episode key: the message says which
        text = str(exc.args[0]) if exc.args else "KeyError"
    elif isinstance(exc, OSError) and exc.strerror:
        where = f": {exc.filename}" if exc.filename else ""
        text = f"{exc.strerror}{where}"
    else:
        text = f"{type(exc).__name__}: {exc}"
    line = " ".join(redact(text).split()) or type(exc).__name__
    return line if len(line) <= MAX_MESSAGE else line[: MAX_MESSAGE - 1] + "…"
