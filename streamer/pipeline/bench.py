"""``streamer bench``: the pipeline's throughput and cost per crop, next to the naive path.

Every configuration (dataset URL x worker count) streams the same crops —
``RandomCrops(duration)``, enough per episode for ``crops`` crops, seed
``seed`` — from a cold memory cache. The baseline, on the same crops in the
same run, is what the project replaces: copy the episode's whole blob out of
the shard (one uncached read of the cell), open it with PyAV, seek, decode,
slice; one process.

The floor, also on the same crops in the same run, is the pure decode of
each crop's packets (``limit.py``): every run reports its CPU per crop
(parent and decode workers, their start-up left out) over that limit.
"""

from __future__ import annotations

import io
import itertools
import math
import os
import resource
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..dataset.dataset import Dataset
from ..decode.resample import DEFAULT_QUALITY, downmix, resample
from ..errors import StreamerError
from ..formats.ffmpeg import open_input
from ..formats.frames import frame_to_float32
from .episodes import Episodes
from .limit import limit_seconds
from .samplers import RandomCrops
from .streamer import Streamer

__all__ = ["LIMITS", "BenchConfig", "bench", "bench_streamer", "check_limit", "naive_crop"]

#: The range of a bench's (and its warmup's, and the demo's) numbers, and why:
#: every planned crop is held in memory (a million take ~160 MB and a second
#: or two to plan; a trillion asked for 7 TiB). Ten million (1.6 GB) leaves a
#: warmup room for a large run's crops; a crop shorter than a millisecond
#: decodes to next to nothing.
LIMITS: dict[str, tuple[float, float, str]] = {
    "crops": (1, 10_000_000, "every crop is planned up front"),
    "rounds": (1, 1000, "each round runs every configuration"),
    "duration": (0.001, math.inf, "seconds: a shorter crop is next to no audio"),
}


def check_limit(name: str, value: float) -> float:
    """``value`` when it is within ``LIMITS[name]``, else a ``ValueError``
    naming the range (NaN is never within it)."""
    least, most, why = LIMITS[name]
    if not least <= value <= most:
        span = f"at least {_shown(least)}"
        if most != math.inf:
            span = f"{_shown(least)} to {_shown(most)}"
        raise ValueError(f"{name} must be {span} ({why}), not {_shown(value)}")
    return value


def _shown(value: float) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


@dataclass(frozen=True)
class BenchConfig:
    duration: float = 8.0
    crops: int = 200
    seed: int = 0
    sample_rate: int | None = None
    mono: bool = False
    resample_quality: str = DEFAULT_QUALITY

    def __post_init__(self) -> None:
        check_limit("duration", self.duration)
        check_limit("crops", self.crops)


def bench_streamer(dataset: Dataset, config: BenchConfig, **options: Any) -> Streamer:
    """The Streamer of a bench (and of the warmup that prepares one): the plan
    depends only on the dataset and ``config``."""
    episodes = Episodes.of(dataset)
    eligible = max(1, int((episodes.duration >= config.duration).sum()))
    sampler = RandomCrops(config.duration, per_episode=math.ceil(config.crops / eligible))
    return Streamer(
        dataset,
        sampler,
        seed=config.seed,
        sample_rate=config.sample_rate,
        mono=config.mono,
        resample_quality=config.resample_quality,
        max_crops=config.crops,
        rank=0,
        world_size=1,
        worker=0,
        num_workers=1,
        **options,
    )


def bench(
    datasets: list[Dataset],
    workers: list[int],
    config: BenchConfig,
    *,
    baseline: bool = False,
    rounds: int = 1,
    limit: bool = True,
) -> dict[str, Any]:
    """One run per (dataset, worker count), plus the baseline per dataset
    and, with ``limit``, the pure decode of the same crops (``limit.py``),
    measured in each round just before that dataset's runs:
    ``limit_ms_per_crop`` and ``cpu_over_limit`` in every run.

    Returns the first run's figures at the top level and every run in
    ``runs``; ``relative`` is crops/s over the first dataset's at the same
    worker count (remote vs local, when the first is local).

    With ``rounds`` > 1 every configuration runs that many times, round by
    round (so a change in the machine's load falls on all of them alike), and
    the run with the median crops/s stands for it; ``rounds_crops_per_s``
    lists them all. The first round also opens the shards (later rounds
    start from a cold block cache, not from closed shards).
    """
    check_limit("rounds", rounds)
    for dataset in datasets:
        _check_crops_fit(dataset, config.duration)
    naive = [_baseline(dataset, config) if baseline else None for dataset in datasets]
    tries: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for _ in range(rounds):
        for number, dataset in enumerate(datasets):
            # Measured next to the runs it is the floor of: on a shared
            # machine the CPU a decode costs moves with the load.
            floor = _limit(dataset, config) if limit else {}
            for count in workers:
                run = {**_measure(dataset, count, config), **floor}
                if floor.get("limit_ms_per_crop"):
                    run["cpu_over_limit"] = run["cpu_ms_per_crop"] / floor["limit_ms_per_crop"]
                tries.setdefault((number, count), []).append(run)
    runs = []
    for (number, count), measured in tries.items():
        run = {**_median_run(measured), "rounds_crops_per_s": [r["crops_per_s"] for r in measured]}
        first = _median_run(tries[(0, count)])["crops_per_s"]
        run["relative"] = run["crops_per_s"] / first if first else None
        if naive[number] is not None:
            run.update(naive[number])
            run["speedup"] = run["crops_per_s"] / naive[number]["baseline_crops_per_s"]
        runs.append(run)
    return {**runs[0], "config": config.__dict__, "rounds": rounds, "runs": runs}


def _check_crops_fit(dataset: Dataset, duration: float) -> None:
    """Fail (``StreamerError``) when no episode of ``dataset`` is ``duration``
    long: the bench would measure no crop at all."""
    known = Episodes.of(dataset).duration
    known = known[np.isfinite(known)]
    if not (known >= duration).any():
        longest = (
            f"the longest is {known.max():.2f} s" if len(known) else "no episode of known length"
        )
        raise StreamerError(
            f"{dataset.url}: no episode is {duration:g} s long ({longest}): "
            "nothing to bench at this crop duration"
        )


def _median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median crops/s (the upper one of an even count)."""
    return sorted(runs, key=lambda run: run["crops_per_s"])[len(runs) // 2]


def _cpu_seconds(who: int) -> float:
    """CPU seconds of this process (``RUSAGE_SELF``, every thread) or of its
    reaped children (``RUSAGE_CHILDREN``)."""
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def _process_cpu(pid: int) -> float:
    """CPU seconds a running process has used so far (Linux ``/proc``; 0
    elsewhere, where a worker's start-up then counts in the run's CPU)."""
    try:
        with open(f"/proc/{pid}/stat") as file:
            fields = file.read().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _cold(dataset: Dataset) -> dict[str, int]:
    dataset.store.clear_memory_cache()
    return dataset.store.stats.snapshot()


def _measure(dataset: Dataset, workers: int, config: BenchConfig) -> dict[str, Any]:
    streamer = bench_streamer(dataset, config, workers=workers)
    crops = len(streamer)
    before = _cold(dataset)
    children = _cpu_seconds(resource.RUSAGE_CHILDREN)
    with streamer:  # workers start (and import) before the clocks do
        startup = sum(_process_cpu(pid) for pid in streamer.worker_pids)
        parent = _cpu_seconds(resource.RUSAGE_SELF)
        began = time.perf_counter()
        first: float | None = None
        for _ in streamer:
            if first is None:
                first = time.perf_counter() - began
        seconds = time.perf_counter() - began
        parent = _cpu_seconds(resource.RUSAGE_SELF) - parent
    # The workers are reaped by now: their CPU counts, but for their start-up.
    workers_cpu = _cpu_seconds(resource.RUSAGE_CHILDREN) - children - startup
    cpu = parent + workers_cpu
    after = dataset.store.stats.snapshot()
    stats = streamer.stats
    blocks = (after["hits"] + after["disk_hits"] + after["misses"]) - (
        before["hits"] + before["disk_hits"] + before["misses"]
    )
    per = max(stats.yielded, 1)
    return {
        "url": dataset.url,
        "workers": workers,
        "crops": crops,
        "seconds": seconds,
        "crops_per_s": stats.yielded / seconds if seconds else 0.0,
        "cpu_ms_per_crop": cpu * 1000 / per,
        "parent_cpu_ms_per_crop": parent * 1000 / per,
        "worker_cpu_ms_per_crop": workers_cpu * 1000 / per,
        "yielded": stats.yielded,
        "skipped": stats.skipped,
        "paths": dict(stats.decode.paths),
        "requests": stats.requests,
        "bytes_read": stats.bytes_read,
        "requests_per_crop": stats.requests / per,
        "bytes_per_crop": stats.bytes_read / per,
        "p50_ms": stats.percentile_ms(50),
        "p99_ms": stats.percentile_ms(99),
        "first_crop_ms": None if first is None else first * 1000,
        "cache_hit_rate": stats.cache_hits / blocks if blocks else None,
        "queue_wait_s": stats.queue_wait_s,
    }


def _baseline(dataset: Dataset, config: BenchConfig) -> dict[str, Any]:
    """The naive path on the same crops: whole blob out, PyAV seeks, decode, slice.

    A crop the naive path cannot make is counted by its reason in
    ``baseline_failed`` (it still took its time), not raised."""
    streamer = bench_streamer(dataset, config, workers=0)
    _cold(dataset)
    began = time.perf_counter()
    nbytes, failed = _naive_crops(dataset, streamer)
    seconds = time.perf_counter() - began
    crops = max(len(streamer), 1)
    return {
        "baseline_crops_per_s": len(streamer) / seconds if seconds else 0.0,
        "baseline_bytes_per_crop": nbytes / crops,
        "baseline_failed": failed,
    }


def _limit(dataset: Dataset, config: BenchConfig) -> dict[str, Any]:
    """The pure decode of the same crops' packets (``limit.py``), CPU ms per
    crop; a crop it cannot decode is counted by reason in ``limit_failed``
    and left out of the mean."""
    streamer = bench_streamer(dataset, config, workers=0)
    requests = sorted(
        (streamer.request(position)[1] for position in range(len(streamer))),
        key=lambda request: (request.key, request.start),
    )
    seconds, counted = 0.0, 0
    failed: dict[str, int] = {}
    for key, group in itertools.groupby(requests, key=lambda request: request.key):
        crops = [(request.start, request.end) for request in group]
        blob = dataset.blob(key)
        (data,) = blob.reader.fetch_many_sync([(blob.offset, blob.length)])
        try:
            seconds += limit_seconds([(bytes(data), crops)])
            counted += len(crops)
        except Exception as exc:  # the yardstick failing is reported, not raised
            reason = f"{type(exc).__name__}: {exc}"
            failed[reason] = failed.get(reason, 0) + len(crops)
    return {
        "limit_ms_per_crop": seconds * 1000 / counted if counted else None,
        "limit_failed": failed,
    }


def _naive_crops(dataset: Dataset, streamer: Streamer) -> tuple[int, dict[str, int]]:
    """(bytes read, failed crops by reason) over the streamer's crops."""
    nbytes = 0
    failed: dict[str, int] = {}
    for position in range(len(streamer)):
        _, request = streamer.request(position)
        blob = dataset.blob(request.key)
        (data,) = blob.reader.fetch_many_sync([(blob.offset, blob.length)])
        whole = bytes(data)
        nbytes += len(whole)
        try:
            audio, rate = naive_crop(whole, request.start, request.end)
            if request.mono:
                audio = downmix(audio)
            if request.sample_rate and request.sample_rate != rate:
                resample(audio, rate, request.sample_rate, quality=request.resample_quality)
        except Exception as exc:  # anything on bytes in memory is the naive path failing
            reason = f"{type(exc).__name__}: {exc}"
            failed[reason] = failed.get(reason, 0) + 1
    return nbytes, failed


def naive_crop(data: bytes, start: float, end: float) -> tuple[np.ndarray, int]:
    """What streamer replaces, as training loops do it: open the whole blob
    with PyAV, seek to ``start``, decode, place the frames by their
    timestamps, slice ``[start, end)``; float32 audio and its rate.

    Neither exact (no decoder pre-roll after the seek for mp3, AAC and Opus;
    lengths off by tens of samples) nor reliable (FFmpeg's timestamps can
    jump after a seek: ``ValueError`` when nothing lands in the range). The
    benchmarks' baseline, never a decode path of the library.
    """
    with open_input(io.BytesIO(data)) as container:
        stream = container.streams.audio[0]
        rate = stream.codec_context.sample_rate
        origin = stream.start_time or 0
        container.seek(origin + int(start / stream.time_base), stream=stream)
        first, last = round(start * rate), round(end * rate)
        pieces = []
        for frame in container.decode(stream):
            if frame.pts is None:
                continue
            at = round((frame.pts - origin) * frame.time_base * rate)
            if at >= last:
                break
            audio = frame_to_float32(frame)[:, max(first - at, 0) : max(last - at, 0)]
            if audio.shape[1]:
                pieces.append(audio)
    if not pieces:
        raise ValueError("the range decodes to nothing after the seek")
    return np.concatenate(pieces, axis=1), rate
