"""Long episodes: a crop's bytes and time do not depend on where it sits or on
the episode's length. Hours of audio are built cheaply by repeating frames
(mp3), restamping one page (Opus), or writing a header over zeros (wav)."""

from __future__ import annotations

import statistics
import struct
import time
from pathlib import Path

import pytest
from _index_support import long_mp3, long_ogg

from streamer import open_dataset
from streamer.write.pack import pack

HOURS = 3
CROP = 8.0


def long_wav(seconds: float, rate: int = 8000) -> bytes:
    """Mono 8-bit PCM of silence with a correct RIFF header."""
    data = int(seconds * rate)
    header = b"RIFF" + struct.pack("<I", 36 + data) + b"WAVEfmt "
    header += struct.pack("<IHHIIHH", 16, 1, 1, rate, rate, 1, 8) + b"data"
    return header + struct.pack("<I", data) + b"\x80" * data


BUILDERS = {
    "mp3": (lambda seconds: long_mp3(seconds / 60), "mp3"),
    "opus": (lambda seconds: long_ogg(int(seconds)), "opus"),
    "wav": (long_wav, "wav"),
}


@pytest.fixture(scope="module")
def episodes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = tmp_path_factory.mktemp("long-src")
    for codec, (build, extension) in BUILDERS.items():
        (src / f"{codec}-short.{extension}").write_bytes(build(180))
        (src / f"{codec}-long.{extension}").write_bytes(build(HOURS * 3600))
    out = tmp_path_factory.mktemp("long") / "dataset"
    pack(src, out, progress=False)
    return out


def _cost(dataset, key: str, start: float) -> tuple[int, float]:  # type: ignore[no-untyped-def]
    """(planned bytes, median CPU seconds) of one crop read five times. CPU
    time, not wall time: the crop decodes in this process, and other work
    on a shared machine stretches the wall clock but not this process's CPU."""
    before = dataset.decode_stats.planned_bytes
    dataset.read_crop(key, start, start + CROP)
    nbytes = dataset.decode_stats.planned_bytes - before
    times = []
    for _ in range(5):
        began = time.process_time()
        dataset.read_crop(key, start, start + CROP)
        times.append(time.process_time() - began)
    return nbytes, statistics.median(times)


@pytest.mark.parametrize("codec", sorted(BUILDERS))
def test_crop_cost_is_flat_across_position_and_length(episodes: Path, codec: str) -> None:
    dataset = open_dataset(episodes)
    index = dataset.seek_index(f"{codec}-long")
    last_point = max(int(index.sample_pos[-1]), index.num_samples)
    assert last_point / index.timescale >= HOURS * 3600 * 0.99
    positions = {
        "short, start": (f"{codec}-short", 10.0),
        "short, middle": (f"{codec}-short", 90.0),
        "long, start": (f"{codec}-long", 10.0),
        "long, middle": (f"{codec}-long", HOURS * 1800.0),
        "long, end": (f"{codec}-long", HOURS * 3600.0 - 20.0),
    }
    costs = {name: _cost(dataset, key, start) for name, (key, start) in positions.items()}
    byte_counts = [nbytes for nbytes, _ in costs.values()]
    assert max(byte_counts) <= 1.3 * min(byte_counts), costs
    seconds = [t for _, t in costs.values()]
    # CPU time still varies with cache misses on a shared machine: allow 3x,
    # far from the 100x+ a position-dependent cost would show over three hours.
    assert max(seconds) <= 3 * min(seconds) + 0.002, costs
