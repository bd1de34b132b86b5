"""Ogg Vorbis/Opus seek points against FFmpeg's demuxer; CRC, resync, chains."""

from __future__ import annotations

import io
import struct

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
from streamer.formats.ogg import pages as ogg
from streamer.formats.reader import Reader
from streamer.formats.registry import candidates


def _pages(data: bytes) -> list[ogg.Page]:
    return list(ogg.scan(Reader(io.BytesIO(data))))


@pytest.mark.parametrize("sample_rate", [44100, 22050, 48000])
def test_pyav_vorbis_pages_match_ffmpeg(sample_rate: int) -> None:
    data = encoded("vorbis", sample_rate, 2, seconds=3.0)
    index = index_of(data)
    assert (index.codec, index.container, index.timescale) == ("vorbis", "ogg", sample_rate)
    assert_points_are_packets(index, first_packet_per_position(data))
    assert index.num_samples == decoded_length(data)


def _page_bytes(
    page: ogg.Page, flags: int, granule: int, sequence: int, lacing: bytes, body: bytes
) -> bytes:
    head = bytearray(
        struct.pack("<4sBBqIIIB", b"OggS", 0, flags, granule, page.serial, sequence, 0, len(lacing))
    )
    raw = bytes(head) + lacing + body
    return raw[:22] + struct.pack("<I", ogg.ogg_crc(raw)) + raw[26:]


def _split_inside_a_packet(data: bytes) -> tuple[bytes, int]:
    """Split an audio page whose first packet is longer than one segment in
    two, inside that packet: the second half is a continued page. Returns the
    new file and the second page's offset."""
    pages = _pages(data)
    which = next(n for n, p in enumerate(pages) if n > 3 and p.lacing[0] == 255)
    page = pages[which]
    k = page.lacing.index(255) + 1  # the first packet goes on past this segment
    cut = sum(page.lacing[:k])
    first = _page_bytes(page, page.flags, -1, page.sequence, page.lacing[:k], page.body[:cut])
    second = _page_bytes(
        page, page.flags | 1, page.granule, page.sequence + 1, page.lacing[k:], page.body[cut:]
    )
    out = [data[: page.offset], first, second]
    for later in pages[which + 1 :]:
        raw = data[later.offset : later.end]
        out.append(
            _page_bytes(
                later, later.flags, later.granule, later.sequence + 1, later.lacing, later.body
            )
        )
        assert len(out[-1]) == len(raw)
    return b"".join(out), page.offset + len(first)


def test_packets_continued_across_pages() -> None:
    data = cli_encode(["oggenc", "-Q", "-q", "10", "-o", "{out}", "-"], 44100, 2, seconds=4.0)
    clean = index_of(data)
    split, continued = _split_inside_a_packet(data)
    index = index_of(split)
    assert continued not in index.byte_pos.tolist()  # starts inside a packet
    np.testing.assert_array_equal(index.sample_pos, clean.sample_pos)
    assert_points_are_packets(index, first_packet_per_position(split))
    assert index.num_samples == decoded_length(split)


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


def test_a_corrupt_page_leaves_the_native_index_to_ffmpegs() -> None:
    data = bytearray(cli_encode(["oggenc", "-Q", "-o", "{out}", "-"], 44100, 1, seconds=6.0))
    clean = index_of(bytes(data))
    victim = int(clean.byte_pos[3])
    data[victim + 100] ^= 0xFF  # the page's CRC no longer matches
    # FFmpeg's demuxer drops the page and its decode closes the gap: the
    # granules after it are no longer positions in the full decode.
    index = extract(io.BytesIO(bytes(data)))
    assert index.status == "no index"
    assert index.reason == (
        f"ogg pages lost before byte {int(clean.byte_pos[4])}: FFmpeg's decode closes the gap"
    )
    assert decoded_length(bytes(data)) < clean.num_samples
    found = list(candidates(io.BytesIO(bytes(data))))
    assert [c.container for c in found] == ["ffmpeg:ogg"]
    assert found[0].num_samples == decoded_length(bytes(data))


def _with_granule(data: bytes, offset: int, delta: int) -> bytes:
    """``data`` with ``delta`` added to the granule of the page at ``offset``
    (its CRC redone, its numbering intact)."""
    out = bytearray(data)
    (granule,) = struct.unpack_from("<q", out, offset + 6)
    struct.pack_into("<q", out, offset + 6, granule + delta)
    end = next(page.end for page in _pages(data) if page.offset == offset)
    struct.pack_into("<I", out, offset + 22, 0)
    struct.pack_into("<I", out, offset + 22, ogg.ogg_crc(bytes(out[offset:end])))
    return bytes(out)


@pytest.mark.parametrize(
    ("codec", "rate", "delta"), [("opus", 48000, -960), ("vorbis", 44100, 1), ("flac", 44100, 1)]
)
def test_a_granule_its_packets_do_not_reach_is_no_index(codec: str, rate: int, delta: int) -> None:
    """FFmpeg decodes every packet whatever the granules say: an index that
    took a rewritten granule (CRC redone) served the crops after it that
    far off, verified (Opus 960 samples, Ogg FLAC 1)."""
    data = encoded(codec, rate, 2, seconds=6.0, container="ogg")
    assert index_of(data).ok
    pages = _pages(data)
    index = extract(io.BytesIO(_with_granule(data, pages[len(pages) // 2].offset, delta)))
    assert not index.ok
    assert "an ogg granule position that is not where its packets end" in index.reason


def test_garbage_between_pages_resyncs() -> None:
    plain = encoded("opus", 48000, 2, seconds=3.0)
    clean = index_of(plain)
    cut = int(clean.byte_pos[2])
    data = plain[:cut] + b"OggS" + bytes(3000) + plain[cut:]
    index = index_of(data)
    np.testing.assert_array_equal(index.sample_pos, clean.sample_pos)
    shifted = np.where(clean.byte_pos >= cut, clean.byte_pos + 3004, clean.byte_pos)
    np.testing.assert_array_equal(index.byte_pos, shifted)


def test_chains_of_links_ffmpeg_cannot_decode_as_one_are_rejected() -> None:
    first, second = encoded("opus", 48000, 1), encoded("opus", 48000, 2, seconds=1.0)
    index = extract(io.BytesIO(first + second))
    assert (index.status, index.reason) == ("no index", "chained ogg streams of different formats")


def test_pages_of_a_stream_no_page_announced_are_rejected() -> None:
    a, b = encoded("opus", 48000, 1), cli_encode(["opusenc", "--quiet", "-", "{out}"], 48000, 1)
    a_pages, b_pages = _pages(a), _pages(b)
    assert a_pages[0].serial != b_pages[0].serial
    first = a[: a_pages[0].end]
    data = first + b[b_pages[1].offset : b_pages[1].end] + a[a_pages[0].end :]
    assert extract(io.BytesIO(data)).reason == "multiplexed ogg streams"


def test_truncated_stream_has_unknown_length() -> None:
    data = encoded("opus", 48000, 1, seconds=3.0)
    index = index_of(data[: len(data) * 2 // 3])
    assert index.num_samples == -1
    assert index.data_end <= len(data) * 2 // 3
