"""Shared pieces of the benchmarks: the JSON results file, and which S3 server they run on."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

from testkit import s3servers

RESULTS = os.path.join(os.path.dirname(__file__), "results")


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    return {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "system": platform.system(),
    }


def write_json(name: str, payload: dict[str, Any]) -> str:
    """Write ``results/<name>-<timestamp>.json`` and return its path."""
    os.makedirs(RESULTS, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = os.path.join(RESULTS, f"{name}-{stamp}.json")
    with open(path, "w") as file:
        json.dump({"benchmark": name, "machine": machine(), **payload}, file, indent=2)
    return path


def add_server_argument(
    parser: argparse.ArgumentParser, flag: str = "--server", *more: str
) -> None:
    """The S3 server a benchmark runs against on loopback (``testkit.s3servers``):
    SeaweedFS by default, which reads only the asked range; moto reads the
    whole object for every ranged GET, and that CPU weighs on the figures.
    ``more``: further choices of the benchmark's own."""
    parser.add_argument(
        flag,
        choices=[*s3servers.KINDS, "moto", *more],
        default="seaweedfs",
        help="S3 server on loopback (default: seaweedfs)",
    )


@contextlib.contextmanager
def s3_server(kind: str, key_id: str, secret: str) -> Iterator[tuple[str, Callable[[], float]]]:
    """``(endpoint, server CPU seconds so far)`` of an S3 server of ``kind``
    (``add_server_argument``) with its data in a temporary folder; stopped,
    and the folder removed, when the block ends."""
    with tempfile.TemporaryDirectory() as root, s3servers.running(kind, root, key_id, secret) as up:
        yield up
