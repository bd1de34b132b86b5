"""FLAC seek points against FFmpeg's demuxer: every frame, header range, resync."""

from __future__ import annotations

import io
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest
from _index_support import (
    assert_points_are_packets,
    cli_encode,
    decoded_length,
    encoded,
    first_packet_per_position,
    flac_frame_renumbered,
    index_of,
)

from streamer import open_dataset
from streamer.errors import CropError
from streamer.formats import extract
from streamer.formats.flac import parse as flac
from streamer.formats.reader import NoIndex
from streamer.index.table import ENDS_EARLY
from streamer.write.pack import pack
from testkit.reference import full_decode, full_decode_to_failure


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


def _frames(data: bytes) -> tuple[bytes, list[bytes]]:
    """The metadata of a FLAC file and its frames, whole."""
    index = index_of(data)
    bounds = [int(b) for b in index.byte_pos] + [len(data)]
    return data[: index.data_start], [data[a:b] for a, b in pairwise(bounds)]


def _streaminfo_block(data: bytes, block: int) -> bytes:
    """``data`` with STREAMINFO's minimum and maximum block sizes set to ``block``."""
    return data[:8] + block.to_bytes(2, "big") * 2 + data[12:]


def _short_frame_inside(data: bytes, after: int = 10) -> bytes:
    """``data`` (fixed block size) with a frame of 1000 samples (another
    stream's only frame) spliced in after frame ``after``, the frames after
    it renumbered on: what joining FLAC streams frame by frame makes."""
    head, frames = _frames(data)
    _, (short,) = _frames(encoded("flac", 44100, 1, seconds=1000 / 44100))
    rest = [flac_frame_renumbered(f, n) for n, f in enumerate(frames[after:], after + 1)]
    return head + b"".join([*frames[:after], flac_frame_renumbered(short, after), *rest])


@pytest.mark.parametrize("block", [0, 1, 65535])
def test_a_streaminfo_block_size_the_frames_do_not_hold_is_no_native_index(block: int) -> None:
    # Positions are frame number x STREAMINFO's block size, as the crop's
    # decoder counts them; FFmpeg's decode strings the frames' own samples.
    data = encoded("flac", 44100, 1, seconds=2.0)
    second = int(index_of(data).byte_pos[1])
    with pytest.raises(NoIndex) as raised:
        flac.parse(io.BytesIO(_streaminfo_block(data, block)))
    assert str(raised.value) == (
        f"flac frame of 4608 samples before byte {second}, where streaminfo's block size is {block}"
    )


def test_a_short_frame_before_the_last_is_no_native_index() -> None:
    plain = encoded("flac", 44100, 1, seconds=3.0)
    data = _short_frame_inside(plain)
    after = data.index(flac_frame_renumbered(_frames(plain)[1][10], 11))
    with pytest.raises(NoIndex) as raised:
        flac.parse(io.BytesIO(data))
    assert str(raised.value) == (
        f"flac frame of 1000 samples before byte {after}, where streaminfo's block size is 4608"
    )
    assert decoded_length(data) == decoded_length(plain) + 1000


def test_a_frame_that_comes_again_is_no_native_index() -> None:
    """A frame repeated (a recorder's retry): its header was taken for a
    sync code inside the frame before it, whose bytes it joined."""
    plain = encoded("flac", 44100, 1, seconds=3.0)
    head, frames = _frames(plain)
    data = head + b"".join([*frames[:11], frames[10], *frames[11:]])
    again = len(head) + sum(map(len, frames[:11]))
    with pytest.raises(NoIndex) as raised:
        flac.parse(io.BytesIO(data))
    assert str(raised.value) == (
        f"flac frame at byte {again} repeats an earlier position: FFmpeg's decode plays it again"
    )
    assert decoded_length(data) == decoded_length(plain) + 4608


def _numbered_alike(data: bytes) -> bytes:
    """``data`` with every frame numbered 0, as a test tool writes them
    (python-audio-tools' ``flac-allframes.flac``): FFmpeg decodes them one
    after another all the same."""
    head, frames = _frames(data)
    return head + b"".join(flac_frame_renumbered(frame, 0) for frame in frames)


def test_frames_numbered_alike_are_no_native_index() -> None:
    """No successor confirms such a header (the next one is numbered 0 too),
    so it was taken for a sync code inside a frame: the index ended after
    the first frame, its check failed as "damaged audio", and crops after
    it were lost as past the end. A header whose bytes decode as a whole
    frame, CRC-16 checked, is a frame played again."""
    plain = encoded("flac", 44100, 1, seconds=1.0)
    data = _numbered_alike(plain)
    second = int(index_of(plain).byte_pos[1])
    with pytest.raises(NoIndex) as raised:
        flac.parse(io.BytesIO(data))
    assert str(raised.value) == (
        f"flac frame at byte {second} repeats an earlier position: FFmpeg's decode plays it again"
    )
    assert decoded_length(data) == decoded_length(plain)


def test_crops_of_frames_the_native_index_cannot_place_are_the_full_decode(tmp_path: Path) -> None:
    """Served through FFmpeg's packet index instead. The native one had
    every crop of the first fail; the second's short frame decode as
    silence of 4608 samples, every crop after it 3608 samples late; the
    third's repeated frame join the one before it (one frame of silence),
    every crop after it 4608 samples early: the check blamed "damaged
    audio data" and kept the index."""
    plain = encoded("flac", 44100, 1, seconds=3.0)
    head, frames = _frames(plain)
    files = {
        "streaminfo-65535": _streaminfo_block(plain, 65535),
        "short": _short_frame_inside(plain),
        "again": head + b"".join([*frames[:11], frames[10], *frames[11:]]),
        "numbered-alike": _numbered_alike(plain),
    }
    (tmp_path / "src").mkdir()
    for key, data in files.items():
        (tmp_path / "src" / f"{key}.flac").write_bytes(data)
    pack(tmp_path / "src", tmp_path / "ds", progress=False)
    dataset = open_dataset(tmp_path / "ds")
    for key, data in files.items():
        assert dataset.seek_index(key).ok
        full, rate = full_decode(data)
        for start, end in ((0.0, 0.5), (1.0, 1.7), (2.3, 3.0)):
            got = dataset.read_crop(key, start, end)
            np.testing.assert_array_equal(got, full[:, round(start * rate) : round(end * rate)])
    assert dataset.decode_stats.bad_packets == 0


@pytest.mark.parametrize("kept", [0.5, 0.9, 0.999])
def test_a_last_frame_cut_short_ends_the_index_where_the_full_decode_ends(
    tmp_path: Path, kept: float
) -> None:
    """A download or a recording that stopped inside the last frame: FFmpeg's
    decoder rejects that frame, so the full decode ends before it, and so
    does the index. Before, the index ran to the frame's end: the check
    failed, the index was kept "unverified" with the frame reported as
    damage, and crops over it were its length of silence, counted as a bad
    packet."""
    plain = encoded("flac", 44100, 2, seconds=3.0)
    _, frames = _frames(plain)
    data = plain[: len(plain) - len(frames[-1]) + round(len(frames[-1]) * kept)]
    full, rate = full_decode_to_failure(data)
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "cut.flac").write_bytes(data)
    pack(tmp_path / "src", tmp_path / "ds", progress=False)
    dataset = open_dataset(tmp_path / "ds")
    index = dataset.seek_index("cut")
    assert (index.container, index.verdict) == ("flac", "verified")
    assert index.reason.startswith(f"{ENDS_EARLY}: its decoder rejects the last flac frame")
    assert index.num_samples == full.shape[1] < decoded_length(plain)
    assert index.byte_pos[-1] < len(plain) - len(frames[-1])  # no point at the cut frame
    end = full.shape[1] / rate
    for start, stop in ((0.0, 0.5), (end - 0.4, end), (end - 0.2, end + 1.0)):
        got = dataset.read_crop("cut", start, stop)
        np.testing.assert_array_equal(got, full[:, round(start * rate) : round(stop * rate)])
    with pytest.raises(CropError, match="past the end of the episode"):
        dataset.read_crop("cut", end + 0.01, end + 0.5)
    assert dataset.decode_stats.bad_packets == 0


def test_a_whole_last_frame_with_a_tag_after_it_is_indexed_to_its_end() -> None:
    plain = encoded("flac", 44100, 2, seconds=3.0)
    index = index_of(plain + b"TAG" + bytes(125))
    assert index.num_samples == decoded_length(plain)
