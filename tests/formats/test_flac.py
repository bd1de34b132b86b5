"""FLAC seek points against FFmpeg's demuxer: every frame, header range, resync."""

from __future__ import annotations

import io

import numpy as np
import pytest
from _index_support import (
    assert_points_are_packets,
    cli_encode,
    decoded_length,
    encoded,
    first_packet_per_position,
    index_of,
)

from streamer.formats import extract
from streamer.formats.flac import parse as flac


@pytest.mark.parametrize(
    ("sample_rate", "channels"), [(44100, 1), (48000, 2), (96000, 2), (8000, 1)]
)
def test_pyav_flac_every_frame(sample_rate: int, channels: int) -> None:
    data = encoded("flac", sample_rate, channels)
    index = index_of(data)
    reference = first_packet_per_position(data)
    assert_points_are_packets(index, reference)
    assert len(index.byte_pos) == len(reference)
    assert (index.sample_rate, index.channels) == (sample_rate, channels)
    assert index.num_samples == decoded_length(data)
    assert index.header == ((0, int(index.byte_pos[0])),)
    assert data[:4] == b"fLaC"


@pytest.mark.parametrize("blocksize", [4096, 1152, 192])
def test_flac_cli(blocksize: int) -> None:
    data = cli_encode(["flac", "-s", f"--blocksize={blocksize}", "-o", "{out}", "-"], 22050, 2)
    index = index_of(data)
    assert_points_are_packets(index, first_packet_per_position(data))
    assert index.num_samples == decoded_length(data)
    assert np.all(np.diff(index.sample_pos) == blocksize)


def test_garbage_between_frames_resyncs() -> None:
    plain = encoded("flac", 44100, 2, seconds=3.0)
    clean = index_of(plain)
    cut = int(clean.byte_pos[10])
    garbage = np.random.default_rng(3).integers(0, 256, 20000, dtype=np.uint8).tobytes()
    garbage = garbage.replace(b"\xff", b"\xff\xf8")
    data = plain[:cut] + garbage + plain[cut:]
    index = index_of(data)
    np.testing.assert_array_equal(index.sample_pos, clean.sample_pos)
    shifted = np.where(clean.byte_pos >= cut, clean.byte_pos + len(garbage), clean.byte_pos)
    np.testing.assert_array_equal(index.byte_pos, shifted)


def test_lost_frames_mean_no_native_index() -> None:
    plain = encoded("flac", 44100, 1, seconds=3.0)
    clean = index_of(plain)
    a, b = int(clean.byte_pos[5]), int(clean.byte_pos[8])
    data = plain[:a] + plain[b:]  # frames 5..7 gone
    # FFmpeg's decode closes the gap: the frame numbers after it are no
    # positions in the full decode (FFmpeg's packet index serves the file).
    index = extract(io.BytesIO(data))
    assert (index.status, index.reason) == (
        "no index",
        f"flac frames lost before byte {a}: FFmpeg's decode closes the gap",
    )
    assert decoded_length(data) == clean.num_samples - 3 * 4608


def test_header_crc8() -> None:
    data = encoded("flac", 44100, 1)
    start = index_of(data).byte_pos[0]
    header = flac.frame_header(data, int(start))
    assert header is not None and header.number == 0
    broken = bytearray(data)
    broken[int(start) + 2] ^= 0x01
    assert flac.frame_header(bytes(broken), int(start)) is None
