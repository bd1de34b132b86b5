"""Crops resampled on their own equal the whole episode resampled, then sliced."""

from __future__ import annotations

import av
import numpy as np
import pytest

from streamer.decode.resample import downmix, resample, window
from streamer.synth import signal


def _reference(samples: np.ndarray, source: int, target: int, chunk: int = 1152) -> np.ndarray:
    """The whole signal through FFmpeg's resampler frame by frame, as a decoder feeds it."""
    layout = {1: "mono", 2: "stereo"}[samples.shape[0]]
    resampler = av.AudioResampler(format="fltp", layout=layout, rate=target)
    out = []
    for start in range(0, samples.shape[1], chunk):
        frame = av.AudioFrame.from_ndarray(
            np.ascontiguousarray(samples[:, start : start + chunk]), format="fltp", layout=layout
        )
        frame.sample_rate = source
        out += [o.to_ndarray() for o in resampler.resample(frame)]
    out += [o.to_ndarray() for o in resampler.resample(None)]
    return np.concatenate(out, axis=1)


@pytest.mark.parametrize(
    ("source", "target"),
    [
        (44100, 16000),
        (48000, 16000),
        (22050, 16000),
        (48000, 44100),
        (16000, 48000),
        (8000, 44100),
        (192000, 8000),
    ],
)
def test_crops_match_the_full_resample_bit_for_bit(source: int, target: int) -> None:
    seconds = 5.0
    samples = signal(seconds, source, 2, seed=3)
    full = _reference(samples, source, target)
    assert full.shape[1] == round(seconds * target)
    for start, end in [(0.0, 1.0), (0.01, 0.5), (1.2345, 3.0), (2.0, 4.999), (4.0, 5.0)]:
        first, length = round(start * target), round((end - start) * target)
        plan = window(first, length, source, target)
        assert plan.input_first <= first * source / target
        run = resample(samples[:, plan.input_first : plan.input_last], source, target)
        crop = run[:, plan.skip : plan.skip + length]
        expected = full[:, first : first + length]
        assert crop.shape == expected.shape
        np.testing.assert_array_equal(crop, expected)


def test_same_rate_is_untouched_and_mono_is_the_mean() -> None:
    samples = signal(0.1, 16000, 2)
    assert resample(samples, 16000, 16000) is samples
    np.testing.assert_allclose(downmix(samples)[0], (samples[0] + samples[1]) / 2, rtol=1e-6)
    assert downmix(samples[:1]).shape == (1, samples.shape[1])


def test_more_than_two_channels_resample_per_channel() -> None:
    samples = signal(0.5, 48000, 3)
    out = resample(samples, 48000, 16000)
    assert out.shape == (3, 8000)
    np.testing.assert_array_equal(out[2:], resample(samples[2:], 48000, 16000))
