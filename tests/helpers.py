"""Helpers the test modules import (fixtures live in conftest.py)."""

from __future__ import annotations

import os
from pathlib import Path

from streamer.synth import CODECS, encode, signal


def write_audio(
    folder: Path, relpath: str, codec: str, rate: int, channels: int, seconds: float, seed: int = 0
) -> Path:
    """Encode a test signal into ``folder/relpath.<ext>`` and return the path."""
    path = folder / f"{relpath}.{CODECS[codec].extension}"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(encode(signal(seconds, rate, channels, seed=seed), rate, codec))
    return path


def rss_kib() -> int:
    """Resident memory (anonymous + file-backed) of this process, in KiB (Linux)."""
    fields = {}
    with open(f"/proc/{os.getpid()}/status") as status:
        for line in status:
            name, _, value = line.partition(":")
            fields[name] = value
    return int(fields["RssAnon"].split()[0]) + int(fields["RssFile"].split()[0])
