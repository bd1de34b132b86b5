"""PCM in WAV (A-law, µ-law), Sony Wave64 and AIFF/AIFF-C (every layout
FFmpeg's muxers write: signed 8-bit, big-endian integers and floats, G.711):
a native index (the header and arithmetic), checked when packed, crops
bit-identical to FFmpeg's full decode; broken headers give a reason.

These files had the generic FFmpeg index only (2-20 ms a crop instead of
about 1), or, for WAV's G.711, "no decoder for pcm_alaw in wav" first.
"""

from __future__ import annotations

import io
import struct
from pathlib import Path

import av
import numpy as np
import pytest

from streamer.formats import extract
from streamer.formats.wav.decode import G711
from tests.decode.test_odd_episodes import _encode
from tests.formats.test_mp4_pcm import assert_exact_through_the_index

LAYOUTS = {1: "mono", 2: "stereo", 6: "5.1"}


def pcm(codec: str, form: str, channels: int = 2, rate: int = 44100, frames: int = 0) -> bytes:
    """``frames`` (default: a second and a bit) of noise as ``codec``
    through FFmpeg's ``form`` muxer."""
    return _encode(codec, rate, LAYOUTS[channels], frames or rate + 77, form)


CASES = [
    ("wav", "pcm_alaw", 1, 8000),
    ("wav", "pcm_mulaw", 2, 8000),
    ("wav", "pcm_alaw", 6, 44100),
    ("w64", "pcm_s16le", 2, 44100),
    ("w64", "pcm_u8", 1, 8000),
    ("w64", "pcm_s24le", 6, 96000),
    ("w64", "pcm_f32le", 2, 44100),
    ("w64", "pcm_mulaw", 1, 8000),
    ("aiff", "pcm_s16be", 2, 44100),
    ("aiff", "pcm_s8", 1, 8000),
    ("aiff", "pcm_s24be", 6, 96000),
    ("aiff", "pcm_s32be", 2, 44100),
    ("aiff", "pcm_f32be", 2, 96000),
    ("aiff", "pcm_f64be", 1, 44100),
    ("aiff", "pcm_alaw", 2, 8000),
    ("aiff", "pcm_mulaw", 6, 8000),
]


@pytest.mark.parametrize(("form", "codec", "channels", "rate"), CASES)
def test_native_index_bit_exact(
    tmp_path: Path, form: str, codec: str, channels: int, rate: int
) -> None:
    data = pcm(codec, form, channels, rate)
    index = extract(io.BytesIO(data))
    assert (index.container, index.codec) == (form, codec), index.reason
    assert_exact_through_the_index(tmp_path, data, f"a.{form}", form)


def test_g711_tables_are_ffmpegs() -> None:
    """The tables equal FFmpeg's decoders' output for each of the 256 bytes."""
    for codec, table in G711.items():
        context = av.CodecContext.create(codec, "r")
        context.sample_rate, context.layout = 8000, "mono"
        packet = av.Packet(bytes(range(256)))
        (frame,) = context.decode(packet)
        np.testing.assert_array_equal(frame.to_ndarray().ravel(), table, err_msg=codec)


def _chunk(kind: bytes, body: bytes) -> bytes:
    return kind + struct.pack(">I", len(body)) + body + b"\0" * (len(body) & 1)


def _aiff(comm: bytes, sound: bytes, kind: bytes = b"AIFF", offset: int = 0) -> bytes:
    body = kind + _chunk(b"COMM", comm) + _chunk(b"SSND", struct.pack(">II", offset, 0) + sound)
    return b"FORM" + struct.pack(">I", len(body)) + body


def _comm(channels: int, bits: int, exponent: int, mantissa: int, kind: bytes = b"") -> bytes:
    return struct.pack(">HIHHQ", channels, 100, bits, exponent, mantissa) + kind


RATE_44100 = (16398, 44100 << 48)


def test_aiff_hand_made_layouts_and_offset() -> None:
    sound = bytes(range(200))
    index = extract(io.BytesIO(_aiff(_comm(2, 16, *RATE_44100), sound, offset=4)))
    assert (index.codec, index.sample_rate, index.num_samples) == ("pcm_s16be", 44100, 49)
    assert index.data_start == 12 + 26 + 8 + 8 + 4
    for kind, codec in [(b"sowt", "pcm_s16le"), (b"FL32", "pcm_f32be"), (b"ULAW", "pcm_mulaw")]:
        data = _aiff(_comm(1, 16, *RATE_44100, kind + b"\0\0"), sound, b"AIFC")
        index = extract(io.BytesIO(data))
        assert index.codec == codec
        with av.open(io.BytesIO(data)) as container:
            assert container.streams.audio[0].codec_context.name == codec


@pytest.mark.parametrize(
    ("comm", "reason"),
    [
        (_comm(0, 16, *RATE_44100), "aiff with no channels"),
        (_comm(1, 16, 0, 0), "aiff sample rate out of range"),
        (_comm(1, 16, 16383 + 63, 0), "aiff sample rate of 0 or below"),
        (_comm(1, 16, 0x7FFF, 0), "aiff sample rate out of range"),  # inf
        (_comm(1, 16, 0x7FFF, 1 << 62 | 1), "aiff sample rate out of range"),  # NaN
        (_comm(1, 16, 0x8000 | RATE_44100[0], RATE_44100[1]), "aiff sample rate out of range"),
        (_comm(1, 40, *RATE_44100), "unsupported aiff sample size of 40 bits"),
    ],
    ids=["no channels", "exponent 0", "rate 0", "inf", "nan", "negative", "40 bits"],
)
def test_absurd_aiff_header_fields(comm: bytes, reason: str) -> None:
    index = extract(io.BytesIO(_aiff(comm, bytes(100))))
    assert not index.ok and index.reason == reason


def test_aiff_unsupported_compression_and_missing_chunks() -> None:
    adpcm = _aiff(_comm(1, 16, *RATE_44100, b"ima4\0\0"), bytes(100), b"AIFC")
    assert extract(io.BytesIO(adpcm)).reason == "unsupported aiff compression 'ima4'"
    assert not extract(io.BytesIO(b"FORM\0\0\0\x04AIFF")).ok


@pytest.mark.parametrize("form", ["aiff", "w64", "wav"])
def test_truncated_and_huge_sizes(form: str) -> None:
    """Cut anywhere: no index with a reason, or the index of the whole
    frames there (what FFmpeg decodes); a chunk size of 2^32-1 or 2^64-1
    claims no more than the file holds."""
    codec = {"aiff": "pcm_s16be", "w64": "pcm_s16le", "wav": "pcm_alaw"}[form]
    data = pcm(codec, form, 2, 8000, 4000)
    whole = extract(io.BytesIO(data))
    for cut in (1, 11, 16, 30, 41, 60, whole.data_start, len(data) // 2, len(data) - 1):
        index = extract(io.BytesIO(data[:cut]))
        if index.ok:
            assert index.data_start == whole.data_start and index.data_end <= cut
            assert index.num_samples == (cut - index.data_start) // index.block_align
        else:
            assert index.reason
    huge = bytearray(data)
    size_at = whole.data_start - (8 if form == "w64" else 4) - (8 if form == "aiff" else 0)
    if form == "w64":
        huge[size_at : size_at + 8] = b"\xff" * 8
        assert extract(io.BytesIO(bytes(huge))).reason == "invalid w64 chunk size"
    else:
        huge[size_at : size_at + 4] = b"\xff" * 4
        index = extract(io.BytesIO(bytes(huge)))
        assert index.ok and index.num_samples == whole.num_samples


def test_w64_zero_channels() -> None:
    data = bytearray(pcm("pcm_s16le", "w64", 1, 8000, 100))
    at = data.index(b"fmt ") + 24 + 2
    data[at : at + 2] = b"\0\0"
    assert extract(io.BytesIO(bytes(data))).reason == "invalid wav fmt chunk"
