"""``Format.first_damage``: the first FLAC frame or Ogg page of a file that
fails its own CRC, which the index check asks for when it fails
(``decode.verify.check``: such a failure is damaged audio, not a wrong
index). Bytes that are no frame or page but no damage either (a last page
cut short, garbage between pages, tags after the last frame) are not
reported; formats without checksums of their own report nothing."""

from __future__ import annotations

import io

import numpy as np
import pytest
from _index_support import encoded, index_of

from streamer.formats.registry import format_for
from streamer.index import SeekIndex

#: codec -> (sample rate, channels): 3 s each, several frames or pages a second.
CODECS = {"flac": (44100, 2), "vorbis": (44100, 2), "opus": (48000, 1)}


def _file(codec: str) -> tuple[bytes, SeekIndex]:
    rate, channels = CODECS[codec]
    data = encoded(codec, rate, channels, seconds=3.0)
    return data, index_of(data, density=1.0)


def _first_damage(data: bytes, index: SeekIndex) -> tuple[int, int] | None:
    form = format_for(index)
    assert form is not None
    return form.first_damage(io.BytesIO(data))


def _flipped(data: bytes, at: int, bit: int = 0x10) -> bytes:
    damaged = bytearray(data)
    damaged[at] ^= bit
    return bytes(damaged)


@pytest.mark.parametrize("codec", sorted(CODECS))
def test_an_intact_file_has_no_damage(codec: str) -> None:
    data, index = _file(codec)
    assert _first_damage(data, index) is None


@pytest.mark.parametrize("codec", sorted(CODECS))
def test_a_flipped_bit_is_the_frame_or_page_that_holds_it(codec: str) -> None:
    """One bit flipped 300 bytes into the frame or page at a seek point (past
    an Ogg page's header and lacing values, at most 282 bytes): that frame
    or page is reported, starting at the seek point, and holds the bit."""
    data, index = _file(codec)
    start = int(index.byte_pos[len(index.byte_pos) // 2])
    found = _first_damage(_flipped(data, start + 300), index)
    assert found is not None
    offset, length = found
    assert offset == start and start + 300 < offset + length
    # Only the first is reported: a second flip further on changes nothing.
    later = int(index.byte_pos[-1]) + 300
    assert _first_damage(_flipped(_flipped(data, start + 300), later), index) == found


def test_a_flac_frame_header_failing_its_crc8_is_reported_with_the_frame_before() -> None:
    """A damaged header leaves its bytes to the frame before (as a crop cuts
    frames), which then decodes to fewer samples than they stand for: that
    frame is reported, and its bytes run over the damaged header."""
    data, index = _file("flac")
    point = len(index.byte_pos) // 2
    header = int(index.byte_pos[point])
    found = _first_damage(_flipped(data, header + 3, 0x01), index)
    assert found is not None
    offset, length = found
    assert offset < header < offset + length
    # A damaged first frame header: the damage starts where the frames do.
    first = int(index.byte_pos[0])
    assert _first_damage(_flipped(data, first + 3, 0x01), index)[0] == first


def test_flac_tags_after_the_last_frame_are_no_damage() -> None:
    data, index = _file("flac")
    assert _first_damage(data + b"TAG" + bytes(125), index) is None


def test_an_ogg_file_cut_short_is_no_damage() -> None:
    """A last page cut by the end of the file (a recording stopped, a copy
    cut short) is dropped by the index and FFmpeg alike: not damage."""
    data, index = _file("vorbis")
    cut = int(index.byte_pos[-1]) + 300
    assert _first_damage(data[:cut], index) is None


def test_garbage_between_ogg_pages_is_no_damage() -> None:
    """Garbage is skipped by the index and FFmpeg alike; a page that follows
    it and fails its CRC is still found."""
    data, index = _file("opus")
    point = int(index.byte_pos[1])
    junk = np.random.default_rng(3).bytes(500).replace(b"OggS", b"oggs")
    spliced = data[:point] + junk + data[point:]
    assert _first_damage(spliced, index) is None
    damaged = _flipped(spliced, point + len(junk) + 300)
    assert _first_damage(damaged, index)[0] == point + len(junk)


@pytest.mark.parametrize(("codec", "channels"), [("mp3", 2), ("wav", 2), ("aac", 2)])
def test_formats_without_checksums_report_nothing(codec: str, channels: int) -> None:
    """mp3, WAV and AAC in MP4 have none a crop checks (their audio data is
    covered by the span CRCs the index records instead)."""
    data = encoded(codec, 44100, channels, seconds=2.0)
    index = index_of(data, density=1.0)
    assert _first_damage(_flipped(data, len(data) // 2), index) is None
