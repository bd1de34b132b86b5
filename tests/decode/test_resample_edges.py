"""Resampled crops at the episode's edges and seams, end to end.

Through the index and through the fallback (the same dataset without
``seek_index/``), against the contract (docs/decoding.md): the full decode
(downmixed first, with ``mono``) resampled in one pass by libsoxr, sliced on
the target rate's grid.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import soxr
from helpers import slow

from streamer import open_dataset
from streamer.dataset import Dataset
from streamer.decode.resample import downmix, holds_samples, resample, resampled_length
from streamer.synth import CODECS, encode, signal
from streamer.write.pack import pack
from testkit.reference import full_decode

#: key -> (codec, rate, channels, samples): lossless, so the bound is the
#: resampler's. 48 960 samples at 48 kHz are 11 245.5 at 11.025 kHz, which
#: libsoxr rounds down (its length is computed in floating point); 72 000
#: are 16 537.5, which it rounds up, while the last 25 280 alone (a crop's
#: window from 1 s on) are 5 806.5, which it rounds down.
FILES = {
    "flac-22k": ("flac", 22050, 1, 22050),
    "wav-44k": ("wav", 44100, 2, 44100),
    "wav-8k": ("wav", 8000, 1, 8000),
    "wav-48k": ("wav", 48000, 1, 48960),
    "wav-48k-up": ("wav", 48000, 2, 72000),
}
WITHIN = 1e-6


@pytest.fixture(scope="module")
def datasets(tmp_path_factory: pytest.TempPathFactory) -> tuple[Dataset, Dataset]:
    """The files packed with their index, and the same dataset without one."""
    root = tmp_path_factory.mktemp("resample-edges")
    for key, (codec, rate, channels, samples) in FILES.items():
        data = encode(signal(samples / rate, rate, channels, seed=len(key)), rate, codec)
        (root / "src").mkdir(exist_ok=True)
        (root / "src" / f"{key}.{CODECS[codec].extension}").write_bytes(data)
    pack(root / "src", root / "indexed", progress=False)
    shutil.copytree(
        root / "indexed", root / "bare", ignore=shutil.ignore_patterns("seek_index", "*.json")
    )
    indexed, bare = open_dataset(root / "indexed"), open_dataset(root / "bare")
    assert indexed.seek_index(next(iter(FILES))) is not None
    assert "seek_index" not in {p.name for p in (root / "bare").iterdir()}
    return indexed, bare


def _reference(dataset: Dataset, key: str, target: int, mono: bool) -> np.ndarray:
    full, rate = full_decode(bytes(dataset.blob(key).view()))
    return resample(downmix(full) if mono else full, rate, target)


def _within(got: np.ndarray, want: np.ndarray, what: str) -> float:
    assert got.shape == want.shape, f"{what}: {got.shape} != {want.shape}"
    error = float(np.abs(got - want).max()) if got.size else 0.0
    assert error <= WITHIN, f"{what}: max abs error {error:.2e}"
    return error


@pytest.mark.parametrize("target", [48000, 192000, 16000, 11025, 44100])
def test_the_last_resampled_samples_can_be_cropped(
    datasets: tuple[Dataset, Dataset], target: int
) -> None:
    """The resampled episode's last samples: a crop starting on one of them
    raised "past the end" whenever its start rounded to the native end
    (22.05 -> 48 kHz: the last two of 48 000 samples, 44.1 -> 192 kHz: the
    last four), through the index and the fallback alike."""
    for key in FILES:
        reference = _reference(datasets[0], key, target, mono=False)
        total = reference.shape[1]
        rate, samples = FILES[key][1], FILES[key][3]
        assert total == resampled_length(samples, rate, target)
        for dataset in datasets:
            for back in (1, 2, 3, 5):
                start = (total - back) / target
                for end in ((total) / target, (total + 7) / target):
                    got = dataset.read_crop(key, start, end, sample_rate=target)
                    _within(got, reference[:, total - back :], f"{key} {target} [{start}, {end})")
            with pytest.raises(Exception, match="past the end"):
                dataset.read_crop(key, total / target + 0.2 / target, 2.0, sample_rate=target)


def test_a_range_shorter_than_an_output_sample_says_so(
    datasets: tuple[Dataset, Dataset],
) -> None:
    """A range of one native sample holds none at 16 kHz (its ends round to
    the same output sample): it was "past the end of the episode" when it
    ended at the end, and "decodes to nothing" elsewhere, through the index
    and the fallback alike. At the native rate it is a sample."""
    key, rate = "wav-44k", 44100
    for dataset in datasets:
        for first in (0, 1000, rate - 1):
            start, end = first / rate, (first + 1) / rate
            with pytest.raises(Exception, match=r"holds no sample at 16000 Hz") as raised:
                dataset.read_crop(key, start, end, sample_rate=16000)
            assert "wav-44k" in str(raised.value)
            assert dataset.read_crop(key, start, end).shape == (2, 1)


def test_samplers_plan_the_last_resampled_samples() -> None:
    """``holds_samples`` (what samplers keep) agrees with the crop: a crop on
    the resampled episode's last sample holds one, one past it does not."""
    duration, rate = np.array([1.0, 1.0]), np.array([22050.0, 22050.0])
    start = np.array([47999 / 48000, 48000 / 48000])
    held = holds_samples(start, start + 1 / 48000, duration, rate, 48000)
    assert held.tolist() == [True, False]


@pytest.mark.parametrize("target", [16000, 7350, *slow(48000, 44100)])
def test_adjacent_resampled_crops_tile_the_crop_they_split(
    datasets: tuple[Dataset, Dataset], target: int
) -> None:
    """``[a, b)`` and ``[b, c)`` resampled are ``[a, c)`` resampled, no output
    twice or lost at ``b``, as at the native rate: each is the resampled
    episode's ``[round(start*target), round(end*target))``. A length of
    ``round((end-start)*target)`` put the seam one sample off for a third
    to a half of random ``b`` (44.1 -> 16 kHz: 14 of 30)."""
    rng = np.random.default_rng(target)
    for key in FILES:
        reference = _reference(datasets[0], key, target, mono=True)
        for _ in range(12):
            a, b = sorted(float(t) for t in rng.uniform(0.0, 0.99, 2))
            c = b + float(rng.uniform(1e-4, 0.06))  # up to past the end
            for dataset in datasets:
                pieces = [
                    dataset.read_crop(key, s, e, sample_rate=target, mono=True)
                    for s, e in ((a, b), (b, c), (a, c))
                ]
                for piece, (s, e) in zip(pieces, ((a, b), (b, c), (a, c)), strict=True):
                    want = reference[:, round(s * target) : round(e * target)]
                    _within(piece, want, f"{key} {target} [{s}, {e})")
                _within(
                    np.concatenate(pieces[:2], axis=1), pieces[2], f"{key} {target} {a} {b} {c}"
                )


def test_the_native_rate_asked_for_is_the_native_crop(datasets: tuple[Dataset, Dataset]) -> None:
    """``sample_rate`` equal to the episode's rate is the native crop: the
    same samples as without it (one rule for the length, whichever rate)."""
    rng = np.random.default_rng(5)
    for key, (_, rate, _, _) in FILES.items():
        for _ in range(20):
            start = float(rng.uniform(0, 0.9))
            end = start + float(rng.uniform(0.5, 300)) / rate
            native = datasets[0].read_crop(key, start, end)
            np.testing.assert_array_equal(
                datasets[0].read_crop(key, start, end, sample_rate=rate), native
            )
            assert native.shape[1] == round(end * rate) - round(start * rate)


def test_resampled_length_is_libsoxrs() -> None:
    """libsoxr's length for ``n`` samples, exact halves included: it rounds
    ``n / (sr / target)`` computed in floating point, so 48 960 samples at
    48 -> 11.025 kHz (11 245.5) give 11 245 but 40 at 8 -> 44.1 kHz (220.5)
    give 221."""
    rng = np.random.default_rng(3)
    pairs = [(48000, 11025), (8000, 44100), (48000, 44100), (192000, 44100), (44100, 16000)]
    pairs += [(16000, 24000), (96000, 8000), (22050, 48000), (7350, 16000)]
    for source, target in pairs:
        halves = [n for n in range(1, 20000) if (2 * n * target) % source == 0][:12]
        for n in halves + [int(n) for n in rng.integers(1, 200_000, 6)]:
            got = soxr.resample(np.zeros(n, np.float32), source, target, "HQ").shape[0]
            assert resampled_length(n, source, target) == got, (source, target, n)


@pytest.mark.parametrize("target", [11025, 16000, 22050, 44100])
def test_crops_past_the_end_stop_where_the_whole_pass_does(
    datasets: tuple[Dataset, Dataset], target: int
) -> None:
    """A crop that runs past the end is clipped at the resampled episode's
    end, or padded with zeros to its length. The window resampled alone
    rounds its own length: 48 960 samples at 48 -> 11.025 kHz gave one
    sample more than the whole pass (11 245.5 outputs, libsoxr's rounding)
    for a third of the starts, a sample that is not in the reference."""
    rng = np.random.default_rng(target + 1)
    for key, (_, rate, _, samples) in FILES.items():
        reference = _reference(datasets[0], key, target, mono=False)
        end = samples / rate + 0.05
        for start in [*rng.uniform(0.0, samples / rate, 12), (reference.shape[1] - 1) / target]:
            for dataset in datasets:
                what = f"{key} {target} [{start}, {end})"
                got = dataset.read_crop(key, float(start), end, sample_rate=target)
                _within(got, reference[:, round(start * target) :], what)
                padded = dataset.read_crop(key, float(start), end, sample_rate=target, pad=True)
                assert padded.shape[1] == round(end * target) - round(start * target), what
                np.testing.assert_array_equal(padded[:, : got.shape[1]], got)
                assert not padded[:, got.shape[1] :].any(), what


@pytest.mark.parametrize("target", [11025, *slow(44100, 22050)])
def test_crops_to_the_end_end_with_the_whole_pass(
    datasets: tuple[Dataset, Dataset], target: int
) -> None:
    """A crop whose window the end cuts short ends with the whole pass's
    last samples, which see zeros after the end. Resampled alone, the
    window rounded its own length one short of the whole pass's where that
    length is an exact half: ``[1.0, 1.5)`` of 72 000 samples at 48 ->
    11.025 kHz came back a sample short (counted past the end), with
    ``pad`` a zero in place of 0.2, and a crop starting on the last sample
    "decoded to nothing"."""
    for key in FILES:
        reference = _reference(datasets[0], key, target, mono=False)
        total = reference.shape[1]
        end = total / target
        firsts = {*np.linspace(0, total - 1, 40).round().astype(int).tolist(), total - 1}
        if key == "wav-48k-up":
            firsts.add(target)  # from 1 s on
        for first in sorted(firsts):
            for dataset in datasets:
                what = f"{key} {target} [{first / target}, {end})"
                before = dataset.decode_stats.past_end
                for pad in (False, True):
                    got = dataset.read_crop(key, first / target, end, sample_rate=target, pad=pad)
                    _within(got, reference[:, first:], what)
                assert dataset.decode_stats.past_end == before, what


def test_worker_processes_and_the_fallback_give_the_same_resampled_crops(
    datasets: tuple[Dataset, Dataset],
) -> None:
    """The same resampled mono crops (inside, at the start, past the end)
    in this thread and in two decode processes: bit for bit; through the
    fallback: within the resampler's rounding of the index's."""
    from streamer.pipeline import ListCrops, Streamer

    crops = [(key, s, e) for key in FILES for s, e in ((0.0, 0.013), (0.31, 0.52), (0.9, 1.3))]
    got = {}
    for name, dataset, workers in (
        ("0", datasets[0], 0),
        ("2", datasets[0], 2),
        ("fb", datasets[1], 2),
    ):
        s = Streamer(
            dataset,
            ListCrops(crops),
            workers=workers,
            sample_rate=7350,
            mono=True,
            on_error="raise",
        )
        got[name] = {(c.key, c.start, c.end): c.audio for c in s}
    assert len(got["0"]) == len(crops)
    for crop in crops:
        np.testing.assert_array_equal(got["2"][crop], got["0"][crop], err_msg=str(crop))
        _within(got["fb"][crop], got["0"][crop], str(crop))
