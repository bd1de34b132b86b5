"""The seek-index-free decode path: FFmpeg seeking over a file-like blob handle."""

from __future__ import annotations

import io
import random
from pathlib import Path

import av
import numpy as np
import pytest
from helpers import FIXTURE_FILES

from streamer import open_dataset
from streamer.decode.fallback import decode_range
from streamer.errors import CropError
from streamer.formats.frames import frame_to_float32

LOSSLESS = {"flac", "alac", "wav"}


def _full_decode(data: bytes) -> np.ndarray:
    with av.open(io.BytesIO(data)) as container:
        frames = [frame_to_float32(f) for f in container.decode(audio=0)]
    return np.concatenate(frames, axis=1)


@pytest.mark.parametrize(("codec", "rate", "channels"), FIXTURE_FILES)
def test_crops_cover_the_asked_samples(packed: Path, codec: str, rate: int, channels: int) -> None:
    dataset = open_dataset(packed)
    key = next(k for k in dataset if k.endswith(codec))
    blob = dataset.blob(key)
    full = _full_decode(bytes(blob.view()))
    for start, end in [(0.0, 0.5), (1.234, 2.0), (2.5, 3.5)]:
        audio, got_rate = decode_range(blob, start, end)
        assert got_rate == rate and audio.dtype == np.float32
        expected = full[:, round(start * rate) : round(end * rate)]
        assert audio.shape == expected.shape  # clipped at the end, never shifted
        if codec in LOSSLESS:
            np.testing.assert_array_equal(audio, expected)
        elif start == 0.0:
            np.testing.assert_allclose(audio, expected, atol=1e-6)


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
    ("flac", "flipped", 43): "nothing decoded at 1.5 s of 3 s (frames without timestamps)",
    ("flac", "flipped", 49): "nothing decoded at 0.3 s of 2.9 s",
}
RATES = {"mp3": 44100, "vorbis": 44100, "flac": 44100, "aac": 44100, "alac": 44100, "wav": 44100}


def _damaged(codec: str, damage: str, seed: int) -> bytes:
    from streamer.synth import encode, signal

    rng = random.Random(seed)
    data = bytearray(encode(signal(3.0, RATES[codec], 2, seed=1), RATES[codec], codec))
    if damage == "truncated":
        return bytes(data[: rng.randrange(len(data))])
    for _ in range(rng.randrange(1, 50) if damage == "flipped" else rng.randrange(1, 10)):
        data[rng.randrange(len(data) if damage == "flipped" else 200)] = rng.randrange(256)
    return bytes(data)


@pytest.fixture(scope="module")
def damaged_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One shard of damaged episodes, no seek index: every crop falls back."""
    import pyarrow as pa

    from streamer.synth import encode, signal

    blobs = {"-".join(map(str, case)): _damaged(*case) for case in DAMAGED}
    blobs["garbage"] = random.Random(0).randbytes(3000)
    blobs["empty"] = b""
    blobs["clean"] = encode(signal(3.0, 44100, 2, seed=1), 44100, "flac")
    root = tmp_path_factory.mktemp("damaged") / "ds"
    (root / "audio").mkdir(parents=True)
    table = pa.table({"__key__": list(blobs), "audio": pa.array(list(blobs.values()), pa.binary())})
    with pa.ipc.new_file(str(root / "audio" / "s.wsds"), table.schema) as writer:
        writer.write_table(table)
    return root


def test_ffmpeg_failures_become_crop_errors_naming_the_episode(damaged_dataset: Path) -> None:
    """Whatever FFmpeg raises on an episode's bytes (PermissionError,
    InvalidDataError, ArgumentError, ...) is a CropError naming shard and key."""
    dataset = open_dataset(damaged_dataset)
    outcomes = {}
    for key in dataset:
        for start in (0.3, 1.5):
            try:
                audio = dataset.read_crop(key, start, start + 0.2)
            except CropError as error:
                assert (error.key, error.shard) == (key, dataset.blob(key).shard)
                assert "without a seek index" in str(error) or "past the end" in str(error)
                outcomes[key, start] = "error"
            else:
                assert audio.shape == (2, round((start + 0.2) * 44100) - round(start * 44100))
                outcomes[key, start] = "audio"
    assert outcomes["garbage", 0.3] == outcomes["empty", 0.3] == "error"
    assert outcomes["clean", 1.5] == outcomes["flac-flipped-43", 1.5] == "audio"
    assert outcomes["flac-flipped-49", 0.3] == "audio"
    assert dataset.decode_stats.fallback == len(outcomes)


def test_past_the_end_only_past_the_real_end(damaged_dataset: Path) -> None:
    dataset = open_dataset(damaged_dataset)
    assert dataset.read_crop("clean", 2.9, 3.5).shape == (2, 4410)  # clipped at the end
    with pytest.raises(CropError, match=r"past the end of the episode \(FFmpeg decodes 3.000 s\)"):
        dataset.read_crop("clean", 3.2, 3.5)


def test_a_store_failure_under_the_fallback_stays_a_storage_error() -> None:
    """PyAV hands a file object's exception back as itself: a store that
    cannot deliver the bytes is not the episode's fault."""
    from streamer.errors import StorageError
    from streamer.synth import encode, signal

    class Failing(io.BytesIO):
        def read(self, size: int | None = -1) -> bytes:
            if self.tell() > 5000:
                raise StorageError("store down")
            return super().read(size)

    data = encode(signal(3.0, 44100, 2), 44100, "mp3")
    with pytest.raises(StorageError, match="store down"):
        decode_range(Failing(data), 2.0, 2.5)
