"""mp3 and mp2 as found in the wild: crops equal FFmpeg's full decode.

Files come from real encoders (LAME and twolame on the command line, PyAV's
mp2 encoder) and byte-level edits of them for what FFmpeg's mp3 demuxer
reads its own way: a Xing/Info frame without LAME tag, one stating neither a
count nor a size (FFmpeg decodes it as audio), a VBRI frame, wrong frame
counts, concatenated files, ID3v2.2 tags (with and without junk after them),
ID3v1 and APE trailers, a cut last frame, junk after the tag frame, leading
zeros, a file of a few samples. Every crop, first and last samples included,
must match the full decode with zero lag, no fallback and no read outside
the plan. VBR files with stretches of tiny frames check the bit reservoir's
pre-roll, frame by frame and crop by crop.
"""

from __future__ import annotations

import dataclasses
import io
import os
import random
import shutil
import struct
import subprocess
import tempfile
from array import array
from collections.abc import Callable
from pathlib import Path

import av
import numpy as np
import pytest
from _index_support import wav_bytes

from streamer import open_dataset
from streamer.decode.crop import CropRequest, read_crop
from streamer.decode.verify import choose_index, verify_index
from streamer.formats import extract
from streamer.formats.ffmpeg import open_input
from streamer.formats.frames import frame_to_float32
from streamer.formats.job import DecodeStats, Episode
from streamer.formats.mp3 import parse as mp3
from streamer.index import SeekIndex
from streamer.shard import BlobHandle
from streamer.storage import MemoryReader
from streamer.synth import signal
from streamer.write.pack import pack
from testkit.reference import full_decode

TOLERANCE = 1e-4
SECONDS = 2.0


def _encode(tool: str, options: list[str], samples: np.ndarray, rate: int) -> bytes:
    """Encode a WAV file with a Debian command-line encoder (``lame`` or
    ``twolame``, both ``tool [options] in out``); skips when not installed."""
    if shutil.which(tool) is None:
        pytest.skip(f"{tool} is not installed")
    with tempfile.TemporaryDirectory() as folder:
        source, out = os.path.join(folder, "in.wav"), os.path.join(folder, "out")
        with open(source, "wb") as file:
            file.write(wav_bytes(samples, rate))
        subprocess.run([tool, "--quiet", *options, source, out], capture_output=True, check=True)
        with open(out, "rb") as file:
            return file.read()


def _lame(options: list[str], samples: np.ndarray, rate: int) -> bytes:
    return _encode("lame", options, samples, rate)


def _lame_file(*options: str, channels: int = 2, rate: int = 44100) -> bytes:
    return _lame(list(options), signal(SECONDS, rate, channels, seed=3), rate)


def _bursts(seconds: float, rate: int, seed: int) -> np.ndarray:
    """Stereo stretches of a faint tone (tiny frames that lend the reservoir
    little) between loud tones with noise (big frames that borrow much)."""
    rng = np.random.default_rng(seed)
    n = round(seconds * rate)
    out = np.zeros((2, n), dtype=np.float32)
    at = 0
    while at < n:
        length = min(int(rng.integers(rate // 20, rate // 3)), n - at)
        tone = np.sin(2 * np.pi * rng.uniform(200, 5000) * np.arange(length) / rate)
        level = 0.4 if rng.random() < 0.5 else 1e-4
        out[:, at : at + length] = level * (tone + rng.standard_normal((2, length)) / 2)
        at += length
    return np.clip(out, -1, 1)


def _episode(data: bytes, index: SeekIndex) -> Episode:
    blob = BlobHandle(MemoryReader(data), 0, len(data), shard="wild.wsds", key="k")
    return Episode("k", "wild.wsds", blob, index)


def _spans(
    duration: float, count: int, seed: int, longest: float = 0.5
) -> list[tuple[float, float]]:
    """The first and last 0.2 s and ``count`` random crops up to ``longest`` s."""
    rng = random.Random(seed)
    spans = [(0.0, min(0.2, duration)), (max(duration - 0.2, 0.0), duration)]
    for _ in range(count):
        start = rng.uniform(0, max(duration - 0.01, 0.0))
        spans.append((start, min(duration, start + rng.uniform(0.005, longest))))
    return spans


def _assert_exact(data: bytes, crops: int = 20, seed: int = 0, longest: float = 0.5) -> SeekIndex:
    """Index ``data`` and compare crops with the full decode; returns the index."""
    full, _ = full_decode(data)
    index = extract(io.BytesIO(data))
    assert index.ok, index.reason
    assert index.num_samples == full.shape[1]
    rate = index.sample_rate
    episode, stats = _episode(data, index), DecodeStats()
    for start, end in _spans(full.shape[1] / rate, crops, seed, longest):
        got = read_crop(episode, CropRequest("k", start, end), stats).audio
        want = full[:, round(start * rate) : round(end * rate)]
        assert got.shape == want.shape, (start, end)
        error = float(np.abs(got - want).max()) if got.size else 0.0
        assert error <= TOLERANCE, f"[{start:.4f}, {end:.4f}): max abs error {error:.2e}"
    assert (stats.fallback, stats.unplanned_reads, stats.bad_packets) == (0, 0, 0)
    return index


# --- encoders -----------------------------------------------------------------

LAME = {
    "vbr-v5": ["-V", "5"],
    "vbr-v9": ["-V", "9"],
    "cbr-128": ["-b", "128"],
    "abr-96": ["--abr", "96"],
    "mono": ["-m", "m", "-V", "4"],
    "joint": ["-m", "j", "-b", "96"],
    "dual": ["-m", "d", "-b", "160"],
    "crc": ["-p", "-V", "3"],
    "no-tag": ["-t", "-V", "5"],
    "mpeg2-24k": ["--resample", "24", "-V", "6"],
    "mpeg2-22k": ["--resample", "22.05", "-b", "32"],
    "mpeg2-16k-crc": ["--resample", "16", "-p", "-V", "7"],
    "mpeg25-11k": ["--resample", "11.025", "-V", "8"],
    "mpeg25-8k-mono": ["--resample", "8", "-m", "m", "-V", "9"],
}


@pytest.mark.parametrize("name", sorted(LAME))
def test_lame_encodings(name: str) -> None:
    _assert_exact(_lame_file(*LAME[name]))


def _mp2(rate: int, channels: int, bit_rate: int) -> bytes:
    samples = signal(SECONDS, rate, channels, seed=5)
    out = io.BytesIO()
    with av.open(out, "w", format="mp2") as container:
        stream = container.add_stream(
            "mp2", rate=rate, layout="mono" if channels == 1 else "stereo"
        )
        stream.bit_rate = bit_rate
        pcm = (samples * 32767).astype(np.int16).T.reshape(1, -1)
        frame = av.AudioFrame.from_ndarray(pcm, format="s16", layout=stream.layout.name)
        frame.sample_rate = rate
        for packet in [*stream.encode(frame), *stream.encode(None)]:
            container.mux(packet)
    return out.getvalue()


@pytest.mark.parametrize(("rate", "channels", "bit_rate"), [(44100, 2, 192000), (22050, 1, 48000)])
def test_layer_two(rate: int, channels: int, bit_rate: int) -> None:
    """FFmpeg decodes mp2 with its fixed-point decoder, whose rounding carries
    an error feedback from the first frame: crops are within 1 LSB of s16."""
    index = _assert_exact(_mp2(rate, channels, bit_rate))
    assert index.codec == "mp2"


@pytest.mark.parametrize(
    ("options", "rate"),
    [([], 44100), (["-p", "-m", "m"], 48000), (["-v", "-m", "j"], 44100), ([], 22050)],
)
def test_twolame(options: list[str], rate: int) -> None:
    """Debian's layer II encoder: CRC, mono, joint stereo, VBR, MPEG-2."""
    index = _assert_exact(_encode("twolame", options, signal(SECONDS, rate, 2, seed=6), rate))
    assert index.codec == "mp2"


def test_free_format_is_refused_like_ffmpeg() -> None:
    """FFmpeg cannot open free-format mp3 (bitrate index 0): no index either."""
    data = _lame_file("--freeformat", "-b", "200")
    with pytest.raises(av.InvalidDataError):
        full_decode(data)
    assert not extract(io.BytesIO(data)).ok


# --- the bit reservoir --------------------------------------------------------


@pytest.mark.parametrize(("quality", "seed"), [("5", 1), ("9", 2)])
def test_vbr_small_frames_need_their_own_preroll(quality: str, seed: int) -> None:
    """After near-silence (small frames) a frame's main data reaches many
    frames back: the indexer counts how far and crops start there."""
    data = _lame(["-V", quality], _bursts(3.0, 44100, seed), 44100)
    index = _assert_exact(data, crops=150, seed=seed, longest=0.05)
    per_frame = 1152 if index.sample_rate >= 32000 else 576
    assert index.preroll > mp3.PREROLL_FRAMES * per_frame, "no small-frame stretch"


def test_default_preroll_alone_is_not_enough() -> None:
    """The same -V 9 file with the stored pre-roll removed: some crop differs
    (the test above has teeth)."""
    data = _lame(["-V", "9"], _bursts(3.0, 44100, 2), 44100)
    full, _ = full_decode(data)
    index = dataclasses.replace(extract(io.BytesIO(data)), preroll=0)
    episode, rate = _episode(data, index), index.sample_rate
    errors = []
    for start, end in _spans(full.shape[1] / rate, 150, 2, 0.05):
        got = read_crop(episode, CropRequest("k", start, end)).audio
        errors.append(float(np.abs(got - full[:, round(start * rate) : round(end * rate)]).max()))
    assert max(errors) > TOLERANCE


# --- header variants (byte-level edits) ----------------------------------------


def _frames(data: bytes) -> list[int]:
    """Offsets of the frames of a tagless CBR/VBR stream."""
    offsets, at = [], 0
    while at + 4 <= len(data):
        frame = mp3.frame_info(struct.unpack_from(">I", data, at)[0] & 0xFFFFFE00)
        if frame is None:
            break
        offsets.append(at)
        at += frame.length
    return offsets


def _tag_frame(audio: bytes, at: int, body: bytes) -> bytes:
    """A silent frame with the stream's first header and ``body`` at ``at``."""
    length = _frames(audio)[1]
    frame = bytearray(length)
    frame[:4] = audio[:4]
    frame[at : at + len(body)] = body
    return bytes(frame)


def _xing(audio: bytes, word: bytes = b"Xing", flags: int = 3, frames: int | None = None) -> bytes:
    """A Xing/Info frame (MPEG-1 stereo: after 32 bytes of side info), no LAME tag."""
    count = len(_frames(audio)) if frames is None else frames
    body = word + struct.pack(">I", flags)
    body += struct.pack(">I", count) * bool(flags & 1)
    body += struct.pack(">I", len(audio) + _frames(audio)[1]) * bool(flags & 2)
    return _tag_frame(audio, 36, body) + audio


def _vbri(audio: bytes) -> bytes:
    """A Fraunhofer VBRI frame (version 1, 32 bytes after the header)."""
    size, count = len(audio) + _frames(audio)[1], len(_frames(audio))
    body = (
        b"VBRI" + struct.pack(">HHHII", 1, 1105, 75, size, count) + struct.pack(">4H", 0, 1, 2, 1)
    )
    return _tag_frame(audio, 36, body) + audio


def _lame_count(data: bytes, change: int, size: int | None = None) -> bytes:
    """LAME's Xing frame with its frame count (and stream size) rewritten."""
    out = bytearray(data)
    at = out.find(b"Xing", 0, 200)
    assert at > 0 and struct.unpack_from(">I", out, at + 4)[0] & 3 == 3
    struct.pack_into(">I", out, at + 8, struct.unpack_from(">I", out, at + 8)[0] + change)
    if size is not None:
        struct.pack_into(">I", out, at + 12, size)
    return bytes(out)


def _id3v2(version: int, text: bytes) -> bytes:
    """An ID3v2 tag with one title frame (v2.2: 3-letter id, 3-byte size)."""
    if version == 2:
        frame = b"TT2" + len(text).to_bytes(3, "big") + text
    else:
        frame = b"TIT2" + len(text).to_bytes(4, "big") + b"\0\0" + text
    body = frame + bytes(64)  # padding, as taggers leave
    size = bytes((len(body) >> shift) & 0x7F for shift in (21, 14, 7, 0))
    return b"ID3" + bytes([version, 0, 0]) + size + body


def _untagged() -> bytes:
    return _lame_file("-t", "-V", "5")


def _tagged() -> bytes:
    return _lame_file("-V", "5")


ID3V1 = b"TAG" + b"Title".ljust(30, b"\0") + bytes(95)


def _junk_after_tag_frame() -> bytes:
    """A frame header and noise between the tag frame and the audio (seen in
    the wild): FFmpeg starts at the first frame the next one confirms."""
    data = _tagged()
    audio = extract(io.BytesIO(data)).data_start
    header = data[audio : audio + 4]
    noise = np.random.default_rng(7).integers(0, 255, 585, dtype=np.uint8).tobytes()
    return data[:audio] + header + noise.replace(b"\xff", b"\0") + data[audio:]


def _very_short() -> bytes:
    """24 samples: LAME's skip and padding meet in the second packet, whose
    end padding resets what is left of the skip (FFmpeg outputs 551 samples,
    not 24)."""
    return _lame(["-V", "9"], signal(0.001, 24000, 2, seed=4), 24000)


VARIANTS: dict[str, Callable[[], bytes]] = {
    "xing-no-lame": lambda: _xing(_untagged()),
    "info-no-lame": lambda: _xing(_untagged(), b"Info"),
    "xing-count-only": lambda: _xing(_untagged(), flags=1),
    "xing-nothing-stated": lambda: _xing(_untagged(), flags=0),  # decoded as audio
    "xing-wrong-count": lambda: _xing(_untagged(), frames=7),  # no LAME tag: unused
    "vbri": lambda: _vbri(_untagged()),
    "lame-count-too-big": lambda: _lame_count(_tagged(), +3),
    "lame-count-small-concatenated": lambda: _lame_count(_tagged(), -20, size=2000),
    "concatenated-files": lambda: _tagged() + _tagged(),
    "id3v22": lambda: _id3v2(2, b"\0Title") + _tagged(),
    "id3v22-junk-after": lambda: _id3v2(2, b"\0Title") + b"\0\0" + _tagged(),  # tag frame is audio
    "id3v23-and-id3v22": lambda: _id3v2(3, b"\0Title") + _id3v2(2, b"\0Title") + _tagged(),
    "id3v1-only": lambda: _untagged() + ID3V1,
    "lame-and-id3v1": lambda: _tagged() + ID3V1,
    "ape-and-id3v1": lambda: _tagged() + b"APETAGEX" + bytes(24) + ID3V1,
    "broken-id3v2-header": lambda: b"ID3\x03\x00\x00\x00\x00\x80\x10" + _tagged(),
    "cut-last-frame": lambda: _tagged()[:-300],
    "cut-last-frame-and-id3v1": lambda: _tagged()[:-300] + ID3V1,
    "junk-after-tag-frame": _junk_after_tag_frame,
    "very-short": _very_short,
    "leading-zeros": lambda: bytes(3000) + _tagged(),  # tag frame is audio
}


#: FFmpeg 9 (libavformat 63, PyAV 19) no longer lets the end padding reset the skip.
FFMPEG_9 = av.library_versions["libavformat"] >= (63,)


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_header_variants(name: str) -> None:
    if name == "very-short" and FFMPEG_9:
        # FFmpeg 9 outputs 22 samples, not 551: the native index (FFmpeg 8's
        # count) fails its check and FFmpeg's generic packet index serves it.
        data = VARIANTS[name]()
        native = extract(io.BytesIO(data))
        checked = verify_index(_episode(data, native))
        assert not checked.ok and "FFmpeg decodes 22" in checked.reason
        blob = BlobHandle(MemoryReader(data), 0, len(data), key="k")
        served = choose_index(blob, key="k").index
        assert served.ok and served.container == "ffmpeg:mp3", served.reason
        return
    _assert_exact(VARIANTS[name]())


def test_tag_frame_is_audio_when_it_states_nothing() -> None:
    """FFmpeg skips a Xing frame only when it states a count or a size."""
    audio = _untagged()
    stated, silent = extract(io.BytesIO(_xing(audio))), extract(io.BytesIO(_xing(audio, flags=0)))
    assert silent.num_samples == stated.num_samples + 1152
    assert silent.data_start == stated.data_start - _frames(audio)[1]


@pytest.mark.parametrize("change", [-1, -20])
def test_lame_count_below_the_frames_is_no_index(change: int) -> None:
    """FFmpeg drops ``padding - 529`` samples ending at the stated count's
    last frame and decodes the frames after them: a hole inside the stream,
    which an offset and a length cannot describe. The episode is left to the
    fallback, with the reason."""
    data = _lame_count(_tagged(), change)
    index = extract(io.BytesIO(data))
    assert not index.ok
    assert "drops samples inside the stream" in index.reason
    tagged = _tagged()
    clean, holed = full_decode(tagged)[0], full_decode(data)[0]
    stated = extract(io.BytesIO(tagged))
    frames = (stated.first_sample + stated.num_samples + stated.padding - 529) // 1152
    hole = (frames + change) * 1152 - stated.padding + 529 - stated.first_sample
    # As long as the clean decode (whose end loses as much), the same up to
    # the hole, and the frames after it follow it.
    assert holed.shape == clean.shape
    np.testing.assert_array_equal(holed[:, :hole], clean[:, :hole])
    after = hole + stated.padding - 529
    tail = min(1152, clean.shape[1] - after)
    np.testing.assert_array_equal(holed[:, hole : hole + tail], clean[:, after : after + tail])


def test_a_lone_frame_is_no_audio_like_ffmpeg() -> None:
    """FFmpeg's demuxer starts only where two frames follow each other."""
    data = _untagged()
    alone = data[: _frames(data)[1]] + ID3V1
    with pytest.raises(av.InvalidDataError):
        full_decode(alone)
    assert extract(io.BytesIO(alone)).reason == "no mpeg audio frames"


def test_packed_dataset_keeps_the_preroll(tmp_path: Path) -> None:
    """Packed and indexed, the reservoir's pre-roll survives the index table
    and the dataset's crops are exact."""
    data = _lame(["-V", "9"], _bursts(3.0, 44100, 2), 44100)
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "bursts.mp3").write_bytes(data)
    pack(tmp_path / "src", tmp_path / "set", progress=False)
    dataset = open_dataset(tmp_path / "set")
    assert dataset.seek_index("bursts").preroll == extract(io.BytesIO(data)).preroll > 0
    full, rate = full_decode(data)[0], 22050
    for start, end in _spans(full.shape[1] / rate, 40, 9, 0.05):
        got = dataset.read_crop("bursts", start, end)
        np.testing.assert_array_equal(got, full[:, round(start * rate) : round(end * rate)])
    stats = dataset.decode_stats
    assert (stats.fallback, stats.unplanned_reads, stats.bad_packets) == (0, 0, 0)


def test_latin1_id3v1_is_packed(tmp_path: Path) -> None:
    """An ID3v1 title in Latin-1 (not UTF-8): PyAV before 19 refuses to open
    the file unless told to ignore such tags; pack's probe does, and crops are exact
    against the full decode (opened the same way)."""
    data = _tagged() + b"TAG" + b"Caf\xe9".ljust(30, b"\0") + bytes(95)
    if int(av.__version__.split(".")[0]) < 19:  # PyAV 19 reads it with surrogateescape
        with pytest.raises(UnicodeDecodeError):
            av.open(io.BytesIO(data)).close()
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "cafe.mp3").write_bytes(data)
    assert pack(tmp_path / "src", tmp_path / "set", progress=False).skipped == []
    dataset = open_dataset(tmp_path / "set")
    with open_input(io.BytesIO(data)) as container:
        full = np.concatenate([frame_to_float32(f) for f in container.decode(audio=0)], axis=1)
    for start, end in _spans(full.shape[1] / 44100, 10, 4):
        got = dataset.read_crop("cafe", start, end)
        np.testing.assert_array_equal(got, full[:, round(start * 44100) : round(end * 44100)])
    assert dataset.decode_stats.fallback == 0


@pytest.mark.parametrize(("options", "rate"), [(["-V", "5"], 44100), (["-V", "9"], 24000)])
def test_every_frame_is_exact_from_its_computed_need(options: list[str], rate: int) -> None:
    """Frame by frame: a bare decoder started the computed number of frames
    before a frame outputs exactly what the full decode does for it."""
    data = _lame(options, _bursts(1.5, rate, 3), rate)
    index = extract(io.BytesIO(data), density=float("inf"))
    ends = [*index.byte_pos[1:].tolist(), index.data_end]
    frames = [data[a:b] for a, b in zip(index.byte_pos.tolist(), ends, strict=True)]
    needs = mp3._frame_needs(array("Q", [struct.unpack_from(">Q", f)[0] for f in frames]))

    def decoded(first: int, last: int) -> list[np.ndarray]:
        decoder = av.CodecContext.create("mp3float", "r")
        return [
            frame_to_float32(f) for p in frames[first:last] for f in decoder.decode(av.Packet(p))
        ]

    full = decoded(0, len(frames))
    for k, need in enumerate(needs.tolist()):
        np.testing.assert_array_equal(decoded(max(k - need, 0), k + 1)[-1], full[k], err_msg=str(k))
    assert needs.max() > mp3.PREROLL_FRAMES
