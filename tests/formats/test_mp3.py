"""mp3 seek points against FFmpeg's demuxer: every frame, ID3v2, Xing/LAME, VBR, garbage."""

from __future__ import annotations

import io
import struct

import numpy as np
import pytest
from _index_support import (
    assert_points_are_packets,
    cli_encode,
    decoded_length,
    encode_with_pts,
    encoded,
    first_packet_per_position,
    index_of,
)

from streamer.formats import extract
from streamer.formats.mp3 import parse as mp3
from streamer.index.table import ENDS_EARLY
from testkit.reference import full_decode_to_failure


@pytest.mark.parametrize(
    ("sample_rate", "channels"), [(44100, 1), (48000, 2), (32000, 2), (22050, 1), (8000, 2)]
)
def test_every_frame_matches_ffmpeg(sample_rate: int, channels: int) -> None:
    data = encoded("mp3", sample_rate, channels)
    index = index_of(data)
    reference = first_packet_per_position(data)
    assert_points_are_packets(index, reference)
    assert len(index.byte_pos) == len(reference)  # every frame, none extra
    assert (index.codec, index.container, index.sample_rate) == ("mp3", "mp3", sample_rate)
    assert index.channels == channels
    assert index.num_samples == decoded_length(data)
    # FFmpeg's encoder writes a LAME-style tag: delay 576 (+ 529 decoder delay).
    assert index.first_sample == index.encoder_delay + mp3.DECODER_DELAY
    assert index.header == ()


def test_vbr_with_xing_tag() -> None:
    data = encode_with_pts("mp3", 44100, 1, seconds=3.0, qscale=2)
    index = index_of(data)
    bitrates = {(struct.unpack_from(">I", data, p)[0] >> 12) & 15 for p in index.byte_pos.tolist()}
    assert len(bitrates) > 1, "the fixture is not VBR"
    assert data.find(b"Xing") < index.byte_pos[0]  # the tag frame is not a seek point
    assert_points_are_packets(index, first_packet_per_position(data))
    assert index.num_samples == decoded_length(data)


def _id3v2(payload_size: int, *, footer: bool = False, unsync: bool = False) -> bytes:
    """An ID3v2.4 tag with one big APIC-like frame (cover art)."""
    body = b"APIC" + _syncsafe(payload_size) + b"\0\0" + (b"\xff\x00" * (payload_size // 2))
    flags = (0x10 if footer else 0) | (0x80 if unsync else 0)
    head = b"ID3\x04\x00" + bytes([flags]) + _syncsafe(len(body))
    return head + body + ((b"3DI" + head[3:]) if footer else b"")


def _syncsafe(value: int) -> bytes:
    return bytes((value >> shift) & 0x7F for shift in (21, 14, 7, 0))


@pytest.mark.parametrize(("footer", "unsync"), [(False, False), (True, False), (False, True)])
def test_large_id3v2_tag_is_skipped(footer: bool, unsync: bool) -> None:
    plain = encoded("mp3", 44100, 2)
    tag = _id3v2(300_000, footer=footer, unsync=unsync)
    data = tag + plain
    index = index_of(data)
    assert index.byte_pos[0] > len(tag)
    assert_points_are_packets(index, first_packet_per_position(data))
    np.testing.assert_array_equal(index.byte_pos - len(tag), index_of(plain).byte_pos)


def test_trailing_tags_are_not_audio() -> None:
    plain = encoded("mp3", 44100, 1)
    data = plain + b"APETAGEX" + bytes(24) + b"TAG" + bytes(125)
    index, reference = index_of(data), index_of(plain)
    np.testing.assert_array_equal(index.byte_pos, reference.byte_pos)
    assert index.data_end == reference.data_end == len(plain)


def test_garbage_in_the_middle_ends_the_stream_as_ffmpegs_decode_does() -> None:
    plain = encoded("mp3", 44100, 2, seconds=3.0)
    clean = index_of(plain)
    cut = int(clean.byte_pos[40])
    garbage = np.random.default_rng(1).integers(0, 256, 5000, dtype=np.uint8).tobytes()
    garbage = garbage.replace(b"\xff", b"\xff\xfb")  # plenty of sync-like bytes
    data = plain[:cut] + garbage + plain[cut:]
    index = index_of(data)
    # FFmpeg's decoder rejects the packets its parser makes of the garbage:
    # its full decode ends there, and so do the points and the length.
    np.testing.assert_array_equal(index.sample_pos, clean.sample_pos[:40])
    np.testing.assert_array_equal(index.byte_pos, clean.byte_pos[:40])
    assert index.data_end == cut and index.num_samples == 40 * 1152 - index.first_sample
    assert full_decode_to_failure(data)[0].shape[1] == 40 * 1152 - index.first_sample
    before = first_packet_per_position(data[:cut])
    assert all(
        before[p] == s
        for p, s in zip(index.byte_pos.tolist(), index.sample_pos.tolist(), strict=True)
    )
    # The frames after it are audio no crop reaches: said, for the reports.
    assert index.reason == (
        f"{ENDS_EARLY}: bytes at {cut} are no mpeg audio frame, and frames follow from "
        f"byte {data.index(plain[cut : cut + 64], cut)}"
    )


def test_files_joined_with_their_tags_end_at_the_second_files_tag() -> None:
    """``cat a.mp3 b.mp3`` of files with ID3v2 tags: FFmpeg's decoder rejects
    the packet its parser makes of the second tag, so the full decode (and
    the index) ends with the first file; the index says that frames follow."""
    plain = encoded("mp3", 44100, 2, seconds=2.0)
    tagged = _id3v2(2000) + plain
    index = index_of(tagged + tagged)
    # (the first file's LAME padding is not trimmed: FFmpeg trims it at the stream's end only)
    assert index.num_samples == full_decode_to_failure(tagged + tagged)[0].shape[1]
    assert index.reason.startswith(f"{ENDS_EARLY}: bytes at {len(tagged)} are no mpeg audio")


def test_frames_far_after_junk_are_found_without_reading_back() -> None:
    """Junk longer than the reader's buffer (5 MB, no 0xff): the search for
    frames after it goes on from where the first search stopped. (Searching
    again from the junk's start read back past the buffer: a ValueError,
    and the file lost its index as "malformed mp3 data".)"""
    plain = encoded("mp3", 44100, 2, seconds=2.0)
    junk = np.random.default_rng(3).integers(0, 255, 5_000_000, dtype=np.uint8).tobytes()
    index = index_of(plain + junk + plain)
    assert index.ok and index.num_samples == index_of(plain + junk).num_samples
    follows = int(index.reason.rsplit(" ", 1)[1])  # at the second copy's first frame
    assert len(plain) + len(junk) < follows < len(plain) + len(junk) + 1000, index.reason
    assert index_of(plain + junk).reason == ""


def test_bytes_after_the_last_frame_are_no_early_end() -> None:
    """Tags or junk after the audio end FFmpeg's decode too, with no audio
    lost: nothing to say."""
    plain = encoded("mp3", 44100, 2, seconds=2.0)
    junk = np.random.default_rng(2).integers(0, 256, 5000, dtype=np.uint8).tobytes()
    for data in (plain + junk, plain + b"APETAGEX" + bytes(24) + b"TAG" + bytes(125)):
        assert index_of(data).reason == ""


def test_zero_bytes_in_the_middle_are_passed_over_as_ffmpeg_does() -> None:
    plain = encoded("mp3", 44100, 2, seconds=3.0)
    clean = index_of(plain)
    cut = int(clean.byte_pos[40])
    index = index_of(plain[:cut] + bytes(3000) + plain[cut:])
    np.testing.assert_array_equal(index.sample_pos, clean.sample_pos)
    shifted = np.where(clean.byte_pos >= cut, clean.byte_pos + 3000, clean.byte_pos)
    np.testing.assert_array_equal(index.byte_pos, shifted)
    assert index.num_samples == clean.num_samples
    assert (
        full_decode_to_failure(plain[:cut] + bytes(3000) + plain[cut:])[0].shape[1]
        == clean.num_samples
    )


def test_density_thins_points_to_about_one_per_second() -> None:
    data = encoded("mp3", 44100, 1, seconds=6.0)
    index = index_of(data, density=1.0)
    every = index_of(data)
    assert 6 <= len(index.sample_pos) <= 7
    assert set(index.byte_pos.tolist()) <= set(every.byte_pos.tolist())
    assert np.all(np.diff(index.sample_pos) >= 44100 - 1152)


def test_lame_cli_vbr() -> None:
    data = cli_encode(["lame", "--quiet", "-V", "2", "-", "{out}"], 44100, 2)
    index = index_of(data)
    assert index.encoder_delay > 0
    assert_points_are_packets(index, first_packet_per_position(data))
    assert index.num_samples == decoded_length(data)


def test_sync_needs_a_confirming_successor() -> None:
    # A lone valid-looking header followed by noise is not audio.
    header = struct.pack(">I", 0xFFFB9064)
    noise = np.random.default_rng(2).integers(0, 255, 4000, dtype=np.uint8).tobytes()
    assert (
        extract(io.BytesIO(header + noise.replace(b"\xff", b"\0"))).reason == "no mpeg audio frames"
    )
    assert not mp3.matches(b"\xff\xff\xff\xff")
