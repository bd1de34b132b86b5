"""MP4/M4A seek points against FFmpeg's demuxer; moov placement, priming, bad boxes."""

from __future__ import annotations

import io
import shutil
import struct
from pathlib import Path

import av
import numpy as np
import pytest
from _index_support import (
    assert_points_are_packets,
    decoded_length,
    empty_first_track,
    encode_with_pts,
    encoded,
    first_packet_per_position,
    index_of,
    packed_alone,
)

from streamer import open_dataset, synth
from streamer.decode.crop import CropRequest, prepare
from streamer.formats import extract
from streamer.formats.ffmpeg import LENGTH_POLICY, full_decode_length
from streamer.formats.job import to_native
from streamer.index.table import ENDS_EARLY
from streamer.write.pack import pack
from testkit.reference import full_decode
from testkit.video import with_video
from tests.decode.test_odd_episodes import _encode


@pytest.mark.parametrize(
    ("codec", "sample_rate", "channels"),
    [
        ("aac", 44100, 1),
        ("aac", 48000, 2),
        ("aac", 16000, 1),
        ("alac", 44100, 2),
        ("alac", 96000, 1),
    ],
)
def test_every_sample_matches_ffmpeg(codec: str, sample_rate: int, channels: int) -> None:
    data = encoded(codec, sample_rate, channels)
    index = index_of(data)
    reference = first_packet_per_position(data)
    assert_points_are_packets(index, reference, offset=index.first_sample)
    assert len(index.byte_pos) == len(reference)
    assert (index.codec, index.container) == (codec, "mp4")
    assert (index.sample_rate, index.channels) == (sample_rate, channels)
    assert full_decode_length(index) == decoded_length(data)
    boxes = _top_level_boxes(data)
    assert [kind for kind, _, _ in boxes][:1] == [b"ftyp"]
    for kind, offset, size in boxes:  # ftyp and moov whole, every other box's header
        assert _covered(index, offset, size if kind in (b"ftyp", b"moov") else 8), kind


def _top_level_boxes(data: bytes) -> list[tuple[bytes, int, int]]:
    boxes, at = [], 0
    while at < len(data):
        size, kind = struct.unpack_from(">I4s", data, at)
        boxes.append((kind, at, size))
        at += size
    return boxes


def _covered(index, offset: int, size: int) -> bool:  # type: ignore[no-untyped-def]
    return any(o <= offset and offset + size <= o + n for o, n in index.header)


@pytest.mark.parametrize("faststart", [False, True])
def test_aac_priming_from_the_edit_list(faststart: bool) -> None:
    options = {"movflags": "+faststart"} if faststart else None
    data = encode_with_pts("aac", 44100, 2, container_options=options)
    index = index_of(data)
    moov, mdat = data.find(b"moov"), data.find(b"mdat")
    assert (moov < mdat) == faststart
    assert index.encoder_delay == index.first_sample == 1024
    # FFmpeg's timestamps have the edit applied: pts = dts - media_time.
    assert_points_are_packets(index, first_packet_per_position(data), offset=1024)
    assert full_decode_length(index) == decoded_length(data)


def test_truncated_with_moov_first_keeps_whole_samples() -> None:
    data = encode_with_pts("aac", 44100, 1, container_options={"movflags": "+faststart"})
    whole = index_of(data)
    cut = len(data) * 2 // 3
    index = index_of(data[:cut])
    assert 0 < len(index.byte_pos) < len(whole.byte_pos)
    assert index.data_end <= cut
    # Said, for streamer index, pack and inspect to report (docs/seek-index.md).
    assert whole.reason == ""
    assert index.reason.startswith(f"{ENDS_EARLY}: the file holds "), index.reason


def test_truncated_with_moov_last_has_no_index() -> None:
    data = encoded("aac", 44100, 1)
    assert not extract(io.BytesIO(data[: len(data) // 2])).ok


def test_a_last_moov_of_size_0_runs_to_the_end_of_the_file(tmp_path: Path) -> None:
    """A box of size 0 runs to the end of the file (ISO 14496-12), as
    FFmpeg reads it. The index was built, but a crop read the moov where
    it has it as 0 bytes: its check failed ("index built for another blob
    (its moov does not parse: truncated mp4 box header)") and every crop
    decoded from the start."""
    data = bytearray(encoded("alac", 44100, 2, seconds=4.0))
    moov = data.rindex(b"moov") - 4
    assert int.from_bytes(data[moov : moov + 4]) == len(data) - moov  # the last box
    data[moov : moov + 4] = bytes(4)
    dataset, key = packed_alone(tmp_path, bytes(data), "a.m4a")
    assert dataset.episode(key).index.ok, dataset.episode(key).index.reason
    full, rate = full_decode(bytes(data))
    for start, end in ((0.0, 0.5), (1.3, 2.1), (3.5, 4.0)):
        got = dataset.read_crop(key, start, end)
        np.testing.assert_array_equal(got, full[:, round(start * rate) : round(end * rate)])
    assert dataset.decode_stats.fallback == 0


def test_absurd_box_sizes_are_rejected_without_allocating() -> None:
    ftyp = struct.pack(">I4s4sI4s", 20, b"ftyp", b"M4A ", 0, b"isom")
    huge_moov = struct.pack(">I4sQ", 1, b"moov", 1 << 40) + bytes(64)
    index = extract(io.BytesIO(ftyp + huge_moov))
    assert index.status == "no index" and "truncated mp4" in index.reason
    huge_mdat = struct.pack(">I4sQ", 1, b"mdat", 1 << 40)
    assert not extract(io.BytesIO(ftyp + huge_mdat + bytes(100))).ok


def test_lying_table_count_is_rejected() -> None:
    data = bytearray(encoded("aac", 44100, 1))
    at = data.find(b"stsz")
    struct.pack_into(">I", data, at + 12, 1 << 31)  # sample count
    assert (
        extract(io.BytesIO(bytes(data))).reason == "mp4 stsz claims more entries than its box holds"
    )


def test_moov_range_is_enough_for_ffmpeg() -> None:
    # The header ranges plus the data range rebuild a file FFmpeg opens.
    data = encoded("alac", 44100, 1)
    index = index_of(data)
    rebuilt = bytearray(len(data))
    for offset, length in index.header:
        rebuilt[offset : offset + length] = data[offset : offset + length]
    rebuilt[index.data_start : index.data_end] = data[index.data_start : index.data_end]
    with av.open(io.BytesIO(bytes(rebuilt))) as container:
        assert container.streams.audio[0].codec_context.name == "alac"
    assert np.all(index.byte_pos >= index.data_start)


@pytest.mark.parametrize(
    ("codec", "sample_rate", "channels", "form"),
    [
        ("mp3", 44100, 2, "mp4"),
        ("mp3", 22050, 1, "mp4"),
        ("opus", 48000, 2, "mp4"),
        # QuickTime's ".mp3" sample entry: "unsupported codec in mp4: '.mp3'".
        ("mp3", 44100, 2, "mov"),
        # "no decoder for flac in mp4": its frames stand alone, no pre-roll.
        ("flac", 44100, 2, "mp4"),
        ("flac", 22050, 1, "mp4"),
    ],
)
def test_mp3_and_opus_in_mp4_are_indexed_and_exact(
    tmp_path: Path, codec: str, sample_rate: int, channels: int, form: str
) -> None:
    """mp3 or Opus inside MP4 (GStreamer's mp4mux, old Nero/iTunes builds,
    FFmpeg) had no index ("no decoder for mp3 in mp4"; FFmpeg's mov demuxer
    refuses a byte seek, so no generic one either) and every crop decoded
    from the start. Their frames are fixed (1152 or 576 samples; Opus:
    FFmpeg's 960), and FFmpeg 8 outputs the last one whole. FFmpeg 9 cuts
    mp3's to where the track ends, Opus's only by what its packet's
    duration runs past the edit: here nothing (the index claimed 648
    samples fewer, and its check demoted it under FFmpeg 9)."""
    data = synth.encode(
        synth.signal(6.0, sample_rate, channels), sample_rate, codec, container=form
    )
    index = index_of(data)
    assert (index.codec, index.container) == (codec, "mp4")
    assert full_decode_length(index) == decoded_length(data)
    dataset, key = packed_alone(tmp_path, data, "a.m4a")
    assert dataset.episode(key).index.ok, dataset.episode(key).index.reason
    full, rate = full_decode(data)
    rng = np.random.default_rng(5)
    for first in [0, full.shape[1] - 2000, *rng.integers(0, full.shape[1] - 2000, 20).tolist()]:
        got = dataset.read_crop(key, first / rate, (first + 2000) / rate)
        assert np.abs(got - full[:, first : first + 2000]).max() <= 1e-4, first
    assert dataset.decode_stats.fallback == 0


@pytest.mark.parametrize(
    ("channels", "sample_rate", "video"), [(2, 44100, False), (2, 48000, True)]
)
def test_alac_muxed_as_mov_is_indexed_and_exact(
    tmp_path: Path, channels: int, sample_rate: int, video: bool
) -> None:
    """FFmpeg's ``mov`` muxer puts ALAC's magic cookie in a ``wave`` box,
    after a ``frma`` box whose payload is ``alac`` too: the byte search
    for the cookie found that one and read the next box's type as the
    frame length (1634492771), so every such file, with or without a
    video beside the audio, had no index ("mp4 sample durations that are
    not the codec's frame (stts)") and every crop decoded from the start.
    The same audio muxed as ``ipod`` was indexed."""
    if video:
        data = with_video(2.5, "mov", "alac", 4096)
    else:
        signal = synth.signal(2.5, sample_rate, channels)
        data = synth.encode(signal, sample_rate, "alac", container="mov")
    assert data.find(b"frma") < data.find(b"alac\x00\x00\x00\x00\x00\x00\x10\x00")
    index = index_of(data)
    assert (index.codec, index.sample_rate, index.channels) == ("alac", sample_rate, channels)
    _assert_served_exactly(tmp_path, data, tolerance=0.0)


@pytest.mark.parametrize(
    ("codec", "channels", "sample_rate"), [("alac", 1, 96000), ("aac", 2, 88200)]
)
def test_a_version_2_sample_entry_states_its_rate_and_channels(
    tmp_path: Path, codec: str, channels: int, sample_rate: int
) -> None:
    """Above 65535 Hz FFmpeg's ``mov`` muxer writes a version 2 sound
    description: the rate is a double after the fixed fields (the 16.16
    field says 1) and so are the channels (the 16-bit field says 3). Read
    from the 16-bit fields, ALAC and AAC in such a MOV had no index ("mp4
    media timescale is not the sample rate"); PCM's were read right."""
    data = synth.encode(
        synth.signal(2.5, sample_rate, channels), sample_rate, codec, container="mov"
    )
    stsd = data.find(b"stsd")
    assert struct.unpack_from(">HH", data, stsd + 28) == (2, 0)  # version 2; revision
    index = index_of(data)
    assert (index.codec, index.sample_rate, index.channels) == (codec, sample_rate, channels)
    _assert_served_exactly(tmp_path, data, tolerance=0.0 if codec == "alac" else 1e-4)


def _assert_served_exactly(tmp_path: Path, data: bytes, tolerance: float) -> None:
    """``data`` packed and indexed: its index passes its check and serves
    boundary and random crops as the full decode has them."""
    index = index_of(data)
    assert full_decode_length(index) == decoded_length(data)
    dataset, key = packed_alone(tmp_path, data, "a.mov")
    assert dataset.episode(key).index.verdict == "verified", dataset.episode(key).index.reason
    full, rate = full_decode(data)
    n = full.shape[1]
    rng = np.random.default_rng(3)
    starts = rng.integers(0, n - 1, 12).tolist()
    bounds = [(0, 1), (0, 4096), (4095, 4097), (8192, 12288), (n - 4096, n), (n - 1, n)]
    for first, last in bounds + [(a, min(n, a + int(rng.integers(1, 9000)))) for a in starts]:
        got = dataset.read_crop(key, first / rate, last / rate)
        assert got.shape == (full.shape[0], last - first)
        assert np.abs(got - full[:, first:last]).max() <= tolerance, (first, last)
    assert dataset.decode_stats.fallback == 0


@pytest.mark.parametrize(
    ("codec", "sample_rate", "layout", "form"),
    [
        ("ac3", 48000, "stereo", "mp4"),
        ("ac3", 32000, "mono", "ipod"),
        ("eac3", 44100, "5.1", "mov"),
    ],
)
def test_ac3_and_eac3_in_mp4_are_indexed_and_exact(
    tmp_path: Path, codec: str, sample_rate: int, layout: str, form: str
) -> None:
    """AC-3 and E-AC-3 in MP4/MOV (movie soundtracks) had no index ("no
    decoder for ac3 in mp4"; FFmpeg's mov demuxer refuses a byte seek, so
    no generic one either). Exact, and the index gives the length, the
    first sample after the edit's 256 and the bytes to read."""
    data = _encode(codec, sample_rate, layout, int(sample_rate * 2.3) + 17, form)
    index = index_of(data)
    assert (index.codec, index.container, index.first_sample) == (codec, "mp4", 256)
    _assert_served_exactly(tmp_path, data, tolerance=0.0)


@pytest.mark.parametrize(("codec", "form"), [("ac3", "mp4"), ("eac3", "mov")])
def test_ac3_crops_late_in_a_soundtrack_decode_from_near_them(
    tmp_path: Path, codec: str, form: str
) -> None:
    """AC-3's and E-AC-3's dither for zero-bit mantissas (up to 0.2 in this
    noise) came from a generator seeded once, at the stream's start, so
    their crops decoded from the first packet, at a cost growing with the
    crop's position: a crop late in a movie's soundtrack decoded all of it.
    Seeded per frame (``cons_noisegen``, the reference's too), a decode
    from 0.1 s before the crop gives the full decode's samples bit for bit.
    The index passes its check (its reference for an episode over
    ``FULL_DECODE_SECONDS`` decoded after a seek from an open of its own:
    the head's decoder, sought, dithered as from the start again)."""
    data = _encode(codec, 48000, "stereo", 48000 * 25, form)
    dataset, key = packed_alone(tmp_path, data, "a.mov")
    episode = dataset.episode(key)
    assert episode.index is not None and episode.index.verdict == "verified"
    full, rate = full_decode(data)
    n = full.shape[1]
    for first, last in ((n - 2 * rate, n - rate), (n - 5000, n), (n // 2 + 777, n // 2 + 9000)):
        plan = prepare(episode, CropRequest(key, first / rate, last / rate)).plan
        assert plan is not None
        assert to_native(episode.index, first) - plan.decode_from <= 0.2 * rate
        got = dataset.read_crop(key, first / rate, last / rate)
        np.testing.assert_array_equal(got, full[:, first:last])
    assert dataset.decode_stats.paths == {"index": 3}


def test_ac3_timed_otherwise_than_its_frame_has_no_index() -> None:
    """An AC-3 packet decodes to 1536 samples whatever ``stts`` says: a
    table timing every packet 1024 would place every crop after the first
    packet wrongly (the first packet's output, asked of FFmpeg's decoder,
    tells the frame)."""
    data = timed_every(_encode("ac3", 48000, "stereo", 20000, "mp4"), 1024)
    index = extract(io.BytesIO(data))
    assert index.reason == "mp4 sample durations that are not the codec's frame (stts)"


def timed_every(data: bytes, duration: int) -> bytes:
    """``data`` with every run of its (first) ``stts`` timing its samples ``duration``."""
    out = bytearray(data)
    at = out.find(b"stts")
    for run in range(struct.unpack_from(">I", out, at + 8)[0]):
        count = struct.unpack_from(">I", out, at + 12 + 8 * run)[0]
        struct.pack_into(">II", out, at + 12 + 8 * run, count, duration)
    return bytes(out)


def test_alac_without_its_magic_cookie_has_no_index_and_says_so() -> None:
    """Without the cookie FFmpeg's ALAC decoder does not open; the reason
    was the frame check's, as if the packets were timed wrongly."""
    data = encoded("alac", 44100, 1)
    at = data.find(b"alac", data.find(b"stsd") + 16 + 36)
    broken = data[:at] + b"xxxx" + data[at + 4 :]
    assert extract(io.BytesIO(broken)).reason == "alac in mp4 without its magic cookie"


def test_an_empty_first_audio_track_is_named_as_such() -> None:
    """FFmpeg's first audio stream, which streamer serves, is the first
    sound track: empty here, the audio in the second. The reason said
    only "empty mp4 sample tables"."""
    data = empty_first_track()
    assert decoded_length(data) == 0
    assert extract(io.BytesIO(data)).reason == (
        "the mp4's first audio track is empty and a later one holds the audio: "
        "streamer serves the first audio stream, as FFmpeg picks it"
    )


@pytest.mark.parametrize("rate", [24000, 12000])
def test_opus_timed_at_the_rate_it_was_encoded_from_has_no_index(rate: int) -> None:
    """FFmpeg's muxer times Opus encoded from 24 or 12 kHz at that rate, and
    its decoder outputs 48 kHz: the index counted half (a quarter) of the
    samples (72324 of 144804), which only its check caught (a long file's
    tail probe: crops 1.1 off). 16 and 8 kHz were refused already."""
    data = _encode("libopus", rate, "stereo", rate * 3, "mp4")
    index = extract(io.BytesIO(data))
    assert not index.ok
    assert index.reason == "mp4 Opus timed at another rate than the 48 kHz it decodes at"


def _edit_shortened(data: bytes, by: int) -> bytes:
    """The track's one edit ending ``by`` units (of the movie timescale) earlier."""
    out = bytearray(data)
    at = data.find(b"elst") - 4
    assert at > 0 and data[at + 8] == 0  # version 0: 32-bit duration
    duration = struct.unpack_from(">I", data, at + 16)[0]
    struct.pack_into(">I", out, at + 16, duration - by)
    return bytes(out)


@pytest.mark.parametrize("by", [0, 1, 7, 30])
@pytest.mark.parametrize(
    ("codec", "sample_rate", "channels"),
    [
        ("aac", 44100, 2),
        ("alac", 44100, 2),
        ("mp3", 44100, 1),
        ("opus", 48000, 2),
        ("flac", 44100, 1),
    ],
)
def test_the_end_is_where_the_installed_ffmpeg_ends_the_track(
    codec: str, sample_rate: int, channels: int, by: int
) -> None:
    """FFmpeg 9 (PyAV 19) cuts the last frame of an MP4 track, by a rule of
    its own per codec: AAC and mp3, whose frame its demuxer knows, to where
    the sample table or the edit list ends the track; every other codec
    (ALAC, Opus, AMR, Vorbis) only by what the last packet's stts duration
    runs past the edit's end. FFmpeg 8 (PyAV 18) cuts nothing. The index
    stores the samples FFmpeg 9 cuts (``padding``) for every codec: ALAC
    and Opus with an edit ending inside their last packet decoded 1-30
    samples shorter under FFmpeg 9 than their index said, and Opus whose
    last packet's duration stops short of its frame 648 longer."""
    data = synth.encode(
        synth.signal(2.0, sample_rate, channels), sample_rate, codec, container="mp4"
    )
    data = _edit_shortened(data, by)
    index = index_of(data)
    assert index.length_policy == ""
    assert full_decode_length(index) == decoded_length(data)


#: Made under PyAV 18 (``python -m tests.formats.test_mp4``): PyAV 19 has no
#: AMR encoder and its muxer writes no Vorbis in MP4.
MADE_UNDER_PYAV_18 = Path(__file__).parent / "data" / "mp4-end"


@pytest.mark.parametrize("name", ["amrnb.3gp", "vorbis.mp4"])
def test_amr_and_vorbis_end_where_the_installed_ffmpeg_ends_them(tmp_path: Path, name: str) -> None:
    """AMR-NB and Vorbis tracks whose edit list ends a few samples before
    their last packet's stts duration does (as FFmpeg's muxer writes them):
    FFmpeg 9 cut 3 and 30 samples, where the index said 110 (AMR: the rest
    of the frame) and 0 (Vorbis), and its check demoted it. The index
    passes its check, and crops up to the very end are exact."""
    data = (MADE_UNDER_PYAV_18 / name).read_bytes()
    index = index_of(data)
    assert full_decode_length(index) == decoded_length(data)
    dataset, key = packed_alone(tmp_path, data, name)
    assert dataset.episode(key).index.verdict == "verified", dataset.episode(key).index.reason
    full, rate = full_decode(data)
    n = full.shape[1]
    for first, last in [(0, 400), (n - 400, n), (n - 1, n), (n // 3, n // 3 + 900)]:
        got = dataset.read_crop(key, first / rate, last / rate)
        assert got.shape == (full.shape[0], last - first)
        assert np.abs(got - full[:, first:last]).max() <= 1e-4, first
    assert dataset.decode_stats.fallback == 0


def _make_fixtures() -> None:
    """A last packet shorter than its frame (8003 and 22051 samples): FFmpeg's
    muxer then ends the edit a few samples before the sample table."""
    from tests.formats.test_generic import make

    MADE_UNDER_PYAV_18.mkdir(parents=True, exist_ok=True)
    amr = make("3gp", "libopencore_amrnb", "s16", 8000, 1, {}, seconds=8003 / 8000)
    vorbis = make("mp4", "vorbis", "fltp", 44100, 2, {"strict": "-2"}, seconds=22051 / 44100)
    (MADE_UNDER_PYAV_18 / "amrnb.3gp").write_bytes(amr)
    (MADE_UNDER_PYAV_18 / "vorbis.mp4").write_bytes(vorbis)


if __name__ == "__main__":
    if not LENGTH_POLICY.endswith(" 62"):
        raise SystemExit(f"make the fixtures under PyAV 18 (FFmpeg 8), not {LENGTH_POLICY}")
    _make_fixtures()
    print(f"wrote {MADE_UNDER_PYAV_18}")


@pytest.mark.parametrize("media_time", [None, 0, 100])
def test_opus_without_an_edit_starts_after_its_pre_skip(
    tmp_path: Path, media_time: int | None
) -> None:
    """Without an edit list (``use_editlist=0``), or with one whose media
    time is 0, FFmpeg's Opus decoder drops the pre-skip (``dOps``) itself:
    the index started at 0 and claimed 312 samples more than FFmpeg decodes
    (its check demoted it). An edit that starts later replaces the pre-skip."""
    data = synth.encode(synth.signal(1.5, 48000, 2), 48000, "opus", container="mp4")
    assert data.count(b"edts") == 1 and data.find(b"dOps") > 0
    if media_time is None:  # the edit list's box made a free one
        data = data.replace(b"edts", b"free")
    else:
        data = _edit_moved_to(data, media_time)
    index = index_of(data)
    assert index.first_sample == (media_time or 312)
    assert full_decode_length(index) == decoded_length(data)
    dataset, key = packed_alone(tmp_path, data, "a.m4a")
    assert dataset.episode(key).index.verdict == "verified", dataset.episode(key).index.reason
    full, rate = full_decode(data)
    n = full.shape[1]
    for first, last in [(0, 3000), (n - 3000, n), (30000, 40000)]:
        got = dataset.read_crop(key, first / rate, last / rate)
        assert got.shape == (2, last - first)
        assert np.abs(got - full[:, first:last]).max() <= 1e-4, first
    assert dataset.decode_stats.fallback == 0


def _edit_moved_to(data: bytes, media_time: int) -> bytes:
    """The track's one edit starting at ``media_time`` (its duration kept)."""
    out = bytearray(data)
    at = data.find(b"elst") - 4
    struct.pack_into(">i", out, at + 20, media_time)
    return bytes(out)


def test_a_dataset_packed_again_in_place_is_not_served_by_the_old_demuxer(tmp_path: Path) -> None:
    """Another M4A of the same byte length packed at the same place in the
    same process (a notebook packing again): the demuxer kept for the first
    episode, its sample tables the old blob's, was taken for the new one by
    (shard, key, length), and every crop failed ("decodes to nothing")."""
    first = _m4a(synth.signal(4.0, 44100, 1, seed=1))
    second = _m4a(synth.signal(3.0, 44100, 2, seed=2))
    shorter, pad = (first, len(second) - len(first))
    if pad < 0:
        shorter, pad = second, -pad
    assert pad >= 8
    padded = shorter + struct.pack(">I", pad) + b"free" + bytes(pad - 8)  # a top-level free box
    first, second = (padded, second) if shorter is first else (first, padded)
    assert len(first) == len(second)
    out = tmp_path / "dataset"
    for blob in (first, second):
        (tmp_path / "src").mkdir(exist_ok=True)
        (tmp_path / "src" / "ep.m4a").write_bytes(blob)
        if out.exists():
            shutil.rmtree(out)
        pack(tmp_path / "src", out, progress=False)
        dataset = open_dataset(out)
        got = [dataset.read_crop("ep", start, start + 0.5) for start in (1.5, 2.0)]
    reference, _ = full_decode(second)
    for crop, start in zip(got, (66150, 88200), strict=True):
        np.testing.assert_array_equal(crop, reference[:, start : start + 22050])
    assert dataset.decode_stats.paths == {"index": 2}


def _m4a(audio: np.ndarray) -> bytes:
    """ALAC in M4A, 44.1 kHz, as FFmpeg's ipod muxer writes it."""
    return synth.encode(audio, 44100, "alac")
