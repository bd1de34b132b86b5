"""The path for episodes without a usable index: FFmpeg decodes from the first
frame and the crop is cut by counting samples, so it is exact for every codec
(the very decode that defines the reference), and fails only loudly."""

from __future__ import annotations

import io
import json
import random
from pathlib import Path

import av
import numpy as np
import pyarrow as pa
import pytest
from _index_support import cli_encode

from streamer import open_dataset
from streamer.cli import main
from streamer.cli.bench import print_table
from streamer.decode.fallback import PastTheEnd, decode_range
from streamer.decode.resample import downmix, resample
from streamer.errors import CropError
from streamer.formats.ffmpeg import open_input
from streamer.formats.frames import frame_to_float32
from streamer.formats.ogg import pages as ogg
from streamer.formats.reader import Reader
from streamer.synth import CODECS, encode, signal
from streamer.write.pack import pack
from testkit.corpus_manifest import corpus_dir
from testkit.reference import full_decode

SECONDS = 4.0
LOSSLESS = {"flac", "alac", "wav"}
TOLERANCE = 1e-4
FROM_THE_START = "fallback from the start"

#: key -> (codec, rate, channels, Debian encoder command or None for PyAV, PyAV options)
FILES = {
    "pyav/mp3-1": ("mp3", 44100, 1, None, None),
    "pyav/mp3-2": ("mp3", 22050, 2, None, None),
    "pyav/vorbis-2": ("vorbis", 44100, 2, None, None),
    "pyav/opus-1": ("opus", 48000, 1, None, None),
    "pyav/opus-2": ("opus", 24000, 2, None, None),
    "pyav/flac-1": ("flac", 22050, 1, None, None),
    "pyav/flac-2": ("flac", 48000, 2, None, None),
    "pyav/aac-1": ("aac", 22050, 1, None, None),
    "pyav/aac-pns-2": ("aac", 44100, 2, None, {"aac_pns": "1"}),
    "pyav/alac-2": ("alac", 48000, 2, None, None),
    "pyav/wav-1": ("wav", 16000, 1, None, None),
    "cli/lame-vbr-2": ("mp3", 44100, 2, ["lame", "--quiet", "-V", "5", "-", "{out}"], None),
    "cli/lame-cbr-1": ("mp3", 32000, 1, ["lame", "--quiet", "-b", "64", "-", "{out}"], None),
    "cli/oggenc-1": ("vorbis", 44100, 1, ["oggenc", "-Q", "-o", "{out}", "-"], None),
    "cli/oggenc-2": ("vorbis", 22050, 2, ["oggenc", "-Q", "-o", "{out}", "-"], None),
    "cli/opusenc-1": ("opus", 48000, 1, ["opusenc", "--quiet", "-", "{out}"], None),
    "cli/opusenc-2": ("opus", 44100, 2, ["opusenc", "--quiet", "-", "{out}"], None),
    "cli/flac-1": ("flac", 44100, 1, ["flac", "-s", "-o", "{out}", "-"], None),
    "cli/flac-2": ("flac", 16000, 2, ["flac", "-s", "--blocksize=1152", "-o", "{out}", "-"], None),
}


def _make(key: str) -> bytes:
    codec, rate, channels, command, options = FILES[key]
    if command is None:
        return encode(signal(SECONDS, rate, channels, seed=len(key)), rate, codec, options=options)
    return cli_encode(command, rate, channels, seconds=SECONDS)


@pytest.fixture(scope="module")
def unindexed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every file of ``FILES`` that can be made here, packed without an index."""
    src = tmp_path_factory.mktemp("fallback-src")
    for key, (codec, *_) in FILES.items():
        try:
            data = _make(key)
        except pytest.skip.Exception:
            continue
        path = src / f"{key}.{CODECS[codec].extension}"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    out = tmp_path_factory.mktemp("fallback") / "dataset"
    pack(src, out, progress=False, index=False)
    return out


def _page_edges(data: bytes, rate: int) -> list[int]:
    """Full-decode positions where an Ogg page's samples end (its granule,
    less Opus's pre-skip): where FFmpeg's timestamps jump after a seek."""
    pages = list(ogg.scan(Reader(io.BytesIO(data))))
    preskip = (
        int.from_bytes(pages[0].body[10:12], "little") if pages[0].body[:8] == b"OpusHead" else 0
    )
    return [p.granule - preskip for p in pages if p.granule > 0][:-1]


def _crops(key: str, data: bytes, total: int, rate: int) -> list[tuple[float, float]]:
    """50 random crops, the very start, the end, crops across Ogg page edges,
    one that runs past the end (clipped)."""
    rng = random.Random(key)
    duration = total / rate
    crops = [(0.0, 0.25), (0.0, 1 / rate), (duration - 0.5, duration)]
    crops += [(duration - 0.2, duration + 1.0), ((total - 1) / rate, duration + 0.1)]
    if FILES[key][0] in ("vorbis", "opus"):
        for edge in _page_edges(data, rate)[:12]:
            crops += [((edge - 300) / rate, (edge + 700) / rate), (edge / rate, (edge + 64) / rate)]
    for _ in range(50):
        start = rng.uniform(0, duration - 0.01)
        crops.append((start, start + rng.uniform(0.005, 1.5)))
    return crops


def _compare(key: str, got: np.ndarray, want: np.ndarray, what: object) -> None:
    assert got.shape == want.shape, f"{key} {what}: {got.shape} != {want.shape}"
    if FILES[key][0] in LOSSLESS:
        np.testing.assert_array_equal(got, want, err_msg=f"{key} {what}")
    else:
        error = float(np.abs(got - want).max())
        assert error <= TOLERANCE, f"{key} {what}: max abs error {error:.2e}"


@pytest.mark.parametrize("key", sorted(FILES))
def test_crops_are_exact_for_every_codec(unindexed: Path, key: str) -> None:
    """Length and position exact against the full decode, at the start, at
    the end, across page edges and at random; past the end clipped."""
    dataset = open_dataset(unindexed)
    if key not in dataset:
        pytest.skip(f"{FILES[key][3][0]} is not installed")
    data = bytes(dataset.blob(key).view())
    full, rate = full_decode(data)
    crops = _crops(key, data, full.shape[1], rate)
    for start, end in crops:
        crop = dataset.crop(key, start, end)
        assert crop.sample_rate == rate
        _compare(key, crop.audio, full[:, round(start * rate) : round(end * rate)], (start, end))
    stats = dataset.decode_stats
    assert stats.fallback == stats.crops == len(crops)
    assert stats.fallback_reasons == {"no seek index": len(crops)}
    assert stats.paths == {FROM_THE_START: len(crops)}


@pytest.mark.parametrize("key", ["pyav/mp3-2", "cli/oggenc-2", "cli/opusenc-2", "pyav/flac-2"])
def test_resampled_crops_follow_the_contract(unindexed: Path, key: str) -> None:
    """Resampled (and downmixed) through the fallback: the full decode
    resampled in one pass, sliced, as through an index."""
    dataset = open_dataset(unindexed)
    if key not in dataset:
        pytest.skip(f"{FILES[key][3][0]} is not installed")
    full, rate = full_decode(bytes(dataset.blob(key).view()))
    whole = resample(downmix(full), rate, 16000)
    for start, end in [(0.0, 0.5), (1.2345, 2.5), (3.0, 3.9)]:
        crop = dataset.crop(key, start, end, sample_rate=16000, mono=True)
        first = round(start * 16000)
        want = whole[:, first : round(end * 16000)]
        assert crop.audio.shape == want.shape, (start, end)
        error = float(np.abs(crop.audio - want).max())
        bound = 1e-6 if FILES[key][0] in LOSSLESS else TOLERANCE  # the resampler's rounding
        assert error <= bound, f"{key} {(start, end)}: max abs error {error:.2e}"


def test_past_the_end_says_how_long_the_stream_is(unindexed: Path) -> None:
    dataset = open_dataset(unindexed)
    full, rate = full_decode(bytes(dataset.blob("pyav/aac-1").view()))
    duration = full.shape[1] / rate
    assert dataset.crop("pyav/aac-1", duration - 0.01, duration + 1).audio.shape[1] == round(
        duration * rate
    ) - round((duration - 0.01) * rate)
    said = (
        rf"past the end of the episode \(FFmpeg decodes {duration:.3f} s, {full.shape[1]} samples\)"
    )
    with pytest.raises(CropError, match=said) as raised:
        dataset.crop("pyav/aac-1", duration, duration + 1)
    assert raised.value.key == "pyav/aac-1"


def test_a_crop_under_half_a_sample_is_empty_not_past_the_end(unindexed: Path) -> None:
    dataset = open_dataset(unindexed)
    with pytest.raises(CropError, match="decodes to nothing"):
        dataset.crop("pyav/wav-1", 1.0, 1.00001)


#: The real-world corpus (``python -m tests.corpus.fetch``) for the slow test.
CORPUS = corpus_dir()


@pytest.mark.slow
def test_every_crop_over_a_real_world_corpus_is_exact_or_raises(tmp_path: Path) -> None:
    """Every file of the fetched corpus (``$STREAMER_CORPUS_DIR``) as an episode without an index,
    its bytes as they are (no probe): 50 random crops and the edges, each the
    full decode's samples, or a CropError where that decode has none (FFmpeg
    fails before the crop's end, or the stream ends before its start)."""
    files = sorted(p for p in CORPUS.rglob("*") if p.is_file()) if CORPUS.is_dir() else []
    if not files:
        pytest.skip(f"no corpus at {CORPUS}: run `python -m tests.corpus.fetch`")
    blobs = {str(p.relative_to(CORPUS)): p.read_bytes() for p in files}
    (tmp_path / "audio").mkdir()
    table = pa.table(
        {"__key__": list(blobs), "audio": pa.array(list(blobs.values()), pa.large_binary())}
    )
    with pa.ipc.new_file(str(tmp_path / "audio" / "s.wsds"), table.schema) as writer:
        writer.write_table(table, max_chunksize=8)
    dataset = open_dataset(tmp_path)
    served = 0
    for key, data in blobs.items():
        full, rate, failure = _reference(data)
        decoded = full.shape[1]
        rng = random.Random(key)
        duration = decoded / rate if rate else 1.0
        crops = [(0.0, 0.5), (max(duration - 0.3, 0), duration), (duration, duration + 1)]
        crops += [
            (s, s + rng.uniform(0.001, 1.0)) for s in (rng.uniform(0, duration) for _ in range(50))
        ]
        for start, end in crops:
            try:
                audio = dataset.read_crop(key, start, end)
            except CropError as error:
                assert (
                    not decoded
                    or decoded <= round(start * rate)
                    or (failure is not None and decoded < round(end * rate))
                    or round(start * rate) == round(end * rate)
                ), f"{key} [{start}, {end}): {error}"
                continue
            want = full[:, round(start * rate) : round(end * rate)]
            # The reference's own decode: bit for bit, lossy codecs too.
            np.testing.assert_array_equal(audio, want, err_msg=f"{key} [{start}, {end})")
            served += 1
    assert served


def test_int_sample_formats_scale_to_unit_range() -> None:
    frame = av.AudioFrame.from_ndarray(
        np.array([[-32768, 0, 16384, 32767]], dtype=np.int16), format="s16p", layout="mono"
    )
    np.testing.assert_allclose(frame_to_float32(frame), [[-1.0, 0.0, 0.5, 32767 / 32768]])
    packed = av.AudioFrame.from_ndarray(
        np.array([[1, 2, 3, 4]], dtype=np.float32), format="flt", layout="stereo"
    )
    np.testing.assert_array_equal(frame_to_float32(packed), [[1, 3], [2, 4]])


#: (codec, damage, seed) -> what FFmpeg raised, bare, through the fallback
#: before it was contained (found by searching seeds of ``_damaged``).
DAMAGED = {
    ("mp3", "truncated", 13): "InvalidDataError",
    ("mp3", "header", 4): "UnicodeDecodeError",
    ("vorbis", "truncated", 1): "EOFError",
    ("flac", "truncated", 2): "PermissionError",
    ("aac", "flipped", 27): "IndexError (no audio stream)",
    ("alac", "flipped", 1): "PatchWelcomeError",
    ("wav", "header", 2): "AttributeError (no decoder)",
    ("wav", "header", 4): "ArgumentError",
    ("flac", "flipped", 43): "frames without timestamps",
    ("flac", "flipped", 49): "a damaged frame early on",
    ("mp3", "garbage", 1): "2 kB of random bytes in the middle",
    ("vorbis", "garbage", 2): "2 kB of random bytes in the middle",
    ("opus", "garbage", 3): "2 kB of random bytes in the middle",
    ("flac", "garbage", 4): "2 kB of random bytes in the middle",
    ("aac", "garbage", 5): "2 kB of random bytes in the middle",
}
RATES = {"mp3": 44100, "vorbis": 44100, "opus": 48000, "flac": 44100, "aac": 44100}


def _damaged(codec: str, damage: str, seed: int) -> bytes:
    rng = random.Random(seed)
    rate = RATES.get(codec, 44100)
    data = bytearray(encode(signal(3.0, rate, 2, seed=1), rate, codec))
    if damage == "truncated":
        return bytes(data[: rng.randrange(len(data))])
    if damage == "garbage":
        middle = len(data) // 2
        return bytes(data[:middle] + rng.randbytes(2000) + data[middle + 2000 :])
    for _ in range(rng.randrange(1, 50) if damage == "flipped" else rng.randrange(1, 10)):
        data[rng.randrange(len(data) if damage == "flipped" else 200)] = rng.randrange(256)
    return bytes(data)


def _video_only() -> bytes:
    """An MP4 with one video stream and no audio."""
    out = io.BytesIO()
    with av.open(out, "w", format="mp4") as container:
        stream = container.add_stream("mpeg4", rate=10)
        stream.width, stream.height = 32, 32
        for _ in range(5):
            picture = av.VideoFrame.from_ndarray(np.zeros((32, 32, 3), np.uint8), format="rgb24")
            container.mux(stream.encode(picture))
        container.mux(stream.encode(None))
    return out.getvalue()


def _mono_then_stereo() -> bytes:
    """1 s of mono mp3 frames, then 1 s of stereo ones (no Xing/ID3 headers):
    FFmpeg's decoder switches channel count midway."""

    def frames(channels: int) -> bytes:
        out = io.BytesIO()
        options = {"write_xing": "0", "id3v2_version": "0"}
        with av.open(out, "w", format="mp3", options=options) as container:
            stream = container.add_stream("libmp3lame", rate=44100)
            stream.layout = "mono" if channels == 1 else "stereo"
            frame = av.AudioFrame.from_ndarray(
                signal(1.0, 44100, channels), format="fltp", layout=stream.layout.name
            )
            frame.sample_rate = 44100
            for packet in [*stream.encode(frame), *stream.encode(None)]:
                container.mux(packet)
        return out.getvalue()

    return frames(1) + frames(2)


@pytest.fixture(scope="module")
def damaged_dataset(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, bytes]]:
    """One shard of damaged episodes, no seek index: every crop falls back."""
    blobs = {"-".join(map(str, case)): _damaged(*case) for case in DAMAGED}
    blobs["garbage"] = random.Random(0).randbytes(3000)
    blobs["empty"] = b""
    blobs["video-only"] = _video_only()
    blobs["mono-then-stereo"] = _mono_then_stereo()
    blobs["clean"] = encode(signal(3.0, 44100, 2, seed=1), 44100, "flac")
    root = tmp_path_factory.mktemp("damaged") / "ds"
    (root / "audio").mkdir(parents=True)
    table = pa.table({"__key__": list(blobs), "audio": pa.array(list(blobs.values()), pa.binary())})
    with pa.ipc.new_file(str(root / "audio" / "s.wsds"), table.schema) as writer:
        writer.write_table(table)
    return root, blobs


def _reference(data: bytes) -> tuple[np.ndarray, int, Exception | None]:
    """The full decode of damaged bytes as far as FFmpeg gets: the samples,
    their rate (0 if none) and what FFmpeg raised, if it did (there is no
    reference past that point)."""
    pieces, rate = [np.zeros((0, 0), np.float32)], 0
    try:
        with open_input(io.BytesIO(data)) as container:
            for frame in container.decode(audio=0):
                pieces.append(frame_to_float32(frame))
                if pieces[-1].shape[0] != pieces[1].shape[0]:
                    del pieces[-1]
                    raise ValueError("the channel count changes: no one array")
                rate = frame.sample_rate
    except Exception as exc:
        return np.concatenate(pieces[1:] or pieces, axis=1), rate, exc
    return np.concatenate(pieces[1:] or pieces, axis=1), rate, None


def test_damaged_episodes_are_exact_or_raise_naming_the_episode(damaged_dataset) -> None:  # type: ignore[no-untyped-def]
    """Truncated, flipped, garbage in the middle, no audio stream: every crop
    is the full decode of those very bytes, or a CropError naming shard and
    key (whatever FFmpeg raised: PermissionError, InvalidDataError, ...) when
    FFmpeg fails before the crop's last sample or the stream ends before it
    starts."""
    root, blobs = damaged_dataset
    dataset = open_dataset(root)
    outcomes = {}
    for key in dataset:
        full, rate, failure = _reference(blobs[key])
        decoded = full.shape[1]
        for start, end in ((0.3, 0.5), (1.5, 1.7), (2.6, 2.8)):
            try:
                audio = dataset.read_crop(key, start, end)
            except CropError as error:
                assert (error.key, error.shard) == (key, dataset.blob(key).shard)
                outcomes[key, start] = "error"
                if failure is None:  # a complete decode: only past its end
                    assert "past the end" in str(error) and decoded <= round(start * rate)
                else:  # FFmpeg fails before the crop is complete
                    assert "without a seek index" in str(error) or "past the end" in str(error)
                    assert not rate or decoded < round(end * rate), (key, start, error)
            else:
                want = full[:, round(start * rate) : round(end * rate)]
                np.testing.assert_array_equal(audio, want, err_msg=f"{key} at {start}")
                outcomes[key, start] = "audio"
    assert outcomes["garbage", 0.3] == outcomes["empty", 0.3] == "error"
    assert outcomes["video-only", 0.3] == "error"
    assert (outcomes["mono-then-stereo", 0.3], outcomes["mono-then-stereo", 1.5]) == (
        "audio",
        "error",
    )
    assert outcomes["clean", 1.5] == outcomes["flac-flipped-43", 1.5] == "audio"
    assert outcomes["flac-flipped-49", 0.3] == "audio"
    for codec in RATES:  # before the garbage: untouched
        assert outcomes[next(k for k in blobs if k.startswith(f"{codec}-garbage")), 0.3] == "audio"
    assert dataset.decode_stats.fallback == len(outcomes)
    with pytest.raises(CropError, match="no audio stream"):
        dataset.read_crop("video-only", 0.0, 0.1)
    with pytest.raises(CropError, match=r"changes from 44100 Hz x 1 to 44100 Hz x 2 channels"):
        dataset.read_crop("mono-then-stereo", 1.5, 1.7)


def test_a_crop_past_a_rejected_packet_says_where_ffmpegs_decode_ends(damaged_dataset) -> None:  # type: ignore[no-untyped-def]
    """Random bytes in the middle of an mp3: FFmpeg's decoder rejects them
    and its full decode ends there. A crop after them said only what FFmpeg
    raised ("Invalid data found when processing input"), not that the
    episode decodes up to a point, nor to which."""
    root, blobs = damaged_dataset
    key = "mp3-garbage-1"
    full, rate, failure = _reference(blobs[key])
    assert failure is not None
    decoded = full.shape[1]
    said = (
        rf"range \[2.6, 2.8\) s needs samples past the end of FFmpeg's decode, at "
        rf"{decoded / rate:.3f} s \({decoded} samples\), where its decoder rejects a packet "
        rf"\(InvalidDataError: .*\) \(shard=.*, key='{key}'\)$"
    )
    with pytest.raises(CropError, match=said):
        open_dataset(root).read_crop(key, 2.6, 2.8)


def test_a_store_failure_under_the_fallback_stays_a_storage_error() -> None:
    """PyAV hands a file object's exception back as itself: a store that
    cannot deliver the bytes is not the episode's fault."""
    from streamer.errors import StorageError

    class Failing(io.BytesIO):
        def read(self, size: int | None = -1) -> bytes:
            if self.tell() > 5000:
                raise StorageError("store down")
            return super().read(size)

    data = encode(signal(3.0, 44100, 2), 44100, "mp3")
    with pytest.raises(StorageError, match="store down"):
        decode_range(Failing(data), 2.0, 2.5)
    with pytest.raises(PastTheEnd):
        decode_range(io.BytesIO(data), 3.5, 4.0)


def test_bench_baseline_counts_the_crops_the_naive_seek_cannot_make(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The naive baseline (PyAV seek, timestamps) loses some 10 ms crops: of
    PyAV's FLAC (FFmpeg raises PermissionError after the seek) and Vorbis
    (its timestamps jump over the crop at a page edge). Counted by reason,
    not raised; the pipeline serves every crop, from the start."""
    src = tmp_path / "src"
    for key in ("pyav/flac-1", "pyav/vorbis-2"):
        (src / key).parent.mkdir(parents=True, exist_ok=True)
        (src / f"{key}.{CODECS[FILES[key][0]].extension}").write_bytes(_make(key))
    pack(src, tmp_path / "ds", progress=False, index=False)
    argv = ["bench", str(tmp_path / "ds"), "--duration", "0.01", "--crops", "300"]
    assert main([*argv, "--workers", "0", "--baseline", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["yielded"] == 300 and result["paths"] == {FROM_THE_START: 300}
    failed = result["baseline_failed"]  # 6 and 1 with PyAV 18.1 and 19.0
    # PyAV 19 names the file in FFmpeg's errors (": '<none>'" for a file object).
    reasons = {reason.removesuffix(": '<none>'") for reason in failed}
    assert sum(failed.values()) > 0 and reasons <= {
        "PermissionError: [Errno 1] Operation not permitted",
        "ValueError: the range decodes to nothing after the seek",
    }
    print_table(result)
    printed = capsys.readouterr().out
    assert f"paths {{'{FROM_THE_START}': 300}}" in printed and "baseline failed {" in printed
