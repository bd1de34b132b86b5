"""The dense crop sweep (``benchmarks/corpus_sweep.py``, ``tests/corpus/test_sweep.py``).

Where ``testkit.corpus.crop_points`` draws a few crops per file, the sweep
reads every class of position that an index or a planner could get wrong
(``testkit.corpus.dense_spans``: on and next to every seek point, at its
pre-roll's edges, ending at the end, one sample, nearly the whole file, and
random ones) through the index and through the fallback alone, and a subset
resampled and downmixed, each against the full decode as docs/decoding.md
defines it (resampled: the full decode, downmixed with ``mono``, resampled
in one pass and sliced on the target's grid).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from streamer.dataset.dataset import Dataset
from streamer.decode.resample import downmix, resample
from testkit.corpus import (
    CropCheck,
    Reference,
    Span,
    check_crops,
    dense_spans,
    index_kind,
    preroll_samples,
    served_index,
)

#: A lossless crop resampled: the resampler's float rounding (docs/decoding.md).
RESAMPLED_WITHIN = 1e-6


@dataclass
class Sweep:
    """One file's sweep: crops and max error per path (``index``,
    ``fallback``, ``<rate>`` / ``<rate> mono`` through the index and
    ``fallback <rate>...``), and every failure with its class of position."""

    key: str
    codec: str = ""
    index: str = ""
    points: int = 0
    crops: dict[str, int] = field(default_factory=dict)
    max_error: dict[str, float] = field(default_factory=dict)
    pns: int = 0
    failures: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def exact(self) -> bool:
        return not self.failures


def _read(dataset: Dataset, key: str, rate: int | None, mono: bool) -> Callable:
    return lambda start, end: dataset.read_crop(key, start, end, sample_rate=rate, mono=mono)


def _run(
    sweep: Sweep,
    path: str,
    read: Callable[[float, float], np.ndarray],
    reference: np.ndarray,
    native: int,
    rate: int,
    codec: str,
    spans: list[Span],
    within: float,
) -> None:
    """Read ``spans`` (native samples) with ``read`` and compare them with
    ``reference`` at ``rate``, one check per class so a failure names it."""
    by_kind: dict[str, list[tuple[float, float]]] = {}
    for kind, first, last in spans:
        by_kind.setdefault(kind, []).append((first / native, last / native))
    for kind, points in by_kind.items():
        check = check_crops(read, reference, rate, codec, points, CropCheck(), within)
        sweep.crops[path] = sweep.crops.get(path, 0) + check.crops
        sweep.max_error[path] = max(sweep.max_error.get(path, 0.0), check.max_error)
        sweep.pns += check.pns
        sweep.failures += [f"{path}: {kind}: {failure}" for failure in check.failures]


def _on_grid(spans: list[Span], native: int, target: int, length: int) -> list[Span]:
    """The spans that are crops of at least one sample at ``target`` and
    start before the resampled episode's end (``length`` samples)."""
    kept = []
    for kind, first, last in spans:
        a, b = round(first / native * target), round(last / native * target)
        if a < b and a < length:
            kept.append((kind, first, last))
    return kept


def sweep_file(
    key: str,
    reference: Reference,
    indexed: Dataset,
    plain: Dataset,
    *,
    cap: int,
    random_crops: int,
    fallback_cap: int | None = None,
    rates: tuple[int, ...] = (),
    resampled_cap: int = 8,
    seed: int = 0,
) -> Sweep:
    """Sweep one file (``reference``: its full decode) through ``indexed``
    (its seek index) and ``plain`` (the same file packed without one), with
    ``cap`` seek points (``fallback_cap`` through the fallback, whose crops
    cost the decode from the start up to them: default ``cap``; so do the
    index's for a codec decoded from the first packet, which get as many);
    ``rates``: also resampled to each, mono and not, with ``resampled_cap``
    seek points and a quarter of the random crops."""
    began = time.perf_counter()
    fallback_cap = cap if fallback_cap is None else fallback_cap
    assert reference.audio is not None
    full, native, codec = reference.audio, reference.sample_rate, reference.codec
    index = served_index(indexed, key)
    sweep = Sweep(key, codec, index_kind(index))
    sweep.points = len(index.sample_pos) if index.ok else 0
    length = full.shape[1]
    if preroll_samples(index) >= length:
        cap = min(cap, fallback_cap)  # decoded from the first packet, as the fallback does
    spans = dense_spans(index, length, native, random.Random(seed), cap, random_crops)
    _run(sweep, "index", _read(indexed, key, None, False), full, native, native, codec, spans, 0.0)
    if fallback_cap != cap:
        spans = dense_spans(index, length, native, random.Random(seed), fallback_cap, random_crops)
    _run(sweep, "fallback", _read(plain, key, None, False), full, native, native, codec, spans, 0.0)
    lossless_within = RESAMPLED_WITHIN
    few = dense_spans(
        index, length, native, random.Random(seed + 1), resampled_cap, random_crops // 4
    )
    for target in rates:
        for mono in (False, True):
            want = resample(downmix(full) if mono else full, native, target)
            on_grid = _on_grid(few, native, target, want.shape[1])
            name = f"{target}{' mono' if mono else ''}"
            for path, dataset in ((name, indexed), (f"fallback {name}", plain)):
                read = _read(dataset, key, target, mono)
                _run(sweep, path, read, want, native, target, codec, on_grid, lossless_within)
    sweep.seconds = time.perf_counter() - began
    return sweep
