"""Fixture makers and reference readings shared by the seek-index tests.

The reference is always FFmpeg (through PyAV): its demuxer's packet byte
positions and timestamps, and the length of its full decode.
"""

from __future__ import annotations

import io
import os
import shutil
import struct
import subprocess
import tempfile
import wave
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest

from streamer import open_dataset, synth
from streamer.dataset import Dataset
from streamer.formats import extract
from streamer.formats.flac.parse import crc8
from streamer.formats.ogg import pages as ogg
from streamer.formats.reader import Reader
from streamer.index import SeekIndex
from streamer.write.pack import pack

EVERY = float("inf")


def encoded(
    codec: str, sample_rate: int = 44100, channels: int = 1, seconds: float = 2.0, **kw
) -> bytes:
    return synth.encode(synth.signal(seconds, sample_rate, channels), sample_rate, codec, **kw)


def packed_dataset(folder: Path, files: dict[str, tuple[str, int, int]], *, index: bool) -> Path:
    """``folder``/ds: ``files`` (key -> codec, sample rate, channels; 2 s
    each) packed, with their seek indexes if ``index``."""
    src = folder / "src"
    src.mkdir()
    for key, (codec, rate, channels) in files.items():
        (src / f"{key}.bin").write_bytes(encoded(codec, rate, channels, seconds=2.0))
    root = folder / "ds"
    pack(src, root, progress=False, index=index)
    return root


def packed_alone(folder: Path, data: bytes, name: str) -> tuple[Dataset, str]:
    """(the dataset ``folder``/ds, opened, and its key): ``data`` packed as
    its one file, ``folder``/src/``name``, and indexed."""
    src = folder / "src"
    src.mkdir()
    (src / name).write_bytes(data)
    pack(src, folder / "ds", progress=False)
    return open_dataset(folder / "ds"), name.rsplit(".", 1)[0]


def index_of(data: bytes, density: float = EVERY) -> SeekIndex:
    index = extract(io.BytesIO(data), density=density)
    assert index.ok, index.reason
    return index


def assert_same_index(a: SeekIndex, b: SeekIndex) -> None:
    """Every field equal, arrays element by element (but the content and
    span CRCs a stored row carries beside its index)."""
    for name in SeekIndex.__dataclass_fields__:
        if name in ("content_crc", "span_size", "span_crc"):
            continue
        left, right = getattr(a, name), getattr(b, name)
        if isinstance(left, np.ndarray):
            np.testing.assert_array_equal(left, right)
        else:
            assert left == right, name


def packets(data: bytes) -> list[tuple[int, int]]:
    """(byte position, pts in the stream's sample units) of every audio packet."""
    with av.open(io.BytesIO(data)) as container:
        stream = container.streams.audio[0]
        scale = stream.time_base * stream.codec_context.sample_rate
        found = []
        for packet in container.demux(stream):
            if packet.size and packet.pos is not None and packet.pts is not None:
                found.append((packet.pos, int(packet.pts * scale)))
    return found


def first_packet_per_position(data: bytes) -> dict[int, int]:
    """pos -> pts of the first packet FFmpeg reports at each byte position
    (Ogg packets are reported at the position of their page)."""
    out: dict[int, int] = {}
    for pos, pts in packets(data):
        out.setdefault(pos, pts)
    return out


def decoded_length(data: bytes) -> int:
    with av.open(io.BytesIO(data)) as container:
        return sum(frame.samples for frame in container.decode(audio=0))


def flac_crc16(data: bytes) -> int:
    """FLAC's frame CRC-16 (polynomial 0x8005, init 0), bit by bit: test files only."""
    crc = 0
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x8005) & 0xFFFF if crc & 0x8000 else (crc << 1) & 0xFFFF
    return crc


def flac_coded(value: int) -> bytes:
    """FLAC's UTF-8-like coding of a frame or sample number."""
    if value < 0x80:
        return bytes([value])
    length = next(n for n in range(2, 8) if value < 1 << (5 * n + 1 if n < 7 else 36))
    tail = [0x80 | (value >> (6 * k) & 0x3F) for k in range(length - 1)][::-1]
    return bytes([(0xFF << (8 - length) & 0xFF) | value >> (6 * (length - 1)), *tail])


def flac_frame_renumbered(frame: bytes, number: int, *, variable: bool = False) -> bytes:
    """A whole FLAC frame whose header states ``number`` (a frame number, or
    with ``variable`` a first sample under the variable block size
    strategy), both CRCs recomputed: frames of other files spliced into a
    stream, or strategies no encoder at hand writes."""
    number_length = max(1, 8 - (frame[4] ^ 0xFF).bit_length())
    extra = {6: 1, 7: 2}.get(frame[2] >> 4, 0) + {12: 1, 13: 2, 14: 2}.get(frame[2] & 15, 0)
    head = bytes([0xFF, 0xF9 if variable else 0xF8, frame[2], frame[3]]) + flac_coded(number)
    head += frame[4 + number_length : 4 + number_length + extra]
    head += bytes([crc8(head)])
    body = head + frame[4 + number_length + extra + 1 : -2]
    return body + flac_crc16(body).to_bytes(2, "big")


def wav_bytes(samples: np.ndarray, sample_rate: int) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as file:
        file.setnchannels(samples.shape[0])
        file.setsampwidth(2)
        file.setframerate(sample_rate)
        file.writeframes((np.clip(samples.T, -1, 1) * 32767).astype("<i2").tobytes())
    return out.getvalue()


def cli_encode(command: list[str], sample_rate: int, channels: int, seconds: float = 2.0) -> bytes:
    """Encode with a Debian command-line encoder reading WAV on stdin; it
    writes to the ``{out}`` argument (a seekable file, so tags written last,
    like LAME's, are there). Skips the test when the tool is not installed."""
    if shutil.which(command[0]) is None:
        pytest.skip(f"{command[0]} is not installed")
    source = wav_bytes(synth.signal(seconds, sample_rate, channels), sample_rate)
    with tempfile.TemporaryDirectory() as folder:
        out = os.path.join(folder, "out")
        argv = [out if arg == "{out}" else arg for arg in command]
        subprocess.run(argv, input=source, capture_output=True, check=True)
        with open(out, "rb") as file:
            return file.read()


def encode_with_pts(
    codec: str,
    sample_rate: int,
    channels: int,
    seconds: float = 2.0,
    container_options: dict[str, str] | None = None,
    **stream_options,
) -> bytes:
    """Like ``synth.encode``, plus container options (mp4 faststart) and codec
    context settings (``qscale`` for VBR mp3)."""
    spec = synth.CODECS[codec]
    samples = synth.signal(seconds, sample_rate, channels)
    layout = {1: "mono", 2: "stereo"}[channels]
    with tempfile.TemporaryDirectory() as folder:
        # A real file: mp4's faststart rewrites it in a second pass by name.
        path = os.path.join(folder, f"out.{spec.extension}")
        with av.open(path, "w", format=spec.container, options=container_options or {}) as out:
            stream = out.add_stream(spec.encoder, rate=sample_rate, options=dict(spec.options))
            stream.layout = layout
            for name, value in stream_options.items():
                setattr(stream.codec_context, name, value)
            for start in range(0, samples.shape[1], 1024):
                block = samples[:, start : start + 1024]
                frame = synth._frame(block, spec, layout, sample_rate, start)
                for packet in stream.encode(frame):
                    out.mux(packet)
            for packet in stream.encode(None):
                out.mux(packet)
        with open(path, "rb") as file:
            return file.read()


def assert_points_are_packets(index: SeekIndex, reference: dict[int, int], offset: int = 0) -> None:
    """Every seek point is a packet FFmpeg reports, at the same position and
    timestamp (``offset``: native position minus FFmpeg's pts)."""
    assert len(index.sample_pos) == len(index.byte_pos) > 0
    assert np.all(np.diff(index.sample_pos) > 0) and np.all(np.diff(index.byte_pos) > 0)
    for sample, pos in zip(index.sample_pos.tolist(), index.byte_pos.tolist(), strict=True):
        assert pos in reference, f"no packet at byte {pos}"
        assert sample - offset == reference[pos], (
            f"byte {pos}: {sample - offset} != {reference[pos]}"
        )


def long_mp3(minutes: float) -> bytes:
    """An mp3 of about ``minutes``, made by repeating a short encode's frames."""
    data = encoded("mp3", 44100, 1, seconds=2.0)
    index = index_of(data)
    frames = data[int(index.byte_pos[2]) : int(index.byte_pos[-2])]
    count = len(index.byte_pos) - 4
    repeats = int(minutes * 60 * 44100 / (count * 1152)) + 1
    return frames * repeats


def long_m4a(minutes: float, rate: int = 48000) -> bytes:
    """An AAC m4a of about ``minutes``, made by remuxing a short encode's
    packets over and over (no encoding: cheap). Its ``moov`` grows by 4
    bytes a frame: 30 minutes make one of over 300 KB."""
    with av.open(io.BytesIO(encoded("aac", rate, 1, seconds=2.0))) as source:
        stream = source.streams.audio[0]
        packets = [packet for packet in source.demux(stream) if packet.size][4:-4]
        out = io.BytesIO()
        with av.open(out, "w", format="ipod") as sink:
            target = sink.add_stream_from_template(stream)
            for n in range(int(minutes * 60 * rate / 1024) + 1):
                packet = packets[n % len(packets)]
                packet.pts = packet.dts = n * 1024
                packet.time_base = Fraction(1, rate)
                packet.stream = target
                sink.mux(packet)
    return out.getvalue()


def long_ogg(pages: int) -> bytes:
    """An Ogg Opus stream of ``pages`` audio pages: one page restamped over and over."""
    data = encoded("opus", 48000, 1, seconds=2.0)
    scan = list(ogg.scan(Reader(io.BytesIO(data))))
    head = data[: scan[2].offset]
    page = bytearray(data[scan[3].offset : scan[3].end])
    step = scan[3].granule - scan[2].granule
    out = [head]
    granule = scan[2].granule
    for n in range(pages):
        granule += step
        struct.pack_into("<qII", page, 6, granule, scan[0].serial, 2 + n)
        struct.pack_into("<I", page, 22, 0)
        struct.pack_into("<I", page, 22, ogg.ogg_crc(bytes(page)))
        out.append(bytes(page))
    return b"".join(out)


def empty_first_track(seconds: float = 3.0, rate: int = 44100) -> bytes:
    """An m4a of two AAC tracks, the first with empty sample tables (its
    ``mdhd`` still says ``seconds``), the audio in the second: FFmpeg's
    first audio stream, the one streamer serves, decodes to nothing."""
    samples = synth.signal(seconds, rate, 2)
    out = io.BytesIO()
    with av.open(out, "w", format="ipod") as container:
        streams = [container.add_stream("aac", rate=rate) for _ in range(2)]
        for stream in streams:
            stream.layout = "stereo"
        for stream in streams:
            for start in range(0, samples.shape[1], 1024):
                block = np.ascontiguousarray(samples[:, start : start + 1024])
                frame = av.AudioFrame.from_ndarray(block, format="fltp", layout="stereo")
                frame.sample_rate, frame.pts, frame.time_base = rate, start, Fraction(1, rate)
                for packet in stream.encode(frame):
                    container.mux(packet)
            for packet in stream.encode(None):
                container.mux(packet)
    data = bytearray(out.getvalue())
    first, second = data.find(b"trak"), data.find(b"trak", data.find(b"trak") + 4)
    for box, count_at in ((b"stts", 4), (b"stsc", 4), (b"stco", 4), (b"stsz", 8)):
        at = data.find(box, first, second)
        struct.pack_into(">I", data, at + 4 + count_at, 0)  # the entry (sample) count
    return bytes(data)
