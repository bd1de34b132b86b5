"""Ogg Vorbis/Opus seek points against FFmpeg's demuxer; CRC, resync, chains."""

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

from streamer.index import extract, ogg
from streamer.index._common import Reader


def _pages(data: bytes) -> list[ogg.Page]:
    return list(ogg.pages(Reader(io.BytesIO(data))))


@pytest.mark.parametrize("sample_rate", [44100, 22050, 48000])
def test_pyav_vorbis_pages_match_ffmpeg(sample_rate: int) -> None:
    data = encoded("vorbis", sample_rate, 2, seconds=3.0)
    index = index_of(data)
    assert (index.codec, index.container, index.timescale) == ("vorbis", "ogg", sample_rate)
    assert_points_are_packets(index, first_packet_per_position(data))
    # FFmpeg's experimental encoder writes pages that end inside a packet:
    # such continued pages are never seek points.
    continued = [p.offset for p in _pages(data) if p.flags & 1]
    assert continued and not set(continued) & set(index.byte_pos.tolist())


@pytest.mark.parametrize(("sample_rate", "channels"), [(44100, 1), (22050, 2), (8000, 1)])
def test_oggenc_vorbis(sample_rate: int, channels: int) -> None:
    data = cli_encode(["oggenc", "-Q", "-o", "{out}", "-"], sample_rate, channels)
    index = index_of(data)
    assert_points_are_packets(index, first_packet_per_position(data))
    assert len(index.byte_pos) == len(first_packet_per_position(data))
    assert index.num_samples == decoded_length(data)
    assert index.first_sample == 0 and index.sample_pos[0] < 0  # first packet only primes


@pytest.mark.parametrize(
    ("sample_rate", "channels"), [(48000, 1), (48000, 2), (16000, 2), (8000, 1)]
)
def test_pyav_opus(sample_rate: int, channels: int) -> None:
    data = encoded("opus", sample_rate, channels, seconds=3.0)
    index = index_of(data)
    assert (index.codec, index.sample_rate, index.timescale) == ("opus", 48000, 48000)
    assert index.encoder_delay == 312  # libopus pre-skip
    # FFmpeg's Opus timestamps are granule positions minus the pre-skip.
    assert_points_are_packets(index, first_packet_per_position(data), offset=index.encoder_delay)
    assert index.num_samples == decoded_length(data)
    assert index.header == ((0, int(index.byte_pos[0])),)


def test_opusenc() -> None:
    data = cli_encode(["opusenc", "--quiet", "-", "{out}"], 44100, 2)
    index = index_of(data)
    assert_points_are_packets(index, first_packet_per_position(data), offset=index.encoder_delay)
    assert index.first_sample == index.encoder_delay
    assert index.num_samples == decoded_length(data)


def test_ogg_crc_matches_stored_checksums() -> None:
    for page in _pages(encoded("opus", 48000, 1)):
        assert page.granule >= -1  # parsed, so its CRC matched


def test_corrupt_page_is_skipped_and_points_resume_after_a_granule() -> None:
    data = bytearray(cli_encode(["oggenc", "-Q", "-o", "{out}", "-"], 44100, 1, seconds=6.0))
    clean = index_of(bytes(data))
    victim = int(clean.byte_pos[3])
    data[victim + 100] ^= 0xFF  # the page's CRC no longer matches
    index = index_of(bytes(data))
    assert victim not in index.byte_pos.tolist()
    # The page after the lost one cannot be placed (its start is unknown),
    # every other point is still exact.
    kept = set(index.byte_pos.tolist())
    assert kept == set(clean.byte_pos.tolist()) - {victim, int(clean.byte_pos[4])}
    good = {p: s for s, p in zip(clean.sample_pos.tolist(), clean.byte_pos.tolist(), strict=True)}
    assert all(
        good[p] == s
        for s, p in zip(index.sample_pos.tolist(), index.byte_pos.tolist(), strict=True)
    )


def test_garbage_between_pages_resyncs() -> None:
    plain = encoded("opus", 48000, 2, seconds=3.0)
    clean = index_of(plain)
    cut = int(clean.byte_pos[2])
    data = plain[:cut] + b"OggS" + bytes(3000) + plain[cut:]
    index = index_of(data)
    np.testing.assert_array_equal(index.sample_pos, clean.sample_pos)
    shifted = np.where(clean.byte_pos >= cut, clean.byte_pos + 3004, clean.byte_pos)
    np.testing.assert_array_equal(index.byte_pos, shifted)


def test_chained_streams_are_rejected() -> None:
    first, second = encoded("opus", 48000, 1), encoded("opus", 48000, 1, seconds=1.0)
    index = extract(io.BytesIO(first + second))
    assert (index.status, index.reason) == ("no index", "chained ogg streams")


def test_multiplexed_streams_are_rejected() -> None:
    a, b = encoded("opus", 48000, 1), cli_encode(["opusenc", "--quiet", "-", "{out}"], 48000, 1)
    a_pages, b_pages = _pages(a), _pages(b)
    assert a_pages[0].serial != b_pages[0].serial
    first = a[: a_pages[0].end]
    data = first + b[: b_pages[0].end] + a[a_pages[0].end :]
    assert extract(io.BytesIO(data)).reason == "multiplexed ogg streams"


def test_truncated_stream_has_unknown_length() -> None:
    data = encoded("opus", 48000, 1, seconds=3.0)
    index = index_of(data[: len(data) * 2 // 3])
    assert index.num_samples == -1
    assert index.data_end <= len(data) * 2 // 3
