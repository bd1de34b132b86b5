"""Unusual but valid episodes, through the index and ``pack --no-index``'s
fallback: odd rates, episodes shorter than a frame or than the pre-roll,
exact multiples of the frame size, a WAV whose data size is 0 or
0xFFFFFFFF (streamed) or that has chunks after its data, FLAC behind an ID3
tag, an M4A with two audio tracks, Matroska and Ogg starting at 5 s. Each
crop (the first sample, the last one, up to the end, the whole episode, one
sample inside) equals the same samples of the full decode, and with an
index ``audio_info``'s duration is the full decode's."""

from __future__ import annotations

import io
import struct
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest

from streamer import open_dataset
from streamer.formats.ffmpeg import open_input
from streamer.formats.frames import frame_to_float32
from streamer.write.pack import pack

TOLERANCE = 1e-4  # lossy codecs at zero lag (docs/decoding.md)
LOSSLESS = ("wav", "flac")
#: Sample formats but float32: full scale, dtype and zero.
SCALES = {
    "s16": (32767, np.int16, 0),
    "s32": (2**31 - 1, np.int32, 0),
    "u8": (127, np.uint8, 128),
    "dbl": (1, np.float64, 0),
}


def _encode(
    codec: str,
    rate: int,
    layout: str,
    samples: int,
    form: str,
    *,
    offset: int = 0,
    options: dict[str, str] | None = None,
) -> bytes:
    """``samples`` of noise through PyAV's encoder and muxer, the first
    stamped ``offset`` (a stream that starts later than 0)."""
    out = io.BytesIO()
    with av.open(out, "w", format=form) as muxer:
        stream = muxer.add_stream(codec, rate=rate, options=options or {})
        stream.layout = layout
        channels = stream.layout.nb_channels
        noise = np.random.default_rng(samples).standard_normal((channels, samples)) * 0.1
        planar = stream.codec_context.format.is_planar
        for start in range(0, samples, 1000):
            block = noise[:, start : start + 1000].astype(np.float32)
            kind = stream.codec_context.format.name[:3]
            if kind in SCALES:
                scale, dtype, zero = SCALES[kind]
                block = (block * scale + zero).astype(dtype)
            if not planar:
                block = block.T.reshape(1, -1)
            frame = av.AudioFrame.from_ndarray(
                np.ascontiguousarray(block), format=stream.codec_context.format.name, layout=layout
            )
            frame.sample_rate, frame.pts = rate, start + offset
            frame.time_base = Fraction(1, rate)
            for packet in stream.encode(frame):
                muxer.mux(packet)
        for packet in stream.encode(None):
            muxer.mux(packet)
    return out.getvalue()


def _riff(data: bytes) -> bytes:
    return data[:4] + struct.pack("<I", len(data) - 8) + data[8:]


def _wav_variants() -> dict[str, bytes]:
    wav = _encode("pcm_s16le", 22050, "stereo", 2 * 22050 + 3, "wav")
    at = wav.index(b"data")
    end = at + 8 + struct.unpack_from("<I", wav, at + 4)[0]
    junk = b"junk" + struct.pack("<I", 3) + b"abc\0"  # an odd size, and its pad byte
    size_of = wav[: at + 4], wav[at + 8 :]
    return {
        "wav-chunks-after.wav": _riff(wav[:end] + junk + b"LIST" + struct.pack("<I", 4) + b"INFO"),
        "wav-odd-chunk-before.wav": _riff(wav[:at] + junk + wav[at:]),
        "wav-streamed-ffffffff.wav": b"RIFF\xff\xff\xff\xff"
        + size_of[0][8:]
        + b"\xff" * 4
        + size_of[1],
        "wav-streamed-0.wav": b"RIFF\0\0\0\0" + size_of[0][8:] + b"\0" * 4 + size_of[1],
    }


def _flac_behind_id3() -> bytes:
    frame = b"TIT2" + struct.pack(">I", 6) + b"\0\0\0title"
    tag = b"ID3\x03\0\0" + bytes([0, 0, 0, len(frame) + 100]) + frame + b"\0" * 100
    return tag + _encode("flac", 44100, "mono", 2 * 44100 + 5, "flac")


def _two_tracks() -> bytes:
    out = io.BytesIO()
    with av.open(out, "w", format="ipod") as muxer:
        streams = [
            muxer.add_stream("aac", rate=r, options={"aac_pns": "0"}) for r in (44100, 22050)
        ]
        for stream in streams:  # every layout before the first packet opens them all
            stream.layout = "stereo"
        for stream in streams:
            samples = 2 * stream.rate + 11
            noise = (np.random.default_rng(stream.rate).standard_normal((2, samples)) * 0.1).astype(
                np.float32
            )
            for start in range(0, samples, 1024):
                block = np.ascontiguousarray(noise[:, start : start + 1024])
                frame = av.AudioFrame.from_ndarray(block, format="fltp", layout="stereo")
                frame.sample_rate, frame.pts = stream.rate, start
                for packet in stream.encode(frame):
                    muxer.mux(packet)
            for packet in stream.encode(None):
                muxer.mux(packet)
    return out.getvalue()


AAC = {"aac_pns": "0"}
FILES: dict[str, Callable[[], bytes]] = {
    "wav-mono-37800.wav": lambda: _encode("pcm_s16le", 37800, "mono", 37800 + 17, "wav"),
    "flac-51-88200.flac": lambda: _encode("flac", 88200, "5.1", 88200 + 5, "flac"),
    "mp3-11025.mp3": lambda: _encode("libmp3lame", 11025, "mono", 2 * 11025 + 17, "mp3"),
    "aac-88200.m4a": lambda: _encode("aac", 88200, "stereo", 88200 + 17, "ipod", options=AAC),
    # Under a frame, exactly one AAC frame, exactly three: some decode to
    # a whole frame, or (FFmpeg's Vorbis encoder) to less than was encoded.
    "aac-100.m4a": lambda: _encode("aac", 44100, "mono", 100, "ipod", options=AAC),
    "aac-1024.m4a": lambda: _encode("aac", 44100, "mono", 1024, "ipod", options=AAC),
    "mp3-1152.mp3": lambda: _encode("libmp3lame", 44100, "mono", 1152, "mp3"),
    "mp3-47.mp3": lambda: _encode("libmp3lame", 44100, "mono", 47, "mp3"),
    "opus-100.opus": lambda: _encode("libopus", 48000, "mono", 100, "ogg"),
    "opus-8000.opus": lambda: _encode("libopus", 8000, "mono", 2 * 8000 + 1, "ogg"),
    "vorbis-4608.ogg": lambda: _encode(
        "vorbis", 44100, "stereo", 4608, "ogg", options={"strict": "experimental"}
    ),
    "flac-1.flac": lambda: _encode("flac", 44100, "mono", 1, "flac"),
    "wav-12288.wav": lambda: _encode("pcm_s16le", 44100, "mono", 12288, "wav"),
    "flac-id3.flac": _flac_behind_id3,
    "aac-two-tracks.m4a": _two_tracks,
    "mka-opus-at-5s.mka": lambda: _encode(
        "libopus", 48000, "stereo", 2 * 48000 + 7, "matroska", offset=5 * 48000
    ),
    "opus-at-5s.opus": lambda: _encode("libopus", 48000, "stereo", 96007, "ogg", offset=240000),
}


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory) -> dict[bool, Path]:
    src = tmp_path_factory.mktemp("odd-src")
    for name, make in FILES.items():
        (src / name).write_bytes(make())
    for name, data in _wav_variants().items():
        (src / name).write_bytes(data)
    root = tmp_path_factory.mktemp("odd")
    for index in (True, False):
        report = pack(src, root / str(index), progress=False, index=index)
        assert not report.skipped, report.skipped
    return {index: root / str(index) for index in (True, False)}


def _full_decode(blob: bytes) -> tuple[np.ndarray, int]:
    with open_input(io.BytesIO(blob)) as container:
        stream = container.streams.audio[0]
        frames = [frame_to_float32(f) for f in container.decode(stream)]
        return np.concatenate(frames, axis=1), stream.codec_context.sample_rate


KEYS = sorted(
    [name.rsplit(".", 1)[0] for name in FILES]
    + ["wav-chunks-after", "wav-odd-chunk-before", "wav-streamed-ffffffff", "wav-streamed-0"]
)


@pytest.mark.parametrize("index", [True, False], ids=["index", "no-index"])
@pytest.mark.parametrize("key", KEYS)
def test_crops_equal_the_full_decode(packed: dict[bool, Path], key: str, index: bool) -> None:
    dataset = open_dataset(packed[index])
    full, rate = _full_decode(bytes(dataset.blob(key).view()))
    n = full.shape[1]
    if index:
        assert dataset.episode(key).index.ok, dataset.episode(key).index.reason
        assert round(dataset.info(key)["duration"] * rate) == n
    length = n / rate
    crops = [(0, 1 / rate), ((n - 1) / rate, length), (length * 0.6, length), (0, length)]
    crops.append((length / 3, length / 3 + 1 / rate))
    for start, end in crops:
        if round(start * rate) >= n:  # a one-sample episode's 0.6: past its end
            continue
        got = dataset.read_crop(key, start, end)
        want = full[:, round(start * rate) : round(end * rate)]
        assert got.shape == want.shape, (start, end)
        error = float(np.abs(got - want).max())
        assert error <= (0 if key.startswith(LOSSLESS) else TOLERANCE), (start, end, error)
    with pytest.raises(Exception, match="past the end"):
        dataset.read_crop(key, length + 0.01, length + 0.02)
    stats = dataset.decode_stats
    assert stats.past_end == 0 and stats.unplanned_reads == 0 and stats.bad_packets == 0
