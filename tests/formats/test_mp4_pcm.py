"""PCM inside QuickTime MOV and MP4 (``twos``, ``sowt``, ``in24``, ``in32``,
``fl32``, ``fl64``, ``raw ``, ``ulaw``, ``alaw``, version-2 ``lpcm``,
ISO ``ipcm``/``fpcm``): an index from the sample tables, crops bit-identical
to FFmpeg's full decode.

The files come from FFmpeg's own muxer (through PyAV), then have their
chunks laid out again the way other writers do: many chunks of odd sizes
with other bytes between them (a camera interleaving video), a sample size
of 1 (Apple's old files), and a sample table that lies.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import struct
from pathlib import Path

import av
import numpy as np
import pytest
from _fuzz import peak_memory
from _index_support import (
    assert_points_are_packets,
    decoded_length,
    first_packet_per_position,
    packed_alone,
)
from helpers import rewrite_index_shard

from streamer import open_dataset
from streamer.cli import main
from streamer.formats import extract
from streamer.formats.ffmpeg import full_decode_length
from streamer.index.checks import check_index
from streamer.write.pack import pack
from testkit.reference import full_decode
from testkit.video import with_video
from tests.decode.test_odd_episodes import _encode
from tests.formats.test_mp4 import _assert_served_exactly
from tests.formats.test_mp4_wild import _box, _path, _splice

#: Each codec, the sample format its PyAV encoder takes, and the fourcc
#: FFmpeg's MOV muxer writes for it.
ENCODERS = {
    "pcm_s16be": ("s16", b"twos"),
    "pcm_s16le": ("s16", b"sowt"),
    "pcm_s24be": ("s32", b"in24"),
    "pcm_s24le": ("s32", b"in24"),
    "pcm_s32be": ("s32", b"in32"),
    "pcm_s32le": ("s32", b"in32"),
    "pcm_f32be": ("flt", b"fl32"),
    "pcm_f32le": ("flt", b"fl32"),
    "pcm_f64be": ("dbl", b"fl64"),
    "pcm_f64le": ("dbl", b"fl64"),
    "pcm_u8": ("u8", b"raw "),
    "pcm_s8": ("u8", b"sowt"),
    "pcm_mulaw": ("s16", b"ulaw"),
    "pcm_alaw": ("s16", b"alaw"),
}


def pcm(
    codec: str, channels: int = 1, frames: int = 44101, rate: int = 44100, form: str = "mov"
) -> bytes:
    """``frames`` of noise as ``codec`` through FFmpeg's ``form`` muxer."""
    layout = {1: "mono", 2: "stereo", 6: "5.1"}[channels]
    return _encode(codec, rate, layout, frames, form)


def _full_box(kind: bytes, entries: bytes, count: int) -> bytes:
    return _box(kind, struct.pack(">II", 0, count) + entries)


def rechunked(data: bytes, chunks: list[int], gap: int = 0) -> bytes:
    """The one chunk FFmpeg's muxer writes cut into chunks of ``chunks``
    frames (the rest in a last one), ``gap`` bytes of other data between
    them, with ``stsc`` and ``stco`` written anew. ``mdat`` comes before
    ``moov``: only ``moov`` moves."""
    (offset,) = struct.unpack_from(
        ">I", data, _path(data, [b"moov", b"trak", b"mdia", b"minf", b"stbl", b"stco"])[-1] + 16
    )
    mdat = _path(data, [b"mdat"])[0]
    moov = _path(data, [b"moov"])[0]
    assert mdat < moov
    stsz = _path(data, [b"moov", b"trak", b"mdia", b"minf", b"stbl", b"stsz"])[-1]
    frame_bytes, total = struct.unpack_from(">II", data, stsz + 12)
    sizes = [*chunks, total - sum(chunks)]
    body, offsets, at = bytearray(), [], offset
    for n in sizes:
        body += b"\xa5" * gap if offsets else b""
        offsets.append(mdat + 8 + len(body))
        body += data[at : at + n * frame_bytes]
        at += n * frame_bytes
    moov_bytes = data[moov:]
    stbl = [b"moov", b"trak", b"mdia", b"minf", b"stbl"]
    stsc = b"".join(struct.pack(">III", i + 1, n, 1) for i, n in enumerate(sizes))
    moov_bytes = _splice(moov_bytes, [*stbl, b"stsc"], _full_box(b"stsc", stsc, len(sizes)), True)
    stco = b"".join(struct.pack(">I", o) for o in offsets)
    moov_bytes = _splice(moov_bytes, [*stbl, b"stco"], _full_box(b"stco", stco, len(sizes)), True)
    return data[:mdat] + struct.pack(">I4s", 8 + len(body), b"mdat") + bytes(body) + moov_bytes


def rewritten(data: bytes, kinds: list[bytes], offset: int, value: int) -> bytes:
    """A 32-bit field ``offset`` bytes into the box at ``kinds`` set to ``value``."""
    out = bytearray(data)
    struct.pack_into(">I", out, _path(data, kinds)[-1] + offset, value)
    return bytes(out)


STBL = [b"moov", b"trak", b"mdia", b"minf", b"stbl"]


def assert_exact_through_the_index(
    tmp_path: Path, data: bytes, name: str = "a.mov", container: str = "mp4"
) -> None:
    """Checked when packed (verified), its native index of ``container``,
    and crops bit-identical to the full decode."""
    index = extract(io.BytesIO(data))
    assert index.ok, index.reason
    assert full_decode_length(index) == decoded_length(data)
    dataset, key = packed_alone(tmp_path, data, name)
    stored = dataset.episode(key).index
    assert stored.ok and stored.verdict == "verified", stored.reason
    assert stored.container == container and stored.codec.startswith("pcm_")
    full, rate = full_decode(data)
    n = full.shape[1]
    rng = np.random.default_rng(len(data))
    spans = [(0, 1), (0, n), (n - 1, n), (n - 1500, n), (1023, 1025), (1024, 3000)]
    spans += [
        (int(a), int(a) + int(b))
        for a, b in zip(rng.integers(0, n - 1, 12), rng.integers(1, 9000, 12), strict=True)
    ]
    for first, last in spans:
        last = min(last, n)
        got = dataset.read_crop(key, first / rate, last / rate)
        np.testing.assert_array_equal(got, full[:, first:last], err_msg=f"{first}-{last}")
    stats = dataset.decode_stats
    assert stats.fallback == 0 and stats.unplanned_reads == 0 and stats.bad_packets == 0


@pytest.mark.parametrize("codec", sorted(ENCODERS))
def test_every_pcm_layout_in_mov_is_indexed_and_bit_exact(tmp_path: Path, codec: str) -> None:
    """Each PCM layout FFmpeg's MOV muxer writes (QuickTime version 0 for
    16/8-bit, mu-law and A-law; version 1 with ``enda`` for 24/32-bit and
    float), mono: had no index ("unsupported codec in mp4: 'twos'", and
    FFmpeg's MOV demuxer refuses the generic index's byte seek), so every
    crop decoded from the start."""
    data = pcm(codec)
    assert ENCODERS[codec][1] in data
    assert_exact_through_the_index(tmp_path, data)


@pytest.mark.parametrize(
    ("codec", "channels", "rate", "form"),
    [
        ("pcm_s16be", 2, 44100, "mov"),
        ("pcm_s24le", 2, 48000, "mov"),
        ("pcm_f64be", 2, 22050, "mov"),
        ("pcm_u8", 2, 8000, "mov"),
        ("pcm_alaw", 2, 8000, "mov"),
        ("pcm_s16le", 6, 48000, "mov"),
        ("pcm_s24le", 2, 96000, "mov"),  # a rate over 65535: version 2, "lpcm"
        ("pcm_s16be", 1, 96000, "mov"),
        # version 2 "ulaw"/"alaw": indexed as pcm_u8 (the flags read as "lpcm"'s),
        # refused when served (audio_info says mulaw), and blamed on audio_info
        ("pcm_mulaw", 2, 96000, "mov"),
        ("pcm_alaw", 1, 96000, "mov"),
        ("pcm_s16le", 2, 44100, "mp4"),  # ISO 23003-5: "ipcm" with "pcmC"
        ("pcm_s24be", 1, 44100, "mp4"),
        ("pcm_f32le", 2, 44100, "mp4"),  # "fpcm"
    ],
)
def test_stereo_multichannel_high_rate_and_iso_pcm(
    tmp_path: Path, codec: str, channels: int, rate: int, form: str
) -> None:
    data = pcm(codec, channels, frames=rate + 77, rate=rate, form=form)
    assert_exact_through_the_index(tmp_path, data, f"a.{form}")


@pytest.mark.parametrize(
    ("codec", "channels", "chunks", "gap"),
    [
        ("pcm_s16be", 2, [1000, 333, 4097, 1, 20000], 77),  # odd sizes, video between
        ("pcm_s24le", 1, [7, 2048, 1023], 0),  # contiguous chunks
        ("pcm_mulaw", 1, [22050], 4096),
    ],
)
def test_chunks_of_odd_sizes_with_other_data_between(
    tmp_path: Path, codec: str, channels: int, chunks: list[int], gap: int
) -> None:
    """FFmpeg cuts each chunk into packets of 1024 frames (the last shorter):
    with every point kept, the index's points are FFmpeg's packets."""
    data = rechunked(pcm(codec, channels), chunks, gap)
    index = extract(io.BytesIO(data), density=float("inf"))
    assert index.ok, index.reason
    assert_points_are_packets(index, first_packet_per_position(data), offset=0)
    assert len(index.byte_pos) == len(first_packet_per_position(data))
    assert_exact_through_the_index(tmp_path, data)


def test_a_sample_size_of_one_byte_as_apple_writes_it(tmp_path: Path) -> None:
    """Old QuickTime files say 1 in ``stsz`` for PCM: FFmpeg takes the frame
    size from the sample description, and so does the index."""
    data = rechunked(pcm("pcm_s16be", 2), [4410, 4410], 0)
    data = rewritten(data, [*STBL, b"stsz"], 12, 1)
    assert_exact_through_the_index(tmp_path, data)


@functools.cache
def _faststart() -> bytes:
    data = pcm("pcm_s16be", 2, frames=4 * 44100)
    data = rechunked(data, [44100, 44100, 44100], 16)
    # moov first, as a camera or `-movflags +faststart` writes it.
    mdat, moov = _path(data, [b"mdat"])[0], _path(data, [b"moov"])[0]
    moved = len(data) - moov
    out = data[:mdat] + data[moov:] + data[mdat:moov]
    stco = _path(out, [*STBL, b"stco"])[-1]
    count = struct.unpack_from(">I", out, stco + 12)[0]
    out = bytearray(out)
    for i in range(count):
        at = stco + 16 + 4 * i
        struct.pack_into(">I", out, at, struct.unpack_from(">I", out, at)[0] + moved)
    return bytes(out)


def test_moov_first_is_exact(tmp_path: Path) -> None:
    assert_exact_through_the_index(tmp_path, _faststart())


def indexed_within(data: bytes, limit: int = 8 << 20) -> object:
    with peak_memory() as peak:
        index = extract(io.BytesIO(data))
        assert peak() < limit
    assert not index.ok or check_index(index, len(data)) is None
    return index


def test_a_truncated_mov_has_no_index() -> None:
    """Cut inside its samples (moov first): FFmpeg decodes what is there of
    the last chunk, the index would not say where that ends. No index,
    the fallback serves it."""
    data = _faststart()
    index = indexed_within(data[: len(data) - 50000])
    assert not index.ok and index.reason == "truncated mp4: PCM chunks run past the end of the file"


@pytest.mark.parametrize(
    ("box", "offset", "value", "reason"),
    [
        (b"stsc", 20, 0xFFFFFFFF, "truncated mp4: PCM chunks run past the end of the file"),
        (b"stsc", 20, 0, "mp4 PCM chunk of no samples"),
        (b"stco", 16, 0xFFFFFF00, "truncated mp4: PCM chunks run past the end of the file"),
        (b"stco", 12, 0x7FFFFFFF, "mp4 stco claims more entries than its box holds"),
        (b"stsc", 12, 0x7FFFFFFF, "mp4 stsc claims more entries than its box holds"),
        (b"stts", 20, 2, "mp4 PCM timed otherwise than one frame per sample"),
        (b"stts", 12, 0xFFFFFFFF, "mp4 stts claims more entries than its box holds"),
        (b"stts", 16, 0xFFFFFFFF, None),  # FFmpeg reads the chunks, not stts's count
        (b"stsz", 16, 0xFFFFFFFF, None),  # nor stsz's
        (b"stsz", 12, 0, "mp4 PCM with a table of sample sizes"),
    ],
)
def test_lying_pcm_tables_give_a_reason_or_the_true_index(
    box: bytes, offset: int, value: int, reason: str | None
) -> None:
    good = extract(io.BytesIO(_faststart()))
    data = rewritten(_faststart(), [*STBL, box], offset, value)
    index = indexed_within(data)
    if reason is None:
        assert index.ok and full_decode_length(index) == full_decode_length(good)
        assert (index.sample_pos == good.sample_pos).all() and (
            index.byte_pos == good.byte_pos
        ).all()
    else:
        assert not index.ok and index.reason == reason


def test_chunks_that_overlap_are_refused_without_allocating() -> None:
    """A quarter of a million chunks all at one offset, each claiming the whole file:
    packets for terabytes of PCM if they were believed."""
    data = _faststart()
    count = 1 << 18
    stco = _full_box(b"stco", struct.pack(">I", _path(data, [b"mdat"])[0] + 8) * count, count)
    data = _splice(data, [*STBL, b"stco"], stco, True)  # moov grows: the offsets still fit
    index = indexed_within(data, limit=32 << 20)
    assert not index.ok and index.reason == "mp4 PCM chunks that overlap"


def test_an_edit_that_trims_pcm_has_no_index() -> None:
    data = _faststart()
    elst = _path(data, [b"moov", b"trak", b"edts", b"elst"])[-1]
    out = bytearray(data)
    struct.pack_into(">I", out, elst + 20, 100)  # media time 100
    index = indexed_within(bytes(out))
    assert not index.ok and index.reason == "mp4 PCM with an edit that trims it"


def test_pcm_beside_video_in_many_chunks(tmp_path: Path) -> None:
    """The audio track second, after a video track whose frames sit between
    its chunks: the index reads the sound track's tables only, and a crop
    reads its own chunks."""
    data = with_video(3.0, "mov", "pcm_s16le", 4800)
    index = extract(io.BytesIO(data), density=float("inf"))
    assert index.ok, index.reason
    assert_points_are_packets(index, first_packet_per_position(data), offset=0)
    audio = _path(data, [b"moov", b"trak"])[-1]  # the first trak: video
    audio += struct.unpack_from(">I", data, audio)[0]
    stco = data.find(b"stco", audio)
    assert struct.unpack_from(">I", data, stco + 8)[0] > 10  # chunks
    assert_exact_through_the_index(tmp_path, data)


def test_an_empty_edit_before_pcm_only_moves_timestamps(tmp_path: Path) -> None:
    """0.7 s of nothing (an empty edit) before the samples: FFmpeg's decode
    is the same, its timestamps start later."""
    from tests.formats.test_mp4_wild import _empty_edit

    data = _empty_edit(rechunked(pcm("pcm_s16le", 2, frames=3 * 44100), [30000, 30000], 99))
    assert_exact_through_the_index(tmp_path, data)


def test_verify_rebuilds_a_row_an_older_builder_gave_another_codec(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A row stored before a builder fix (version 2 µ-law indexed as
    ``pcm_u8``) disagrees with ``audio_info``: ``index --verify`` blamed
    ``audio_info`` (exit 1) and kept the row, which is never served. The
    builder now describes the audio otherwise: the row is built anew."""
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.mov").write_bytes(pcm("pcm_mulaw", 2, frames=96077, rate=96000))
    pack(tmp_path / "src", tmp_path / "ds", progress=False)
    shard = next((tmp_path / "ds" / "seek_index").iterdir())
    right = open_dataset(tmp_path / "ds").seek_index("a")
    assert right.ok and right.codec == "pcm_mulaw"
    rewrite_index_shard(shard, {"a": dataclasses.replace(right, codec="pcm_u8")})
    assert not open_dataset(tmp_path / "ds").episode("a").index.ok
    assert main(["index", str(tmp_path / "ds"), "--verify", "--no-progress"]) == 0
    assert "is wrong" not in capsys.readouterr().out
    dataset = open_dataset(tmp_path / "ds")
    assert dataset.seek_index("a").codec == "pcm_mulaw" and dataset.episode("a").index.ok


def _fragmented_pcm(
    codec: str, layout: str, frames: int, block: int, flags: dict[str, str]
) -> bytes:
    """``frames`` of noise as FFmpeg's ``mp4`` muxer fragments them
    (``empty_moov``: the samples are all in ``trun`` runs), ``block``
    frames a packet."""
    out = io.BytesIO()
    with av.open(
        out, "w", format="mp4", options={"movflags": "frag_keyframe+empty_moov", **flags}
    ) as muxer:
        stream = muxer.add_stream(codec, rate=48000)
        stream.layout = layout
        kind = stream.codec_context.format.name
        channels = stream.layout.nb_channels
        rng = np.random.default_rng(frames)
        noise = (rng.standard_normal((1, channels * frames)) * 3000).astype(
            np.int16 if kind == "s16" else np.int32
        )
        for start in range(0, frames, block):
            part = noise[:, channels * start : channels * min(start + block, frames)]
            frame = av.AudioFrame.from_ndarray(
                np.ascontiguousarray(part), format=kind, layout=layout
            )
            frame.sample_rate, frame.pts = 48000, start
            for packet in stream.encode(frame):
                muxer.mux(packet)
        for packet in stream.encode(None):
            muxer.mux(packet)
    return out.getvalue()


@pytest.mark.parametrize(
    ("codec", "layout", "block", "flags", "fragments"),
    [
        ("pcm_s16le", "stereo", 9000, {}, 1),  # packets of 9000 frames, 36 kB
        ("pcm_s24le", "mono", 700, {"frag_duration": "300000"}, 11),
    ],
)
def test_fragmented_pcm_is_indexed_and_exact(
    tmp_path: Path, codec: str, layout: str, block: int, flags: dict[str, str], fragments: int
) -> None:
    """Fragmented PCM (``movflags=frag_keyframe+empty_moov``) had no index
    ("fragmented mp4 with PCM"). FFmpeg's demuxer hands each ``trun``
    sample over as one packet (it cuts only ``moov``'s chunks into 1024
    frames), so those samples are the index's packets, placed by their
    decode times."""
    data = _fragmented_pcm(codec, layout, 150001, block, flags)
    assert data.count(b"moof") == fragments
    index = extract(io.BytesIO(data))
    assert (index.codec, index.num_samples) == (codec, 150001), index.reason
    _assert_served_exactly(tmp_path, data, tolerance=0.0)


def test_fragmented_pcm_whose_fragment_starts_late_has_no_index() -> None:
    """A fragment whose ``tfdt`` leaves a gap: FFmpeg's decode plays its
    samples right after the ones before, not where the time says."""
    data = bytearray(
        _fragmented_pcm("pcm_s16le", "stereo", 150001, 700, {"frag_duration": "300000"})
    )
    at = data.find(b"tfdt", data.find(b"tfdt") + 4)  # the second fragment's
    width = 8 if data[at + 4] == 1 else 4
    moved = int.from_bytes(data[at + 8 : at + 8 + width], "big") + 10
    data[at + 8 : at + 8 + width] = moved.to_bytes(width, "big")
    index = extract(io.BytesIO(bytes(data)))
    assert index.reason == "fragmented mp4 with PCM samples whose sizes are not their durations"
