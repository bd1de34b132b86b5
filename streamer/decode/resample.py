"""Sample-rate conversion that lines up with resampling the whole episode.

The reference for a resampled crop is: decode the whole episode, resample it
in one pass with FFmpeg's resampler (PyAV ``AudioResampler``), slice the
output. A crop resampled on its own matches that reference bit for bit when

* its input starts at a sample ``i0`` that is a multiple of ``M`` (the rates'
  ratio reduced to ``L/M``), so the resampler's filter phase is the same as
  in the full pass (output ``k`` sits at input ``k * M / L`` in both), and
* it starts ``margin`` input samples early and runs ``margin`` past the end,
  so the filter sees real neighbours, not the zeros it assumes at an edge;
  those extra outputs are cut off.

``window`` computes that input range; ``resample`` runs the resampler with
its final flush (it holds back its last samples until flushed).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import gcd

import av
import numpy as np

__all__ = ["DEFAULT_MARGIN", "ResampleWindow", "crop_span", "downmix", "resample", "window"]

#: Least input samples of context on each side of a crop. FFmpeg's default
#: filter spans 32 taps at the lower of the two rates, so downsampling by R
#: needs about 32 * R input samples; ``window`` takes the larger of the two.
DEFAULT_MARGIN = 256
_TAPS = 32

_LAYOUTS = {1: "mono", 2: "stereo"}


@dataclass(frozen=True)
class ResampleWindow:
    """Which input samples to resample, and which outputs of that run to keep."""

    input_first: int  # first input sample to feed (a multiple of M)
    input_last: int  # one past the last input sample to feed
    skip: int  # outputs to drop from the front of the run
    length: int  # outputs to keep after that


def window(
    output_first: int,
    length: int,
    source_rate: int,
    target_rate: int,
    *,
    margin: int | None = None,
) -> ResampleWindow:
    """The input range whose resampling yields outputs ``[output_first, +length)``.

    Output indices are those of resampling the whole episode from sample 0.
    ``input_last`` may exceed the episode; feed what there is.
    """
    if margin is None:
        margin = max(DEFAULT_MARGIN, _TAPS * -(-source_rate // target_rate))
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


def crop_span(start: float, end: float, rate: int, target: int | None) -> tuple[int, int, int]:
    """Native samples ``[first, last)`` to decode for the crop ``[start, end)``
    seconds, and the resampled outputs to drop from the front: the crop
    itself (skip 0) without ``target`` or at the native rate, else the
    resampler's ``window`` around it."""
    if not target or target == rate:
        return round(start * rate), round(end * rate), 0
    span = window(round(start * target), round((end - start) * target), rate, target)
    return span.input_first, span.input_last, span.skip


def resample(samples: np.ndarray, source_rate: int, target_rate: int) -> np.ndarray:
    """Resample float32 ``(channels, n)`` audio in one pass, flushed at the end."""
    if source_rate == target_rate:
        return samples
    channels = samples.shape[0]
    layout = _LAYOUTS.get(channels)
    if layout is None:
        # FFmpeg's resampler wants a channel layout: resample channels one by one.
        return np.concatenate(
            [resample(samples[c : c + 1], source_rate, target_rate) for c in range(channels)]
        )
    resampler = av.AudioResampler(format="fltp", layout=layout, rate=target_rate)
    frame = av.AudioFrame.from_ndarray(
        np.ascontiguousarray(samples, dtype=np.float32), format="fltp", layout=layout
    )
    frame.sample_rate = source_rate
    pieces = [out.to_ndarray() for out in resampler.resample(frame)]
    pieces += [out.to_ndarray() for out in resampler.resample(None)]
    if not pieces:
        return np.zeros((channels, 0), dtype=np.float32)
    return np.concatenate(pieces, axis=1)


def downmix(samples: np.ndarray) -> np.ndarray:
    """Mono as the mean of the channels, shape ``(1, n)``.

    Not FFmpeg's default downmix, which is ``0.7071 * (L + R)`` for stereo.
    """
    if samples.shape[0] == 1:
        return samples
    return samples.mean(axis=0, keepdims=True, dtype=np.float32)
