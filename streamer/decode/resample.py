"""Sample-rate conversion that lines up with resampling the whole episode.

The resampler is libsoxr (python-soxr), chosen by measurement on 8 s crops
to 16 kHz: its default quality costs a fifth of FFmpeg's libswresample and
a third of scipy's ``resample_poly`` (``benchmarks/bench_resample.py``,
docs/performance.md).

The reference for a resampled crop is: decode the whole episode, resample it
in one pass with the same resampler and quality (``soxr.resample``), slice
the output. A crop resampled on its own matches that reference within float
rounding (1e-6) when

* its input starts at a sample ``i0`` that is a multiple of ``M`` (the rates'
  ratio reduced to ``L/M``), so the filter's phase is the same as in the
  full pass (output ``k`` sits at input ``k * M / L`` in both), and
* it starts ``margin`` input samples early and runs ``margin`` past the end,
  so the filter sees real neighbours, not the zeros it assumes at an edge;
  those extra outputs are cut off.

``window`` computes that input range; ``resample`` runs the resampler over
it in one call. (For a few odd ratios libsoxr steps by a rounded fraction,
so its whole pass drifts off the exact grid and the crop, which restarts
the phase at its window, does not: docs/decoding.md.)
"""

from __future__ import annotations

from dataclasses import dataclass
from math import gcd
from numbers import Integral

import numpy as np
import soxr

from ..formats.frames import sum_channels

__all__ = [
    "CONTEXT",
    "DEFAULT_QUALITY",
    "MAX_SAMPLE_RATE",
    "MIN_SAMPLE_RATE",
    "QUALITIES",
    "ResampleWindow",
    "check_quality",
    "check_sample_rate",
    "crop_span",
    "downmix",
    "end_times",
    "holds_samples",
    "past_the_end",
    "resample",
    "resampled_length",
    "window",
]

#: The libsoxr presets a crop may ask for. ``HQ`` (the default) is libsoxr's
#: 20-bit recipe: passband flat within 0.01 dB to 91 % of the lower rate's
#: Nyquist frequency (7.3 kHz at 16 kHz; -3 dB at 95 %), stopband from
#: Nyquist on at least 120 dB down. ``VHQ`` is the 28-bit recipe (same
#: passband, 170 dB, bounded by float32 at about 150), at 1.5-2x the CPU.
#: libsoxr's ``LQ`` and ``MQ`` are left out: they break the contract (a
#: crop 1.2e-6 and 1.9e-6 from the whole pass at 8 -> 44.1 kHz, whatever
#: the context) for no real saving (0.7-1.3x HQ's CPU). docs/decoding.md
#: has the measured responses.
QUALITIES = ("HQ", "VHQ")
DEFAULT_QUALITY = "HQ"

#: Input samples of context on each side of a crop, per unit of
#: ``max(1, source_rate / target_rate)`` (the filter spans a fixed number of
#: periods of the lower rate). Twice what both presets need for the crop to
#: be within 1e-6 of the full pass (measured: 128 for HQ and VHQ).
CONTEXT = 256


@dataclass(frozen=True)
class ResampleWindow:
    """Which input samples to resample, and which outputs of that run to keep."""

    input_first: int  # first input sample to feed (a multiple of M)
    input_last: int  # one past the last input sample to feed
    skip: int  # outputs to drop from the front of the run
    length: int  # outputs to keep after that


#: The target rates (Hz) a crop may be resampled to: from telephone-band
#: audio up to the highest rate audio interfaces offer. Beyond it a typo
#: (``--sample-rate 1000000000``) wrote gigabytes of interpolated audio.
MIN_SAMPLE_RATE = 1000
MAX_SAMPLE_RATE = 768_000


def check_sample_rate(rate: int | None) -> int | None:
    """``rate`` (``None``: the episode's own) if it is a whole number of Hz
    from ``MIN_SAMPLE_RATE`` to ``MAX_SAMPLE_RATE``; a ``ValueError`` if not."""
    if rate is None:
        return None
    if isinstance(rate, bool) or not isinstance(rate, Integral):
        raise ValueError(f"sample_rate must be a whole number of Hz, not {rate!r}")
    if not MIN_SAMPLE_RATE <= rate <= MAX_SAMPLE_RATE:
        raise ValueError(
            f"sample_rate must be {MIN_SAMPLE_RATE} to {MAX_SAMPLE_RATE} Hz, not {rate}"
        )
    return int(rate)


def check_quality(quality: str) -> str:
    """``quality`` if it names a preset; a ``ValueError`` listing them if not."""
    if quality not in QUALITIES:
        raise ValueError(f"resample quality must be one of {', '.join(QUALITIES)}, not {quality!r}")
    return quality


def window(output_first: int, length: int, source_rate: int, target_rate: int) -> ResampleWindow:
    """The input range whose resampling yields outputs ``[output_first, +length)``.

    Output indices are those of resampling the whole episode from sample 0.
    ``input_last`` may exceed the episode; feed what there is.
    """
    margin = CONTEXT * -(-source_rate // target_rate)
    divisor = gcd(source_rate, target_rate)
    step_in, step_out = source_rate // divisor, target_rate // divisor
    first_needed = output_first * step_in // step_out
    input_first = max(0, (first_needed - margin) // step_in * step_in)
    last_needed = -(-(output_first + length) * step_in // step_out)
    return ResampleWindow(
        input_first=input_first,
        input_last=last_needed + margin,
        skip=output_first - input_first * step_out // step_in,
        length=length,
    )


def resampled_length(samples: int, source_rate: int, target_rate: int) -> int:
    """How many samples resampling ``samples`` at ``source_rate`` in one pass
    yields: the resampled episode's length, where its crops end.

    ``soxr.resample``'s length, ``samples / (source / target)`` rounded half
    up as libsoxr computes it, in floating point: an exact half (48 960
    samples at 48 -> 11.025 kHz, 11 245.5) can land either side of it
    (11 245 there; 40 samples at 8 -> 44.1 kHz give 221). A window that runs
    into the episode's end, resampled alone, rounds its own length, so its
    crop is cut here, not by that (``decode.crop``)."""
    if source_rate == target_rate:
        return samples
    return int(samples / (source_rate / target_rate) + 0.5)


def crop_span(start: float, end: float, rate: int, target: int | None) -> tuple[int, int, int]:
    """Native samples ``[first, last)`` to decode for the crop ``[start, end)``
    seconds, and the resampled outputs to drop from the front: the crop
    itself (skip 0) without ``target`` or at the native rate, else the
    resampler's ``window`` around it."""
    if not target or target == rate:
        return round(start * rate), round(end * rate), 0
    first = round(start * target)
    span = window(first, round(end * target) - first, rate, target)
    return span.input_first, span.input_last, span.skip


def past_the_end(start: float, samples: int, rate: int, target: int | None) -> bool:
    """Whether a crop starting at ``start`` seconds starts where an episode
    of ``samples`` at ``rate`` has ended: at the native rate, or resampled
    to ``target``, at the resampled episode's end (``resampled_length``:
    its last samples lie past the native ones' rounding)."""
    if not target or target == rate:
        return round(start * rate) >= samples
    return round(start * target) >= resampled_length(samples, rate, target)


def holds_samples(
    start: np.ndarray, end: np.ndarray, duration: np.ndarray, rate: np.ndarray, target: int | None
) -> np.ndarray:
    """Whether each crop ``[start, end)`` of an episode of ``duration`` seconds
    at ``rate`` holds a sample as a crop is cut (``crop_span``): it starts
    before the episode's end (``past_the_end``), and it is a sample long
    once rounded, at the native rate (``round(start*rate) <
    round(end*rate)``) or resampled to ``target`` (``round(start*target) <
    round(end*target)``). A crop of unknown ``rate`` (NaN)
    is taken to hold one."""
    first = np.round(start * rate)
    samples = np.round(duration * rate)
    inside = first < samples
    native = first < np.round(end * rate)
    if target is not None:
        resampled = _resampled_lengths(samples, rate, target)
        inside = np.where(rate == target, inside, np.round(start * target) < resampled)
        native = np.where(rate == target, native, np.round(start * target) < np.round(end * target))
    return np.isnan(rate) | (inside & native)


def end_times(duration: np.ndarray, rate: np.ndarray, target: int | None) -> np.ndarray:
    """The end, in seconds, of a crop that runs to each episode's end (of
    ``duration`` seconds at ``rate``): its duration, or, resampled to
    ``target``, at least a time whose samples (``round(end * target)``)
    reach the resampled episode's end (``resampled_length``). libsoxr
    rounds that length half up and ``round`` the time half to even, so a
    window ending at the duration left the episode's last resampled sample
    out (4.1 s at 16 -> 11.025 kHz: 45 202 of 45 203)."""
    if target is None:
        return duration
    resampled = _resampled_lengths(np.round(duration * rate), rate, target)
    return np.where(rate == target, duration, np.fmax(duration, resampled / target))


def _resampled_lengths(samples: np.ndarray, rate: np.ndarray, target: int) -> np.ndarray:
    """``resampled_length`` of each episode, as libsoxr computes it."""
    return np.floor(samples / (rate / target) + 0.5)


def resample(
    samples: np.ndarray, source_rate: int, target_rate: int, *, quality: str = DEFAULT_QUALITY
) -> np.ndarray:
    """Resample float32 ``(channels, n)`` audio in one pass (``soxr.resample``).

    Channel by channel: libsoxr wants interleaved frames, and transposing
    there and back costs more than the separate calls (measured: 3.3 against
    5.4 ms for 8 s of stereo)."""
    if source_rate == target_rate:
        return samples
    rows = [
        soxr.resample(
            np.ascontiguousarray(row, dtype=np.float32), source_rate, target_rate, quality
        )
        for row in samples
    ]
    if len(rows) == 1:
        return rows[0][np.newaxis]  # a view: no copy of a mono crop
    return np.stack(rows) if rows else np.zeros((0, 0), dtype=np.float32)


def downmix(samples: np.ndarray) -> np.ndarray:
    """Mono as the mean of the channels, shape ``(1, n)``: summed in a fixed
    order (``frames.sum_channels``, as a mono crop's decoder sums its
    frames), then divided.

    Not FFmpeg's default downmix, which is ``0.7071 * (L + R)`` for stereo.
    """
    if samples.shape[0] == 1:
        return samples
    out = sum_channels(samples, np.empty(samples.shape[1], dtype=np.float32))
    out /= samples.shape[0]
    return out[np.newaxis]
