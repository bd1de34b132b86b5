"""WAV: RIFF/RF64, WAVE_FORMAT_EXTENSIBLE; the index is the header and arithmetic."""

from __future__ import annotations

import io
import struct

import av
import numpy as np
import pytest
from _index_support import decoded_length, encoded, index_of

from streamer.formats import extract


@pytest.mark.parametrize(("sample_rate", "channels"), [(16000, 1), (44100, 2), (48000, 2)])
def test_pcm_wav(sample_rate: int, channels: int) -> None:
    data = encoded("wav", sample_rate, channels)
    index = index_of(data)
    assert (index.codec, index.container, index.block_align) == ("pcm_s16le", "wav", 2 * channels)
    assert (
        index.num_samples
        == decoded_length(data)
        == (len(data) - index.data_start) // (2 * channels)
    )
    assert index.header == ((0, index.data_start),)
    assert data[index.data_start - 8 : index.data_start - 4] == b"data"
    assert index.byte_pos.tolist() == [index.data_start]


def _wav(fmt: bytes, frames: bytes, *, rf64: bool = False, extra: bytes = b"") -> bytes:
    fmt_chunk = b"fmt " + struct.pack("<I", len(fmt)) + fmt
    if not rf64:
        body = b"WAVE" + fmt_chunk + extra + b"data" + struct.pack("<I", len(frames)) + frames
        return b"RIFF" + struct.pack("<I", len(body)) + body
    ds64 = b"ds64" + struct.pack("<IQQQI", 28, 0, len(frames), 0, 0)
    body = b"WAVE" + ds64 + fmt_chunk + extra + b"data" + struct.pack("<I", 0xFFFFFFFF) + frames
    return b"RF64" + struct.pack("<I", 0xFFFFFFFF) + body


def _extensible(channels: int, rate: int, bits: int, subformat: int) -> bytes:
    align = channels * bits // 8
    guid = (
        struct.pack("<H", subformat) + b"\x00\x00\x00\x00\x10\x00\x80\x00\x00\xaa\x00\x38\x9b\x71"
    )
    return (
        struct.pack("<HHIIHHHHI", 0xFFFE, channels, rate, rate * align, align, bits, 22, bits, 3)
        + guid
    )


def test_extensible_24_bit_with_a_list_chunk() -> None:
    frames = np.random.default_rng(0).integers(0, 256, 6 * 1000, dtype=np.uint8).tobytes()
    data = _wav(
        _extensible(2, 48000, 24, 1), frames, extra=b"LIST" + struct.pack("<I", 5) + b"abcde\0"
    )
    index = index_of(data)
    assert (index.codec, index.block_align, index.num_samples) == ("pcm_s24le", 6, 1000)
    with av.open(io.BytesIO(data)) as container:
        assert container.streams.audio[0].codec_context.name == "pcm_s24le"
    assert decoded_length(data) == 1000


def test_rf64_float() -> None:
    frames = np.zeros(2 * 500, dtype="<f4").tobytes()
    fmt = struct.pack("<HHIIHH", 3, 2, 44100, 44100 * 8, 8, 32)
    index = index_of(_wav(fmt, frames, rf64=True))
    assert (index.codec, index.num_samples) == ("pcm_f32le", 500)


def test_unsupported_and_broken() -> None:
    adpcm = struct.pack("<HHIIHH", 2, 1, 8000, 4000, 256, 4)
    assert (
        extract(io.BytesIO(_wav(adpcm, bytes(512)))).reason
        == "unsupported wav format 0x0002 with 4 bits"
    )
    assert not extract(io.BytesIO(b"RIFF\x10\0\0\0WAVEfmt ")).ok
