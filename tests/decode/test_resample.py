"""Crops resampled on their own equal the whole episode resampled, then sliced.

The reference is the resampler's own one-pass output over the whole signal
(``soxr.resample``, same quality); a crop is its ``window`` resampled alone
and trimmed. The contract: within 1e-6, for any offset and length, at the
episode's start and end, for both presets offered.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import soxr

from streamer.decode.crop import CropRequest
from streamer.decode.resample import (
    DEFAULT_QUALITY,
    MAX_SAMPLE_RATE,
    MIN_SAMPLE_RATE,
    QUALITIES,
    check_quality,
    check_sample_rate,
    crop_span,
    downmix,
    resample,
    window,
)
from streamer.synth import signal

#: The contract's bound on a resampled crop against the resampled whole.
WITHIN = 1e-6

RATES = [
    (44100, 16000),
    (48000, 16000),
    (22050, 16000),
    (8000, 16000),
    (16000, 48000),
    (8000, 44100),
    (48000, 44100),
    (192000, 8000),
]


def _crop(samples: np.ndarray, source: int, target: int, first: int, length: int, quality: str):
    """Outputs ``[first, first + length)`` resampled from their window alone."""
    plan = window(first, length, source, target)
    assert plan.input_first % (source // np.gcd(source, target)) == 0  # phase-aligned
    run = resample(samples[:, plan.input_first : plan.input_last], source, target, quality=quality)
    return run[:, plan.skip : plan.skip + length]


def _assert_within(got: np.ndarray, want: np.ndarray, what: str) -> None:
    assert got.shape == want.shape, f"{what}: {got.shape} != {want.shape}"
    assert got.dtype == np.float32
    error = float(np.abs(got - want).max()) if got.size else 0.0
    assert error <= WITHIN, f"{what}: max abs error {error:.2e}"


@pytest.mark.parametrize(("source", "target"), RATES)
def test_random_crops_match_the_whole_resample(source: int, target: int) -> None:
    seconds = 6.0
    samples = signal(seconds, source, 2, seed=3)
    whole = resample(samples, source, target)
    total = whole.shape[1]
    assert abs(total - seconds * target) <= 1
    rng = np.random.default_rng(source * 7 + target)
    for _ in range(25):
        length = int(rng.integers(1, 2 * target))
        first = int(rng.integers(0, total - length + 1))
        _assert_within(
            _crop(samples, source, target, first, length, DEFAULT_QUALITY),
            whole[:, first : first + length],
            f"{source}->{target} [{first}, +{length})",
        )


@pytest.mark.parametrize("quality", QUALITIES)
@pytest.mark.parametrize(("source", "target"), [(44100, 16000), (16000, 44100), (8000, 44100)])
def test_every_preset_keeps_the_contract(quality: str, source: int, target: int) -> None:
    samples = signal(4.0, source, 1, seed=5)
    whole = resample(samples, source, target, quality=quality)
    rng = np.random.default_rng(11)
    for _ in range(10):
        length = int(rng.integers(1, target))
        first = int(rng.integers(0, whole.shape[1] - length + 1))
        _assert_within(
            _crop(samples, source, target, first, length, quality),
            whole[:, first : first + length],
            f"{quality} {source}->{target} [{first}, +{length})",
        )


@pytest.mark.parametrize(("source", "target"), RATES)
def test_edges_and_single_samples(source: int, target: int) -> None:
    """The first and last outputs of the episode, one-sample crops anywhere,
    and crops whose window runs past either end (fed only what there is)."""
    samples = signal(2.0, source, 1, seed=9)
    whole = resample(samples, source, target)
    total = whole.shape[1]
    cases = [(0, 1), (0, total), (total - 1, 1), (1, 1), (total // 2, 1), (0, 7)]
    cases += [(total - 7, 7), (total - target // 10, target // 10), (3, total - 6)]
    for first, length in cases:
        _assert_within(
            _crop(samples, source, target, first, length, DEFAULT_QUALITY),
            whole[:, first : first + length],
            f"{source}->{target} [{first}, +{length}) of {total}",
        )


def test_crop_span_covers_the_window_and_keeps_native_crops_exact() -> None:
    assert crop_span(1.0, 2.0, 44100, None) == (44100, 88200, 0)
    assert crop_span(1.0, 2.0, 44100, 44100) == (44100, 88200, 0)
    first, last, skip = crop_span(1.0, 2.0, 44100, 16000)
    assert first % 441 == 0 and first < 44100 and last > 88200 and skip > 0
    plan = window(16000, 16000, 44100, 16000)
    assert (first, last, skip) == (plan.input_first, plan.input_last, plan.skip)


def test_same_rate_is_untouched_and_mono_is_the_mean() -> None:
    samples = signal(0.1, 16000, 2)
    assert resample(samples, 16000, 16000) is samples
    np.testing.assert_allclose(downmix(samples)[0], (samples[0] + samples[1]) / 2, rtol=1e-6)
    assert downmix(samples[:1]).shape == (1, samples.shape[1])


def test_channels_are_resampled_alone_and_alike() -> None:
    samples = signal(0.5, 48000, 3)
    out = resample(samples, 48000, 16000)
    assert out.shape == (3, 8000) and out.dtype == np.float32
    np.testing.assert_array_equal(out[2:], resample(samples[2:], 48000, 16000))
    np.testing.assert_array_equal(out[0], soxr.resample(samples[0], 48000, 16000, "HQ"))


def test_the_default_preset_is_flat_in_its_passband_and_rejects_above_nyquist() -> None:
    """What the docs promise of HQ at 44.1 -> 16 kHz: flat within 0.01 dB up to
    91 % of the output's Nyquist (7.28 kHz), and a tone above 8 kHz (it would
    alias) at least 120 dB down."""
    rate, target = 44100, 16000
    t = np.arange(rate * 2) / rate

    def level(frequency: float) -> float:
        tone = np.sin(2 * np.pi * frequency * t).astype(np.float32)[np.newaxis]
        out = resample(tone, rate, target)[0, target // 2 : -target // 2]
        return 20 * np.log10(np.sqrt(2 * np.mean(out.astype(np.float64) ** 2)))

    for frequency in (100.0, 1000.0, 5000.0, 7280.0):
        assert abs(level(frequency)) < 0.01, frequency
    for frequency in (8500.0, 12000.0, 20000.0):
        assert level(frequency) < -120, frequency


def test_unknown_presets_are_refused_by_name() -> None:
    assert check_quality("VHQ") == "VHQ"
    with pytest.raises(ValueError, match=r"HQ, VHQ, not 'best'"):
        check_quality("best")
    with pytest.raises(ValueError, match=r"not 'LQ'"):  # libsoxr's, but off the contract
        check_quality("LQ")
    with pytest.raises(ValueError, match="resample quality"):
        CropRequest("k", 0.0, 1.0, sample_rate=16000, resample_quality="hq")


def test_target_rates_are_bounded_before_any_work(packed) -> None:  # type: ignore[no-untyped-def]
    """``read_crop(..., sample_rate=10**9)`` resampled a 1 s crop to a
    billion samples per channel (``crop -o x.wav`` wrote gigabytes), and a
    ``Streamer`` took any rate until its first crop; now both refuse it at once."""
    import streamer
    from streamer.pipeline import RandomCrops, Streamer

    dataset = streamer.open_dataset(packed)
    key = next(dataset.keys())
    for rate in (10**9, 768_001, 999, 0, -16000):
        with pytest.raises(ValueError, match=rf"sample_rate must be 1000 to 768000 Hz, not {rate}"):
            dataset.read_crop(key, 0.0, 1.0, sample_rate=rate)
        with pytest.raises(ValueError, match=rf"sample_rate must be 1000 to 768000 Hz, not {rate}"):
            Streamer(dataset, RandomCrops(1.0), sample_rate=rate, workers=0)
    for rate in (16000.0, "16000", True):
        with pytest.raises(ValueError, match="sample_rate must be a whole number of Hz"):
            CropRequest("k", 0.0, 1.0, sample_rate=rate)  # type: ignore[arg-type]
    assert check_sample_rate(MAX_SAMPLE_RATE) == MAX_SAMPLE_RATE
    assert check_sample_rate(np.int64(MIN_SAMPLE_RATE)) == MIN_SAMPLE_RATE
    assert dataset.read_crop(key, 0.0, 0.01, sample_rate=MIN_SAMPLE_RATE).shape[1] == 10


def test_crop_ranges_are_finite(packed) -> None:  # type: ignore[no-untyped-def]
    """``read_crop(key, 1, inf, pad=True)`` died on an OverflowError deep in
    the trim; NaN or infinite ends are refused by name."""
    import streamer

    dataset = streamer.open_dataset(packed)
    key = next(dataset.keys())
    for start, end in ((1.0, math.inf), (math.nan, 1.0), (0.0, math.nan), (-1.0, 1.0)):
        with pytest.raises(ValueError, match=r"needs 0 <= start < end, both finite"):
            dataset.read_crop(key, start, end, pad=True)


#: The rates audio comes at, and those training resamples to.
COMMON_SOURCES = [8000, 11025, 16000, 22050, 24000, 32000, 44100, 48000, 88200, 96000, 192000]
COMMON_TARGETS = [8000, 16000, 22050, 24000, 44100, 48000]


def test_every_common_rate_pair_is_stepped_exactly() -> None:
    """Between the common rates, a crop deep into an episode is the one
    pass's slice: libsoxr steps these ratios exactly (the pairs it does not,
    below, are odd rates)."""
    for source in COMMON_SOURCES:
        samples = signal(12.0, source, 1, seed=source)
        for target in COMMON_TARGETS:
            if target == source:
                continue
            whole = resample(samples, source, target)
            first = whole.shape[1] - target // 2
            got = _crop(samples, source, target, first, target // 4, DEFAULT_QUALITY)
            _assert_within(got, whole[:, first : first + target // 4], f"{source}->{target}")


@pytest.mark.parametrize(("source", "target"), [(44056, 48000), (11127, 44100)])
def test_crops_stay_on_the_exact_grid_where_the_one_pass_drifts(source: int, target: int) -> None:
    """Some odd ratios libsoxr steps by a rounded fraction, so its one pass
    drifts off the exact grid (off a sine by 2e-5 after a minute, 1e-3
    after an hour, docs/decoding.md); a crop, resampled from its own
    phase-aligned window, stays on it."""
    seconds, tone = 70.0, 3000.0
    samples = 0.5 * np.sin(2 * np.pi * tone * np.arange(round(seconds * source)) / source)
    samples = samples.astype(np.float32)[np.newaxis]
    first, length = 60 * target, target // 10

    def off_the_sine(got: np.ndarray) -> float:
        ideal = 0.5 * np.sin(2 * np.pi * tone * np.arange(first, first + length) / target)
        return float(np.abs(got[0] - ideal).max())

    crop = off_the_sine(_crop(samples, source, target, first, length, DEFAULT_QUALITY))
    one_pass = off_the_sine(resample(samples, source, target)[:, first : first + length])
    assert crop <= WITHIN
    assert one_pass > 10 * crop  # the documented drift: if libsoxr stops drifting, say so
