"""Hostile files, one by one: every lying count, size or offset is bounded by
the bytes that could hold it before anything is allocated (Python and numpy
allocations measured with tracemalloc), absurd values become "no index" with
the reason, and nothing takes more than linear time."""

from __future__ import annotations

import functools
import io
import struct

import numpy as np
import pytest
from _fuzz import Unseekable, peak_memory
from _index_support import decoded_length, encoded, flac_coded

from streamer.formats import extract
from streamer.formats.flac.parse import crc8
from streamer.formats.mp3 import parse as mp3
from streamer.formats.ogg import pages as ogg
from streamer.formats.reader import CHUNK_SIZE, NoIndex, Reader
from streamer.index import SeekIndex
from streamer.index.checks import check_index

#: What indexing a file of a few hundred KB may take, tables included.
SMALL = 8 << 20


@functools.cache
def m4a() -> bytes:
    """20 s of stereo AAC: about 330 KB, like the file in the issue."""
    return encoded("aac", 44100, 2, seconds=20.0)


def rewritten(data: bytes, box: bytes, offset: int, fmt: str, value: int) -> bytes:
    """``data`` with a field ``offset`` bytes after the box type ``box`` set to ``value``."""
    out = bytearray(data)
    struct.pack_into(fmt, out, data.find(box) + offset, value)
    return bytes(out)


def indexed_within(data: bytes, limit: int = SMALL) -> SeekIndex:
    """The index of ``data``; asserts what it cost and that an ok one is plausible."""
    with peak_memory() as peak:
        index = extract(io.BytesIO(data))
        assert peak() < limit
    assert not index.ok or check_index(index, len(data)) is None
    return index


@pytest.mark.parametrize(
    ("box", "offset", "fmt", "value"),
    [
        (b"stsz", 8, ">II", None),  # a constant size of 1 byte, 2^28 samples
        (b"stsz", 12, ">I", 0xFFFFFFFF),  # a per-sample table claiming 2^32 entries
        (b"stts", 12, ">I", 0xFFFFFFFF),  # a first run of 2^32 samples
        (b"stts", 16, ">I", 0xFFFFFFFF),  # a delta of 2^32 ticks
        (b"stsc", 16, ">I", 0xFFFFFFFF),  # 2^32 samples per chunk
        (b"stco", 12, ">I", 0xFFFFFFFF),  # a chunk offset past the file
        (b"elst", 16, ">i", 0x7FFFFFFF),  # a media time far past the track
        (b"mdhd", 16, ">I", 1000),  # a timescale that is not the rate
    ],
)
def test_mp4_lying_tables_allocate_nothing(box: bytes, offset: int, fmt: str, value) -> None:  # type: ignore[no-untyped-def]
    data = m4a()
    if value is None:
        data = bytearray(data)
        struct.pack_into(">II", data, data.find(box) + offset, 1, 1 << 28)
        data = bytes(data)
    else:
        data = rewritten(data, box, offset, fmt, value)
    index = indexed_within(data)
    assert index.ok or index.reason


def test_mp4_lying_counts_give_the_true_index_or_a_reason() -> None:
    good = extract(io.BytesIO(m4a()))
    # A run or a chunk claiming more samples than stsz lists: clipped, the
    # samples are where they were.
    for box, offset in ((b"stts", 12), (b"stsc", 16)):
        index = indexed_within(rewritten(m4a(), box, offset, ">I", 0xFFFFFFFF))
        np.testing.assert_array_equal(index.byte_pos, good.byte_pos)
    assert indexed_within(rewritten(m4a(), b"stts", 16, ">I", 0xFFFFFFFF)).reason == (
        "implausible index: more samples than the audio bytes can hold"
    )
    assert indexed_within(rewritten(m4a(), b"mdhd", 16, ">I", 1000)).reason == (
        "mp4 media timescale is not the sample rate"
    )
    assert indexed_within(rewritten(m4a(), b"stco", 12, ">I", 0xFFFFFFFF)).reason == (
        "mp4 audio track without samples"
    )


def test_mp4_boxes_nested_without_end() -> None:
    depth = 5000
    inner = b""
    for _ in range(depth):
        inner = struct.pack(">I4s", 8 + len(inner), b"trak") + inner
    moov = struct.pack(">I4s", 8 + len(inner), b"moov") + inner
    ftyp = struct.pack(">I4s4sI4s", 20, b"ftyp", b"M4A ", 0, b"isom")
    assert indexed_within(ftyp + moov).reason == "mp4 boxes nested too deep"


def ogg_page(
    serial: int, sequence: int, granule: int, flags: int, pieces: list[tuple[bytes, bool]]
) -> bytes:
    """One CRC'd page holding ``pieces``: (bytes, whether the packet ends
    here); a piece that does not end its packet is a multiple of 255 long."""
    lacing = bytearray()
    for piece, ends in pieces:
        lacing += b"\xff" * (len(piece) // 255)
        if ends:
            lacing.append(len(piece) % 255)
    raw = bytearray(ogg.HEADER.pack(b"OggS", 0, flags, granule, serial, sequence, 0, len(lacing)))
    raw += lacing + b"".join(piece for piece, _ in pieces)
    struct.pack_into("<I", raw, 22, ogg.ogg_crc(bytes(raw)))
    return bytes(raw)


def ogg_pages(data: bytes) -> list[ogg.Page]:
    return list(ogg.scan(Reader(io.BytesIO(data))))


def long_packet_pages(serial: int, packet: bytes) -> list[bytes]:
    """``packet`` over as many pages as it takes (255 x 255 bytes a page)."""
    step = 255 * 255
    pieces = [packet[at : at + step] for at in range(0, len(packet), step)]
    last = len(pieces) - 1
    return [
        ogg_page(serial, 1, 0 if n == last else -1, ogg.CONTINUED if n else 0, [(piece, n == last)])
        for n, piece in enumerate(pieces)
    ]


def _with_granule(data: bytes, page: int, granule: int) -> bytes:
    """``data`` with the granule of its page number ``page`` replaced (CRC redone)."""
    out = bytearray(data)
    target = ogg_pages(data)[page]
    struct.pack_into("<q", out, target.offset + 6, granule)
    struct.pack_into("<I", out, target.offset + 22, 0)
    crc = ogg.ogg_crc(bytes(out[target.offset : target.end]))
    struct.pack_into("<I", out, target.offset + 22, crc)
    return bytes(out)


def test_ogg_granule_past_what_the_bytes_hold() -> None:
    data = _with_granule(encoded("opus", 48000, 1, seconds=2.0), -3, 1 << 60)
    # Refused before the plausibility check: its packets do not end there.
    assert "granule position that is not where its packets end" in indexed_within(data).reason


def test_an_ogg_last_granule_past_the_packets_is_ignored_as_ffmpeg_does() -> None:
    """FFmpeg's output never runs past what the packets decode to."""
    data = _with_granule(encoded("opus", 48000, 1, seconds=2.0), -1, 1 << 60)
    assert indexed_within(data).num_samples == decoded_length(data)


def test_ogg_comment_packet_is_skipped_not_kept() -> None:
    # 12 MB of comments (a picture, or a lie) between the headers and the
    # audio: indexed as before, without holding it.
    data = encoded("opus", 48000, 1, seconds=2.0)
    pages = ogg_pages(data)
    serial = pages[0].serial
    comment = b"OpusTags" + bytes(12 << 20)
    hostile = (
        data[: pages[0].end]
        + b"".join(long_packet_pages(serial, comment))
        + data[pages[2].offset :]
    )
    index = indexed_within(hostile, limit=6 << 20)  # far less than the 12 MB packet
    assert index.ok
    good = extract(io.BytesIO(data))
    np.testing.assert_array_equal(index.sample_pos, good.sample_pos)


@pytest.mark.timeout(60)
def test_vorbis_setup_of_zeros_is_rejected_in_linear_time() -> None:
    data = encoded("vorbis", 44100, 2, seconds=1.0)
    pages = ogg_pages(data)
    serial = pages[0].serial
    comment, _ = next(pages[1].packets())
    setup = b"\x05vorbis" + bytes((1 << 18) - 7)
    hostile = (
        data[: pages[0].end]
        + ogg_page(serial, 1, 0, 0, [(comment, True)])
        + b"".join(long_packet_pages(serial, setup))
        + data[pages[2].offset :]
    )
    assert indexed_within(hostile).reason == "invalid vorbis setup header"


@pytest.fixture(scope="module")
def flac() -> tuple[bytes, SeekIndex]:
    data = encoded("flac", 44100, 1, seconds=2.0)
    return data, extract(io.BytesIO(data), density=float("inf"))


def test_flac_streaminfo_rate_that_the_frames_contradict(flac) -> None:  # type: ignore[no-untyped-def]
    # The frames say 44.1 kHz; a STREAMINFO of 22.05 kHz would double every duration.
    data = bytearray(flac[0])
    packed = int.from_bytes(data[18:26], "big")
    packed = (packed & ((1 << 44) - 1)) | (22050 << 44)
    data[18:26] = packed.to_bytes(8, "big")
    assert indexed_within(bytes(data)).reason == "flac frame sample rate disagrees with streaminfo"
    data[18:26] = (packed & ((1 << 44) - 1)).to_bytes(8, "big")  # a rate of 0
    assert indexed_within(bytes(data)).reason == "invalid flac streaminfo"


def test_flac_cut_at_the_front_starts_at_its_first_frame(flac) -> None:  # type: ignore[no-untyped-def]
    data, index = flac
    cut = data[: index.data_start] + data[int(index.byte_pos[3]) :]
    found = indexed_within(cut)
    assert found.first_sample == int(index.sample_pos[3]) == int(found.sample_pos[0])
    assert found.num_samples == decoded_length(cut)  # FFmpeg's full decode


@pytest.mark.timeout(60)
def test_flac_run_of_false_frame_headers_costs_linear_time(flac) -> None:  # type: ignore[no-untyped-def]
    # Thousands of well-formed headers (CRC-8 right) that each skip frames:
    # each was once confirmed by searching a megabyte ahead for its successor.
    data, index = flac
    first = data[int(index.byte_pos[0]) : int(index.byte_pos[1])]
    fakes = bytearray()
    for number in range(4, 12000, 2):
        header = bytes([0xFF, 0xF8, 0x59, 0x08]) + flac_coded(number)
        fakes += header + bytes([crc8(header)]) + bytes(16 - len(header) - 1)
    hostile = data[: index.data_start] + first + bytes(fakes)
    found = indexed_within(hostile)
    assert found.ok and len(found.byte_pos) >= 1


def test_wav_absurd_channel_count() -> None:
    data = bytearray(encoded("wav", 16000, 1, seconds=0.5))
    at = data.find(b"fmt ") + 8
    struct.pack_into("<HHIIH", data, at, 1, 300, 16000, 16000 * 600, 600)
    assert indexed_within(bytes(data)).reason == "implausible index: channel count out of range"


def test_forward_only_stream_is_held_to_its_real_length() -> None:
    # A wav whose data chunk claims 10 s but holds none: from a pipe the
    # parser cannot know the length up front; extract learns it and says so.
    data = encoded("wav", 16000, 1, seconds=10.0)
    head = data[: data.find(b"data") + 8]
    index = extract(Unseekable(head))  # type: ignore[arg-type]
    assert index.reason == "implausible index: audio data range outside the blob"


class Greedy(Unseekable):
    """A forward-only stream that allocates whatever a read asks for, as
    ``RawIOBase.read`` does; it records the largest ask."""

    largest = 0

    def read(self, size: int = -1) -> bytes:
        self.largest = max(self.largest, size)
        return super().read(size)


def test_forward_only_stream_is_never_asked_for_a_claimed_size() -> None:
    # Found by the fuzzer: an mp4 claiming a 1 GiB moov, read from a pipe,
    # had the stream allocate 1 GiB for a read the data could not fill.
    ftyp = struct.pack(">I4s4sI4s", 20, b"ftyp", b"M4A ", 0, b"isom")
    data = ftyp + struct.pack(">I4s", (1 << 30) - 1, b"moov") + bytes(1000)
    stream = Greedy(data)
    with peak_memory() as peak:
        assert extract(stream).reason == "truncated mp4 moov box"  # type: ignore[arg-type]
        assert peak() < 4 << 20
    assert stream.largest <= CHUNK_SIZE


def test_id3_tag_then_half_a_frame_header() -> None:
    # Found by the fuzzer: two bytes of sync after a tag made the frame
    # search count from the buffer's end and read a header past it.
    data = b"ID3\x03\x00\x00\x00\x00\x00\x00" + b"\xff\xfb"
    with pytest.raises(NoIndex, match="no mpeg audio frames"):
        mp3.parse(io.BytesIO(data))
