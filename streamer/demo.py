"""``streamer demo``: a small dataset built locally, then crops streamed from it
through the pipeline (``streamer.Streamer``, decode worker processes).

The dataset is generated and encoded on this machine (no downloads), packed
with ``streamer pack`` into a cache directory, and reused by later runs. Its
content is deterministic: the same episodes, byte for byte, every time.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field

import pyarrow as pa
from tqdm import tqdm

from .dataset.dataset import Dataset
from .decode.crop import Crop, CropJob, CropRequest
from .index.table import INDEX_COLUMN, INDEX_DIR, INDEX_TYPE
from .interrupts import interrupts_held
from .pipeline import RandomCrops, Streamer
from .pipeline.bench import check_limit
from .pipeline.stages import plan
from .storage.disk import make_directory
from .synth import CODECS, encode, signal
from .write.pack import pack

__all__ = ["DEMO_EPISODES", "DemoSummary", "demo_dataset", "run_demo"]

#: (key, codec, sample rate, channels, seconds). Bump DEMO_VERSION on change
#: (of these, of the seek index's on-disk form, or of ``INDEX_REVISION``
#: for a codec here: then versions sharing a cache do not rebuild it back
#: and forth, and none serves its crops by the fallback).
DEMO_EPISODES = (
    ("podcasts/mp3-stereo", "mp3", 44100, 2, 180.0),
    ("podcasts/aac-stereo", "aac", 44100, 2, 180.0),
    ("audiobooks/opus-mono", "opus", 48000, 1, 240.0),
    ("audiobooks/vorbis-stereo", "vorbis", 44100, 2, 150.0),
    ("studio/flac-mono", "flac", 44100, 1, 120.0),
    ("studio/alac-stereo", "alac", 48000, 2, 90.0),
    ("studio/wav-mono-16k", "wav", 16000, 1, 180.0),
)
DEMO_VERSION = 6


@dataclass
class DemoSummary:
    """What one demo run read, overall and per codec."""

    dataset: str
    workers: int = 0
    crops: int = 0
    seconds: float = 0.0
    audio_seconds: float = 0.0
    bytes_read: int = 0
    blob_bytes: int = 0
    per_codec: dict[str, list[int]] = field(default_factory=lambda: defaultdict(lambda: [0, 0]))


def default_cache_dir() -> str:
    """``$STREAMER_CACHE_DIR``, else ``$XDG_CACHE_HOME/streamer``, else ``~/.cache/streamer``."""
    if os.environ.get("STREAMER_CACHE_DIR"):
        return os.environ["STREAMER_CACHE_DIR"]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "streamer")


def demo_dataset(
    cache_dir: str | None = None, *, rebuild: bool = False, progress: bool = False
) -> str:
    """Path of the demo dataset, building it first if it is not cached yet
    (about a minute on one core; ``progress`` shows it on stderr)."""
    target = os.path.join(cache_dir or default_cache_dir(), f"demo-v{DEMO_VERSION}")
    if os.path.isdir(target) and (rebuild or not _current(target)):
        shutil.rmtree(target)
    if os.path.isdir(target):
        return target
    make_directory(os.path.dirname(target), "the demo's cache directory")
    with tempfile.TemporaryDirectory(dir=os.path.dirname(target), prefix=".demo-") as work:
        src = os.path.join(work, "src")
        episodes = tqdm(
            DEMO_EPISODES,
            desc="building the demo dataset",
            unit="episode",
            file=sys.stderr,
            disable=not progress,
        )
        for index, (key, codec, rate, channels, seconds) in enumerate(episodes):
            episodes.set_postfix_str(key)
            path = os.path.join(src, f"{key}.{CODECS[codec].extension}")
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with interrupts_held():  # PyAV's write callbacks would drop a Ctrl-C or SIGTERM
                encoded = encode(signal(seconds, rate, channels, seed=index), rate, codec)
            with open(path, "wb") as file:
                file.write(encoded)
        built = os.path.join(work, "dataset")
        pack(src, built, progress=progress)
        os.replace(built, target)
    return target


def _current(target: str) -> bool:
    """Whether a cached demo dataset has the seek indexes this version writes
    (one built before the index format changed would be read without them)."""
    folder = os.path.join(target, INDEX_DIR)
    try:
        paths = [os.path.join(folder, n) for n in os.listdir(folder) if not n.startswith(".")]
        schemas = [pa.ipc.open_file(path).schema for path in paths]
        return bool(schemas) and all(s.field(INDEX_COLUMN).type == INDEX_TYPE for s in schemas)
    except (OSError, KeyError, pa.ArrowInvalid):
        return False


def run_demo(
    *,
    crops: int = 48,
    duration: float = 4.0,
    seed: int = 0,
    workers: int | None = None,
    cache_dir: str | None = None,
    rebuild: bool = False,
    progress: bool = False,
) -> DemoSummary:
    """Stream ``crops`` random crops of ``duration`` seconds from the demo dataset
    through the pipeline (``streamer.Streamer``: decode worker processes)."""
    check_limit("crops", crops)
    check_limit("duration", duration)
    dataset = Dataset(demo_dataset(cache_dir, rebuild=rebuild, progress=progress))
    summary = DemoSummary(dataset=dataset.root)
    per_episode = -(-crops // len(dataset))
    streamer = Streamer(
        dataset,
        RandomCrops(duration, per_episode=per_episode),
        seed=seed,
        workers=workers,
        max_crops=crops,
    )
    with streamer:
        began = time.perf_counter()
        for crop in streamer:
            info = dataset.info(crop.key)
            nbytes = _planned_bytes(dataset, crop)
            summary.crops += 1
            summary.audio_seconds += crop.audio.shape[1] / crop.sample_rate
            summary.bytes_read += nbytes
            summary.blob_bytes += info["num_bytes"]
            summary.per_codec[info["codec"]][0] += 1
            summary.per_codec[info["codec"]][1] += nbytes
        summary.seconds = time.perf_counter() - began
    summary.workers = streamer.workers
    return summary


def _planned_bytes(dataset: Dataset, crop: Crop) -> int:
    """What the crop read: its byte plan (planning again is cheap: index
    lookups), as planned for the demo's decode workers."""
    job = plan(dataset, CropRequest(crop.key, crop.start, crop.end))
    return job.nbytes if isinstance(job, CropJob) else 0
