"""Options shared by subcommands, and the checks every argument gets before
any work starts (a bad value is a usage error: one line, exit code 2)."""

from __future__ import annotations

import argparse
import functools
import math
import os
import re
import sys
import urllib.parse
from collections.abc import Callable, Sequence
from typing import Any

from ..decode.resample import DEFAULT_QUALITY, QUALITIES, check_sample_rate
from ..errors import StreamerError
from ..pipeline.bench import check_limit
from ..pipeline.pool import check_workers
from ..storage import redact
from ..write.index import parse_part, parse_shards
from ..write.sources import is_remote_url


class UsageError(Exception):
    """The command line asks for something it cannot mean (exit code 2):
    raised by a command's checks that need more than one argument at once."""


#: How long a one-shot command (crop, inspect, index, warmup, pack, verify) waits out a store
#: that does not answer before it fails: someone is waiting at the prompt. A
#: training run keeps the library's default (``RetryPolicy.give_up_after``).
ONE_SHOT_GIVE_UP = 30.0


def add_url_arguments(parser: argparse.ArgumentParser) -> None:
    """``URL`` plus the remote-store options (``add_endpoint_argument``)."""
    parser.add_argument("url", metavar="URL", help="dataset path or URL")
    add_endpoint_argument(parser)


def add_allow_incomplete_argument(parser: argparse.ArgumentParser) -> None:
    """``--allow-incomplete``: serve a dataset whose pack left planned shards
    missing (``open_dataset(allow_incomplete=True)``) instead of failing."""
    parser.add_argument(
        "--allow-incomplete",
        action="store_true",
        help="serve the shards present of a dataset whose pack did not finish "
        "(planned shards missing; a warning says which)",
    )


def add_endpoint_argument(parser: argparse.ArgumentParser, *, give_up: bool = True) -> None:
    """``--endpoint-url`` (standard AWS variables are honoured too) and, for a
    one-shot command (``give_up``), ``--give-up-after`` for its remote URLs;
    ``bench`` measures a training run's reads, so it keeps the library's default."""
    parser.add_argument(
        "--endpoint-url",
        type=endpoint_url,
        help="S3-compatible endpoint (B2, MinIO, R2, ...); default: $AWS_ENDPOINT_URL",
    )
    if not give_up:
        return
    parser.add_argument(
        "--give-up-after",
        type=positive_seconds,
        metavar="SECONDS",
        help=f"fail once a remote store has not answered for this long "
        f"(default: {ONE_SHOT_GIVE_UP:g})",
    )


def printable(text: str) -> str:
    """``text`` as one line: control characters (a newline or a tab in a file
    name) spelled as escapes, so a name cannot break a report's lines."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def endpoint_url(text: str) -> str:
    """An argparse type: an http:// or https:// URL naming a host (a malformed
    one failed as the store opened, exit 1, as if the store were at fault)."""
    try:
        parts = urllib.parse.urlsplit(text)
        valid = parts.scheme in ("http", "https") and bool(parts.hostname)
        parts.port  # noqa: B018 -- raises ValueError for a port that is not a number
    except ValueError:
        valid = False
    if not valid:
        raise argparse.ArgumentTypeError(
            f"must be an http:// or https:// URL naming a host, not {redact(text)!r}"
        )
    return text


def positive_int(text: str) -> int:
    """An argparse type: a whole number of at least 1."""
    value = _int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def non_negative_int(text: str) -> int:
    """An argparse type: a whole number of at least 0."""
    value = _int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {value}")
    return value


def worker_count(text: str) -> int:
    """An argparse type: decode processes, 0 (decode in this process) up to
    ``WORKERS_PER_CPU`` per CPU (``pipeline.pool.check_workers``)."""
    return _per_cpu(non_negative_int(text))


def process_count(text: str) -> int:
    """An argparse type: worker processes, 1 up to ``WORKERS_PER_CPU`` per CPU."""
    return _per_cpu(positive_int(text))


def _per_cpu(value: int) -> int:
    return _checked(check_workers, "workers", value)


def _checked(check: Callable[[Any], Any], name: str, value: Any) -> Any:
    """``check(value)``, the library's own check of its ``name`` argument
    (one check for the command and the API), its ``ValueError`` as the
    argument's error (without the name: argparse says ``argument --X``)."""
    try:
        return check(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix(f"{name} ")) from None


def seconds(text: str) -> float:
    """An argparse type: a time in seconds, finite and not negative."""
    value = _float(text)
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds >= 0, not {text}")
    return value


def positive_seconds(text: str) -> float:
    """An argparse type: a duration in seconds, finite and above 0."""
    value = _float(text)
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds > 0, not {text}")
    return value


_SIZE = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*([KMGT]?)(?:I?B)?", re.IGNORECASE)
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def byte_size(text: str) -> int:
    """An argparse type: a size of at least one byte, a number with an optional
    unit (``K``, ``M``, ``G``, ``T``, powers of 1024, also written ``GiB`` or ``GB``)."""
    match = _SIZE.fullmatch(text.strip())
    value = float(match[1]) * _UNITS[match[2].upper()] if match else 0
    if not 1 <= value < math.inf:  # 400 digits are inf as a float: int() raised OverflowError
        raise argparse.ArgumentTypeError(f"must be a size such as 500G or 2T, not {text!r}")
    return int(value)


def sample_rate(text: str) -> int:
    """An argparse type: a target rate in Hz, within ``check_sample_rate``'s range."""
    return _checked(check_sample_rate, "sample_rate", positive_int(text))


def limited(name: str, kind: Callable[[str], float]) -> Callable[[str], float]:
    """An argparse type: ``kind``, then within the library's bound for ``name``
    (``pipeline.bench.LIMITS``: one check for the command and the API)."""

    def check(text: str) -> float:
        return _checked(functools.partial(check_limit, name), name, kind(text))

    return check


def partition(option: str, *, or_names: bool = False) -> Callable[[str], str]:
    """An argparse type: an ``i/n`` spec (``or_names``: or a comma list of
    shard names, which only the dataset can check, but not an empty one)."""

    def check(text: str) -> str:
        try:
            if or_names:
                parse_shards(text, option)
            else:
                parse_part(text, option)
        except StreamerError as exc:
            raise argparse.ArgumentTypeError(str(exc).removeprefix(f"{option} ")) from None
        return text

    return check


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, not {text!r}") from None


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, not {text!r}") from None


def storage_options(
    args: argparse.Namespace, urls: Sequence[str] | None = None
) -> dict[str, object]:
    """The storage options a command line asked for (nothing for defaults).

    They apply to remote stores only: a ``UsageError`` names them when no URL
    of the command (``args.url``, or ``urls``) is remote. ``bench`` may
    compare a local dataset with a remote one; ``options_for`` then gives
    them to the remote one only.
    """
    options: dict[str, object] = {}
    for name in ("endpoint_url", "cache_dir", "cache_dir_bytes", "give_up_after"):
        if getattr(args, name, None):
            options[name] = getattr(args, name)
    if urls is None:
        urls = [args.url] if isinstance(args.url, str) else args.url
    remote = any(is_remote_url(url) for url in urls)
    if options and not remote:
        flags = ", ".join("--" + name.replace("_", "-") for name in sorted(options))
        where = urls[0] if len(urls) == 1 else urls
        raise UsageError(
            f"{flags} applies to remote URLs (s3://, b2://, http://...), not {where!r}"
        )
    if remote and hasattr(args, "give_up_after"):
        options.setdefault("give_up_after", ONE_SHOT_GIVE_UP)
    return options


def options_for(url: str, options: dict[str, object]) -> dict[str, object]:
    """``options`` for a remote URL; none for a local path (local files take none)."""
    return options if is_remote_url(url) else {}


def add_crop_arguments(parser: argparse.ArgumentParser, *, crops: int) -> None:
    """The crops of a bench or warmup run: same options, same plan."""
    add_count_arguments(parser, crops=crops, duration=8.0)
    parser.add_argument("--seed", type=int, default=0, help="crop positions seed (default 0)")
    parser.add_argument(
        "--sample-rate", type=sample_rate, help="resample crops to this rate (1000-768000 Hz)"
    )
    add_quality_argument(parser)
    parser.add_argument("--mono", action="store_true", help="crops as the mean of the channels")
    parser.add_argument(
        "--cache-dir", help="disk tier of the block cache (remote datasets; `streamer warmup`)"
    )
    parser.add_argument(
        "--cache-dir-bytes",
        type=byte_size,
        metavar="SIZE",
        help="size limit of the disk tier, e.g. 500G or 2T (K, M, G, T: powers of 1024; "
        "default 16G)",
    )


def add_count_arguments(parser: argparse.ArgumentParser, *, crops: int, duration: float) -> None:
    """``--duration`` and ``--crops`` of a planned run (bench, warmup, demo),
    bounded as ``pipeline.bench.LIMITS`` says."""
    parser.add_argument(
        "--duration",
        type=limited("duration", positive_seconds),
        default=duration,
        help=f"crop seconds, at least 0.001 (default {duration:g})",
    )
    parser.add_argument(
        "--crops",
        type=limited("crops", positive_int),
        default=crops,
        help=f"crops, at most 1000000 (default {crops})",
    )


def crop_config(args: argparse.Namespace) -> object:
    from ..pipeline.bench import BenchConfig

    return BenchConfig(
        duration=args.duration,
        crops=args.crops,
        seed=args.seed,
        sample_rate=args.sample_rate,
        mono=args.mono,
        resample_quality=args.resample_quality,
    )


def add_quality_argument(parser: argparse.ArgumentParser) -> None:
    """``--resample-quality``: libsoxr's preset for ``--sample-rate``."""
    parser.add_argument(
        "--resample-quality",
        choices=QUALITIES,
        default=DEFAULT_QUALITY,
        help=f"resampler preset (libsoxr; default {DEFAULT_QUALITY})",
    )


def add_progress_argument(parser: argparse.ArgumentParser) -> None:
    """``--no-progress``; without it a bar is drawn only on a terminal (``show_progress``)."""
    parser.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress bar (none unless stderr is a terminal)",
    )


def show_progress(args: argparse.Namespace) -> bool:
    """Whether to draw a progress bar: not asked off, and stderr is a terminal
    (into a log file or a pipe every refresh would be kept, joined by carriage returns)."""
    if getattr(args, "no_progress", False):
        return False
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced or closed
        return False


def writable_file(path: str) -> None:
    """Fail (``OSError``, exit 1) unless a file can be created at ``path``: its
    folder exists and is writable. Checked before any work."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise FileNotFoundError(2, "no such directory", folder)
    if not os.access(folder, os.W_OK):
        raise PermissionError(13, "directory is not writable", folder)


def density(text: str) -> float:
    """An argparse type: seek points per second, above 0 (``inf``: every frame)."""
    value = _float(text)
    if not value > 0:  # nan too
        raise argparse.ArgumentTypeError(f"must be above 0 (or inf: every frame), not {text}")
    return value
