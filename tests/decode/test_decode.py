"""Sample-exact crops: every codec, both encoder families, against FFmpeg's full decode.

The reference is PyAV decoding the whole file (FFmpeg's gapless decode)
sliced at ``round(t * sr)``. Lossless codecs must match bit for bit; lossy
ones with zero lag and a max abs difference of at most 1e-4.
"""

from __future__ import annotations

import logging
import random
from pathlib import Path

import av
import numpy as np
import pytest
from _index_support import cli_encode

from streamer import open_dataset
from streamer.decode.crop import CropRequest
from streamer.decode.resample import crop_span, downmix, resample
from streamer.errors import CropError
from streamer.index.content import DAMAGED
from streamer.synth import CODECS, encode, signal
from streamer.write.pack import pack
from testkit.reference import full_decode

SECONDS = 6.0
LOSSLESS = {"flac", "alac", "wav"}
TOLERANCE = 1e-4
#: A resampled crop against the resampled full decode, by losslessness: the
#: resampler's own float rounding (1e-6), on top of the codec's.
RESAMPLED_TOLERANCE = {True: 1e-6, False: TOLERANCE}
#: Crop starts (seconds) the order-independence test reads in two orders.
STARTS = (0.3, 1.9, 3.1, 4.4)

#: Encoder options. AAC's perceptual noise substitution (PNS; FFmpeg's
#: encoder uses it by default) fills bands with noise from a generator whose
#: state carries over from the very first frame, so no decoder that starts
#: at a seek point can reproduce it: those files are tested apart, below.
OPTIONS = {"pyav/aac-pns-2": {"aac_pns": "1"}}

#: key -> how to make the file: (codec, rate, channels, CLI command or None for PyAV)
FILES = {
    "pyav/mp3-1": ("mp3", 44100, 1, None),
    "pyav/mp3-2": ("mp3", 48000, 2, None),
    "pyav/mp3-22k": ("mp3", 22050, 1, None),
    "pyav/vorbis-2": ("vorbis", 44100, 2, None),
    "pyav/opus-1": ("opus", 48000, 1, None),
    "pyav/opus-2": ("opus", 48000, 2, None),
    "pyav/flac-1": ("flac", 22050, 1, None),
    "pyav/flac-2": ("flac", 48000, 2, None),
    "pyav/aac-1": ("aac", 22050, 1, None),
    "pyav/aac-2": ("aac", 44100, 2, None),
    "pyav/aac-pns-2": ("aac", 44100, 2, None),
    "pyav/alac-1": ("alac", 44100, 1, None),
    "pyav/alac-2": ("alac", 48000, 2, None),
    "pyav/wav-1": ("wav", 16000, 1, None),
    "pyav/wav-2": ("wav", 44100, 2, None),
    "cli/lame-vbr-2": ("mp3", 44100, 2, ["lame", "--quiet", "-V", "2", "-", "{out}"]),
    "cli/lame-cbr-1": ("mp3", 32000, 1, ["lame", "--quiet", "-b", "64", "-", "{out}"]),
    "cli/oggenc-1": ("vorbis", 44100, 1, ["oggenc", "-Q", "-o", "{out}", "-"]),
    "cli/oggenc-2": ("vorbis", 22050, 2, ["oggenc", "-Q", "-o", "{out}", "-"]),
    "cli/opusenc-1": ("opus", 48000, 1, ["opusenc", "--quiet", "-", "{out}"]),
    "cli/opusenc-2": ("opus", 44100, 2, ["opusenc", "--quiet", "-", "{out}"]),
    "cli/flac-1": ("flac", 44100, 1, ["flac", "-s", "-o", "{out}", "-"]),
    "cli/flac-2": ("flac", 16000, 2, ["flac", "-s", "--blocksize=1152", "-o", "{out}", "-"]),
    # 7.1: eight planes per frame, one more than PyAV's ``frame.planes`` gets right.
    "cli/opusenc-8": ("opus", 48000, 8, ["opusenc", "--quiet", "-", "{out}"]),
    "cli/oggenc-8": ("vorbis", 44100, 8, ["oggenc", "-Q", "-o", "{out}", "-"]),
    "cli/flac-8": ("flac", 48000, 8, ["flac", "-s", "--channel-map=none", "-o", "{out}", "-"]),
}


@pytest.fixture(scope="module")
def dataset_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every file in ``FILES`` that can be made here, packed (and indexed)."""
    src = tmp_path_factory.mktemp("decode-src")
    for key, (codec, rate, channels, command) in FILES.items():
        if command is None:
            samples = signal(SECONDS, rate, channels, seed=len(key))
            data = encode(samples, rate, codec, options=OPTIONS.get(key))
        else:
            try:
                data = cli_encode(command, rate, channels, seconds=SECONDS)
            except pytest.skip.Exception:
                continue
        path = src / f"{key}.{CODECS[codec].extension}"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    out = tmp_path_factory.mktemp("decode") / "dataset"
    pack(src, out, progress=False)
    return out


def _crops(duration: float, seed: str) -> list[tuple[float, float]]:
    rng = random.Random(seed)
    edges = [(0.0, 0.25), (0.0, 2.0), (0.001, 1.3), (duration - 1.0, duration)]
    edges += [(duration - 0.3, duration + 0.5)]  # runs past the end: clipped
    spans = []
    for _ in range(20):
        start = rng.uniform(0, duration - 0.2)
        spans.append((start, min(start + rng.uniform(0.05, 3.0), duration)))
    return edges + spans


def _compare(key: str, codec: str, got: np.ndarray, want: np.ndarray) -> None:
    assert got.shape == want.shape, f"{key}: shape {got.shape} != {want.shape}"
    assert got.dtype == np.float32
    if codec in LOSSLESS:
        np.testing.assert_array_equal(got, want, err_msg=key)
    else:
        error = float(np.abs(got - want).max()) if got.size else 0.0
        assert error <= TOLERANCE, f"{key}: max abs error {error:.2e}"


@pytest.mark.parametrize("key", sorted(k for k in FILES if "pns" not in k))
def test_crops_equal_the_full_decode(dataset_dir: Path, key: str) -> None:
    dataset = open_dataset(dataset_dir)
    if key not in dataset:
        pytest.skip(f"{FILES[key][3][0]} is not installed")
    codec = FILES[key][0]
    full, rate = full_decode(bytes(dataset.blob(key).view()))
    assert dataset.seek_index(key).ok
    for start, end in _crops(full.shape[1] / rate, key):
        got = dataset.read_crop(key, start, end)
        _compare(key, codec, got, full[:, round(start * rate) : round(end * rate)])
    stats = dataset.decode_stats
    assert stats.fallback == 0 and stats.unplanned_reads == 0 and stats.bad_packets == 0


def test_aac_noise_substitution_is_in_place_but_not_exact(dataset_dir: Path) -> None:
    """PNS bands are noise: a crop has the right samples in the right place
    (zero lag), but the noise itself differs from a decode from the start."""
    dataset = open_dataset(dataset_dir)
    key = "pyav/aac-pns-2"
    full, rate = full_decode(bytes(dataset.blob(key).view()))
    for start, end in _crops(full.shape[1] / rate, key)[5:15]:
        got = dataset.read_crop(key, start, end)
        first = round(start * rate)
        errors = {
            lag: float(np.abs(got - full[:, first + lag : first + lag + got.shape[1]]).mean())
            for lag in (-2, -1, 0, 1, 2)
            if first + lag >= 0 and first + lag + got.shape[1] <= full.shape[1]
        }
        assert min(errors, key=errors.get) == 0, errors
        assert float(np.abs(got - full[:, first : first + got.shape[1]]).max()) < 0.15


def test_a_crop_does_not_depend_on_the_crops_read_before_it(dataset_dir: Path) -> None:
    """The same crops in two orders in one process are bit-identical, for
    every codec: AAC with noise substitution too (its decoder's noise
    generator survives a flush, so no decoder is reused across crops)."""
    dataset = open_dataset(dataset_dir)
    crops = [
        (key, start, start + 0.7) for key in sorted(FILES) if key in dataset for start in STARTS
    ]
    first = {crop: dataset.read_crop(*crop) for crop in crops}
    shuffled = random.Random(1).sample(crops, len(crops))
    second = {crop: dataset.read_crop(*crop) for crop in shuffled}
    assert {key for key, _, _ in crops} >= {k for k in FILES if k.startswith("pyav/")}
    for crop in crops:
        np.testing.assert_array_equal(first[crop], second[crop], err_msg=str(crop))


@pytest.mark.parametrize("key", ["pyav/mp3-2", "pyav/opus-2", "pyav/flac-1", "pyav/aac-2"])
@pytest.mark.parametrize("target", [16000, 24000])
def test_resampled_mono_crops_match_the_resampled_full_decode(
    dataset_dir: Path, key: str, target: int
) -> None:
    dataset = open_dataset(dataset_dir)
    full, rate = full_decode(bytes(dataset.blob(key).view()))
    reference = resample(downmix(full), rate, target)
    for start, end in _crops(full.shape[1] / rate, key)[:10]:
        got = dataset.read_crop(key, start, end, sample_rate=target, mono=True)
        first = round(start * target)
        want = reference[:, first : round(end * target)]
        assert got.shape == want.shape and got.dtype == np.float32
        error = float(np.abs(got - want).max())
        assert error <= RESAMPLED_TOLERANCE[FILES[key][0] in LOSSLESS], f"{key}: {error:.2e}"


def test_mono_crops_are_the_downmix_of_the_crop_bit_for_bit(dataset_dir: Path) -> None:
    """A mono crop's decoder sums the channels as the frames come out
    (``frames.SampleBuffer``); every format's stereo files give exactly the
    downmix of the same crop decoded at full width."""
    dataset = open_dataset(dataset_dir)
    stereo = [key for key, (_, _, channels, _) in FILES.items() if channels > 1]
    assert {FILES[key][0] for key in stereo} >= {"mp3", "vorbis", "opus", "flac", "aac", "alac"}
    for key in stereo:
        for start in STARTS:
            wide = dataset.read_crop(key, start, start + 0.7)
            mono = dataset.read_crop(key, start, start + 0.7, mono=True)
            np.testing.assert_array_equal(mono, downmix(wide), err_msg=f"{key} at {start}")


def test_exact_output_length_and_padding(dataset_dir: Path) -> None:
    dataset = open_dataset(dataset_dir)
    key = "pyav/wav-2"
    assert dataset.read_crop(key, 1.0, 1.5).shape == (2, 22050)
    assert dataset.read_crop(key, 1.00001, 1.25001, sample_rate=16000).shape == (2, 4000)
    clipped = dataset.read_crop(key, SECONDS - 0.5, SECONDS + 0.5)
    padded = dataset.read_crop(key, SECONDS - 0.5, SECONDS + 0.5, pad=True)
    assert clipped.shape == (2, 22050) and padded.shape == (2, 44100)
    np.testing.assert_array_equal(padded[:, :22050], clipped)
    assert not padded[:, 22050:].any()


def test_crops_past_the_end_raise_a_crop_error(dataset_dir: Path) -> None:
    dataset = open_dataset(dataset_dir)
    with pytest.raises(CropError, match="past the end") as caught:
        dataset.read_crop("pyav/flac-1", SECONDS + 1, SECONDS + 2)
    assert caught.value.key == "pyav/flac-1"
    assert caught.value.shard.endswith(".wsds")
    with pytest.raises(ValueError, match="start < end"):
        dataset.read_crop("pyav/flac-1", 2.0, 1.0)


@pytest.mark.parametrize("key", ["pyav/flac-1", "pyav/mp3-1"])
def test_an_empty_crop_is_not_said_past_the_end(dataset_dir: Path, key: str) -> None:
    """Through an index as through the fallback: a crop of under half a
    sample inside the episode "decodes to nothing"; a resampled crop that
    starts past the end is past the end (its resampler's window reaches back
    into the episode). The index path had them the other way round."""
    dataset = open_dataset(dataset_dir)
    length = dataset.seek_index(key).num_samples / dataset.seek_index(key).sample_rate
    with pytest.raises(CropError, match="decodes to nothing"):
        dataset.read_crop(key, 1.0, 1.0 + 1e-7)
    with pytest.raises(CropError, match="past the end"):
        dataset.read_crop(key, length + 0.001, length + 1, sample_rate=16000)


def test_crops_read_only_their_bytes(dataset_dir: Path) -> None:
    dataset = open_dataset(dataset_dir)
    # (MP4 is left out: on a file this small, FFmpeg reads through the first
    # 64 KiB rather than seek; the long-episode tests cover it.)
    for key in ("pyav/mp3-2", "pyav/flac-2", "pyav/opus-1", "pyav/wav-2"):
        blob = dataset.blob(key)
        before = dataset.decode_stats.planned_bytes
        dataset.read_crop(key, 3.0, 3.5)
        planned = dataset.decode_stats.planned_bytes - before
        # Half a second plus pre-roll and index granularity (one point a
        # second): well under the episode's six seconds.
        assert planned < 0.5 * blob.length, f"{key}: {planned} of {blob.length} bytes"


def test_no_index_falls_back_counted_and_warned_once(
    audio_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    out = tmp_path / "ds"
    pack(audio_dir, out, progress=False, index=False)
    dataset = open_dataset(out)
    keys = list(dataset)
    with caplog.at_level(logging.WARNING, logger="streamer.decode.crop"):
        for key in keys:
            full, rate = full_decode(bytes(dataset.blob(key).view()))
            got = dataset.read_crop(key, 0.5, 1.5)
            np.testing.assert_array_equal(got, full[:, round(0.5 * rate) : round(1.5 * rate)])
    assert dataset.decode_stats.fallback == len(keys)
    assert dataset.decode_stats.fallback_reasons == {"no seek index": len(keys)}
    warnings = [r for r in caplog.records if "without a seek index" in r.message]
    assert len(warnings) == 1
    # The shard and the first key that fell back (the message named the shard alone).
    shard = dataset.episode(keys[0]).shard
    assert warnings[0].message.startswith(f"shard {shard}, key {keys[0]}: decoding without")


def test_planned_jobs_and_bytes_pickle_for_worker_processes(dataset_dir: Path) -> None:
    """What a pipeline ships to a decode worker: the job and only its bytes."""
    import pickle

    from streamer.decode.crop import CropRequest, decode_job, fetch, prepare
    from streamer.formats.job import DecodeStats

    dataset = open_dataset(dataset_dir)
    for key in ("pyav/mp3-2", "pyav/aac-2", "pyav/opus-1", "pyav/wav-1"):
        job = prepare(dataset.episode(key), CropRequest(key, 2.0, 3.0, sample_rate=16000))
        fetched = fetch(job)
        shipped_job, shipped = pickle.loads(pickle.dumps((job, fetched)))
        # Only the bytes travel: no way back to the blob rides along with them.
        assert [type(view) for _, view in shipped.pieces] == [memoryview] * len(shipped.pieces)
        assert len(pickle.dumps(shipped)) < 1.2 * job.nbytes + 1024
        # PCM reads its data out to its span CRCs' ends: a few KiB more
        assert job.nbytes <= job.plan.nbytes + 2 * job.episode.index.span_size
        assert len(shipped_job.episode.index.sample_pos) == 0  # the seek points stay home
        # The episode travels as its address, not its bytes.
        assert len(pickle.dumps(shipped_job)) < 4096
        crop = decode_job(shipped_job, shipped, DecodeStats())
        np.testing.assert_array_equal(crop.audio, dataset.read_crop(key, 2.0, 3.0, 16000))


@pytest.mark.parametrize("key", ["pyav/mp3-2", "pyav/flac-2", "pyav/opus-2", "pyav/aac-2"])
def test_damaged_bytes_mid_episode_are_skipped_or_a_crop_error(
    dataset_dir: Path, tmp_path: Path, key: str
) -> None:
    """Garbage over a second of audio: crops around it still come out (bad
    packets counted) or fail with a CropError naming the episode; nothing
    else escapes and the crops elsewhere are untouched. Codecs without
    checksums of their own (mp3, AAC) have span CRCs: every crop that reads
    the garbage fails, naming it (tests/decode/test_damaged_data.py)."""
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(dataset_dir, copy)
    dataset = open_dataset(copy)
    blob = dataset.blob(key)
    index = dataset.seek_index(key)
    shard_file = Path(blob.shard)
    middle = int(index.byte_pos[len(index.byte_pos) // 2])
    with open(shard_file, "r+b") as file:
        file.seek(blob.offset + middle + 100)
        file.write(np.random.default_rng(0).bytes(3000))
    dataset = open_dataset(copy)
    clean = open_dataset(dataset_dir)
    rate = index.sample_rate
    middle_s = float(index.sample_pos[len(index.sample_pos) // 2]) / index.timescale
    outcomes = []
    for start in (middle_s - 1.0, middle_s - 0.2, middle_s + 0.1):
        try:
            got = dataset.read_crop(key, start, start + 1.0)
        except CropError as error:
            assert error.key == key and error.shard == blob.shard
            outcomes.append("damaged" if DAMAGED in str(error) else "error")
        else:
            assert got.shape == (index.channels, round((start + 1) * rate) - round(start * rate))
            outcomes.append("audio")
    assert dataset.decode_stats.bad_packets > 0, "the damage went unnoticed"
    if len(index.span_crc):
        assert outcomes == ["damaged"] * 3
    else:
        assert "audio" in outcomes, "a damaged packet must not sink every crop near it"
    np.testing.assert_array_equal(dataset.read_crop(key, 0.0, 1.0), clean.read_crop(key, 0.0, 1.0))


def test_a_decoder_that_keeps_returning_nothing_is_stopped() -> None:
    """FFmpeg's FLAC decoder swallows one-byte packets without output or error:
    the loop gives up after a bound instead of feeding it forever."""

    from streamer.formats.frames import SampleBuffer
    from streamer.formats.job import DecodeContext, DecodeStats, Episode
    from streamer.formats.packets import MAX_SILENT_PACKETS, decode_packets
    from streamer.shard import BlobHandle
    from streamer.storage import MemoryReader

    decoder = av.CodecContext.create("flac", "r")
    packets = (av.Packet(b"\x00") for _ in range(10 * MAX_SILENT_PACKETS))
    blob = BlobHandle(MemoryReader(b""), 0, 0, shard="audio/s.wsds", key="k")
    context = DecodeContext(Episode("k", "audio/s.wsds", blob, None), DecodeStats(), tuple)
    with pytest.raises(CropError, match="produced nothing") as caught:
        list(decode_packets(decoder, packets, context, SampleBuffer(1)))
    assert (caught.value.shard, caught.value.key) == ("audio/s.wsds", "k")


@pytest.mark.parametrize("kind", [np.float32, np.float16, np.int64])
def test_times_of_numpy_types_cut_the_crop_python_floats_cut(kind: type) -> None:
    """Times from a NumPy array of float32 made every sample index of the
    crop in float32: an hour in, one sample off at 16 kHz and two outputs at
    48 kHz, the crop shifted (the Streamer's own plan casts to float64, so
    the two paths disagreed); float16 overflowed into a bare OverflowError."""
    start, end = {
        np.float32: (np.float32(3600.1234), np.float32(3601.1234)),
        np.float16: (np.float16(30.5), np.float16(31.25)),
        np.int64: (np.int64(3000), np.int64(3001)),
    }[kind]
    request = CropRequest("k", start, end, sample_rate=48000)
    assert type(request.start) is float and type(request.end) is float
    for target in (None, 48000):
        got = crop_span(request.start, request.end, 16000, target)
        assert got == crop_span(float(start), float(end), 16000, target)
    with pytest.raises(ValueError, match="needs 0 <= start < end, both finite"):
        CropRequest("k", np.float16(1.0), np.float16("inf"))  # 70000 s as float16
    with pytest.raises(ValueError, match="crop start must be a number of seconds"):
        CropRequest("k", "1.0", 2.0)  # type: ignore[arg-type]
