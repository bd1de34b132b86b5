"""The generic packet index (FFmpeg's demuxer) against FFmpeg's full decode.

Files of every container no native format reads are made with PyAV's
encoders and muxers, packed and indexed (the generic index is the only one
that fits them), and ~20 crops each, the first and last samples included,
must equal the full decode: lossless bit for bit, lossy within 1e-4, never
through the fallback, never reading outside the plan. mp3, flac and wav go
through the generic index directly (their second-choice index).
"""

from __future__ import annotations

import io
import math
import random
import shutil
import struct
import subprocess
import time
import wave
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest

from streamer import open_dataset
from streamer.decode.crop import CropRequest, prepare, read_crop
from streamer.decode.verify import verify_index
from streamer.errors import CropError
from streamer.formats.job import DecodeStats, Episode
from streamer.formats.reader import NoIndex, Reader
from streamer.formats.registry import GENERIC, candidates, extract, format_for
from streamer.index import SeekIndex
from streamer.index.table import ENDS_EARLY
from streamer.shard import BlobHandle
from streamer.storage import MemoryReader
from streamer.synth import signal
from streamer.write.pack import pack
from testkit.matroska import LACINGS, laced
from testkit.reference import full_decode, full_decode_to_failure
from testkit.video import with_video

SECONDS = 3.0
TOLERANCE = 1e-4

#: key -> (muxer, encoder, sample format, rate, channels, options, lossless)
FILES = {
    "adts.aac": ("adts", "aac", "fltp", 44100, 2, {"aac_pns": "0"}, False),
    "ac3.ac3": ("ac3", "ac3", "fltp", 48000, 2, {}, False),
    "eac3.eac3": ("eac3", "eac3", "fltp", 44100, 1, {}, False),
    "mp2.mp2": ("mp2", "mp2", "s16", 44100, 2, {}, False),
    "wma.wma": ("asf", "wmav2", "fltp", 44100, 2, {}, False),
    "wavpack.wv": ("wv", "wavpack", "s16p", 44100, 2, {}, True),
    "opus-webm.webm": ("webm", "libopus", "flt", 48000, 2, {}, False),
    "flac-mka.mka": ("matroska", "flac", "s16", 44100, 2, {}, True),
    "aac-mka.mka": ("matroska", "aac", "fltp", 22050, 1, {"aac_pns": "0"}, False),
    "vorbis-mka.mka": ("matroska", "vorbis", "fltp", 44100, 2, {"strict": "experimental"}, False),
    "caf.caf": ("caf", "pcm_s16le", "s16", 16000, 1, {}, True),
    "alac-caf.caf": ("caf", "alac", "s16p", 44100, 2, {}, True),
    "mp2-ts.ts": ("mpegts", "mp2", "s16", 48000, 2, {}, False),
    "aac-ts.ts": ("mpegts", "aac", "fltp", 44100, 2, {"aac_pns": "0"}, False),
    "au.au": ("au", "pcm_s16be", "s16", 8000, 1, {}, True),
    "tta.tta": ("tta", "tta", "s16", 44100, 2, {}, True),
}
#: Half-second Matroska clusters, so that short files have cluster starts
#: to splice at; WebM keeps FFmpeg's 5 s ones, so its crops splice at blocks.
MUXER_OPTIONS = {"matroska": {"cluster_time_limit": "500"}}
#: Through the generic index directly (a native format takes them first).
DIRECT = {
    "lame.mp3": ("mp3", "libmp3lame", "fltp", 44100, 2, {}, False),
    "native.flac": ("flac", "flac", "s16", 44100, 2, {}, True),
    "pcm.wav": ("wav", "pcm_s16le", "s16", 22050, 1, {}, True),
    "aiff.aiff": ("aiff", "pcm_s16be", "s16", 44100, 2, {}, True),
    "vorbis.ogg": ("ogg", "vorbis", "fltp", 44100, 2, {"strict": "experimental"}, False),
    "opus.ogg": ("ogg", "libopus", "flt", 48000, 2, {}, False),
    "flac.oga": ("ogg", "flac", "s16", 44100, 1, {}, True),
}


def make(
    muxer: str,
    encoder: str,
    sample_format: str,
    rate: int,
    channels: int,
    options: dict,
    seconds: float = SECONDS,
) -> bytes:
    """``seconds`` of the test signal through PyAV's ``encoder`` and ``muxer``."""
    samples = signal(seconds, rate, channels, seed=channels)
    layout = {1: "mono", 2: "stereo"}[channels]
    out = io.BytesIO()
    with av.open(out, "w", format=muxer, options=MUXER_OPTIONS.get(muxer, {})) as container:
        stream = container.add_stream(encoder, rate=rate, options=dict(options))
        stream.layout = layout
        stream.codec_context.format = sample_format
        if encoder.startswith("wmav"):
            stream.bit_rate = 128000  # the WMA encoder has no default
        size = stream.codec_context.frame_size or 1024
        for start in range(0, samples.shape[1], size):
            frame = _frame(samples[:, start : start + size], sample_format, layout)
            frame.sample_rate, frame.pts, frame.time_base = rate, start, Fraction(1, rate)
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)
    return out.getvalue()


def _frame(block: np.ndarray, sample_format: str, layout: str) -> av.AudioFrame:
    data = block if sample_format.endswith("p") else block.T.reshape(1, -1)
    if sample_format.startswith("s16"):
        data = (np.clip(data, -1, 1) * 32767).round().astype(np.int16)
    return av.AudioFrame.from_ndarray(
        np.ascontiguousarray(data, dtype=data.dtype if data.dtype == np.int16 else np.float32),
        format=sample_format,
        layout=layout,
    )


def spans(duration: float, seed: str) -> list[tuple[float, float]]:
    """The first and last samples, one span over everything, and random crops."""
    rng = random.Random(seed)
    out = [(0.0, 0.2), (duration - 0.3, duration), (0.0, duration), (0.001, 1.3)]
    for _ in range(18):
        start = rng.uniform(0, duration - 0.05)
        out.append((start, min(start + rng.uniform(0.02, 1.5), duration)))
    return out


def assert_equal(key: str, got: np.ndarray, want: np.ndarray, lossless: bool) -> None:
    assert got.shape == want.shape, f"{key}: shape {got.shape} != {want.shape}"
    if lossless:
        np.testing.assert_array_equal(got, want, err_msg=key)
    else:
        error = float(np.abs(got - want).max()) if got.size else 0.0
        assert error <= TOLERANCE, f"{key}: max abs error {error:.2e}"


@pytest.fixture(scope="module")
def wild(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, bytes]]:
    """Every file in ``FILES``, packed and indexed."""
    src = tmp_path_factory.mktemp("generic-src")
    made = {}
    for name, spec in FILES.items():
        made[name.rsplit(".", 1)[0]] = data = make(*spec[:6])
        (src / name).write_bytes(data)
    out = tmp_path_factory.mktemp("generic") / "dataset"
    pack(src, out, progress=False)
    return out, made


@pytest.mark.parametrize("name", sorted(FILES))
def test_crops_equal_the_full_decode(wild: tuple[Path, dict[str, bytes]], name: str) -> None:
    root, made = wild
    key = name.rsplit(".", 1)[0]
    dataset = open_dataset(root)
    index = dataset.seek_index(key)
    assert index.ok, index.reason
    # Raw MPEG audio is the native mp3 format's; everything else is generic.
    assert (format_for(index) is GENERIC) == (key != "mp2")
    full, rate = full_decode(made[key])
    assert (index.sample_rate, index.num_samples) == (rate, full.shape[1])
    for start, end in spans(full.shape[1] / rate, key):
        crop = dataset.crop(key, start, end)
        want = full[:, round(start * rate) : round(end * rate)]
        assert_equal(f"{key} [{start:.3f}, {end:.3f})", crop.audio, want, FILES[name][6])
    stats = dataset.decode_stats
    assert (stats.fallback, stats.unplanned_reads, stats.bad_packets) == (0, 0, 0)


def generic_index(data: bytes, density: float = 1.0) -> SeekIndex:
    return GENERIC.build_index(Reader(io.BytesIO(data)), density=density)


def episode(data: bytes, index: SeekIndex) -> Episode:
    return Episode("k", "audio/s.wsds", BlobHandle(MemoryReader(data), 0, len(data)), index)


@pytest.mark.parametrize("name", sorted(DIRECT))
def test_native_containers_through_the_generic_index(name: str) -> None:
    spec = DIRECT[name]
    data = make(*spec[:6])
    index = generic_index(data)
    full, rate = full_decode(data)
    assert index.num_samples == full.shape[1]
    stats = DecodeStats()
    for start, end in spans(full.shape[1] / rate, name):
        crop = read_crop(episode(data, index), CropRequest("k", start, end), stats)
        want = full[:, round(start * rate) : round(end * rate)]
        assert_equal(name, crop.audio, want, spec[6])
    assert (stats.fallback, stats.unplanned_reads, stats.bad_packets) == (0, 0, 0)


@pytest.mark.parametrize("name", ["opus-webm.webm", "flac-mka.mka", "vorbis.ogg"])
def test_spliced_containers_have_points_at_element_starts(name: str) -> None:
    """Ogg: page starts. Matroska: cluster starts, and SimpleBlocks between
    them (FFmpeg's muxer cuts a cluster every 5 s), SimpleBlocks or
    BlockGroups (FFmpeg 9's Vorbis): one a second."""
    data = make(*{**FILES, **DIRECT}[name][:6], seconds=12.0)
    index = generic_index(data)
    heads = [data[p : p + 4] for p in index.byte_pos.tolist()]
    assert 11 <= len(heads) <= 13
    if name.endswith(".ogg"):
        assert all(head == b"OggS" for head in heads)
    else:
        clusters = sum(head == b"\x1f\x43\xb6\x75" for head in heads)
        blocks = sum(head[0] in (0xA3, 0xA0) for head in heads)  # SimpleBlock, BlockGroup
        assert clusters + blocks == len(heads), heads
        assert heads[0] == b"\x1f\x43\xb6\x75"
        assert blocks >= 8 if name.endswith(".webm") else clusters >= 2
    assert index.header == ((0, int(index.byte_pos[0])),)


@pytest.mark.parametrize("name", ["opus-webm.webm", "vorbis-mka.mka"])
def test_matroska_blocks_a_packet_apart_are_spliced_exactly(name: str) -> None:
    """At ``density=inf`` every SimpleBlock is a point: the seek-loss probes
    span a second, not two packets (a cold decoder gives nothing for its
    first), and every crop starts one packet from its block, spliced."""
    spec = FILES[name]
    data = make(*spec[:6], seconds=6.0)
    index = generic_index(data, density=math.inf)
    full, rate = full_decode(data)
    assert index.num_samples == full.shape[1]
    assert len(index.byte_pos) > 6 * rate / 2048  # a point per packet, near enough
    stats = DecodeStats()
    for start, end in spans(full.shape[1] / rate, name):
        crop = read_crop(episode(data, index), CropRequest("k", start, end), stats)
        assert_equal(name, crop.audio, full[:, round(start * rate) : round(end * rate)], spec[6])
    assert (stats.fallback, stats.unplanned_reads, stats.bad_packets) == (0, 0, 0)


@pytest.mark.parametrize("kind", sorted(LACINGS))
def test_laced_matroska_blocks_are_points(kind: str) -> None:
    """mkvmerge laces audio frames into blocks; FFmpeg reports each frame
    at its block's position. A laced block is a point when its lace count
    and sizes add up to those frames (fixed lacing: only frames of one
    size are laced, few here), and crops spliced at one are exact."""
    spec = FILES["opus-webm.webm"]
    data = laced(make(*spec[:6], seconds=6.0), per=4, kind=kind)
    index = generic_index(data)
    full, rate = full_decode(data)
    assert index.num_samples == full.shape[1]
    blocks = [p for p in index.byte_pos.tolist() if data[p] == 0xA3]
    # The flags: after the ID, the size, a one-byte track number and the timestamp.
    flags = [data[p + 1 + (9 - data[p + 1].bit_length()) + 3] for p in blocks]
    laced_points = sum(bool(f & 0x06 == LACINGS[kind]) for f in flags)
    assert laced_points >= (4 if kind != "fixed" else 0), (len(index.byte_pos), flags)
    stats = DecodeStats()
    for start, end in spans(full.shape[1] / rate, kind):
        crop = read_crop(episode(data, index), CropRequest("k", start, end), stats)
        assert_equal(kind, crop.audio, full[:, round(start * rate) : round(end * rate)], spec[6])
    assert (stats.fallback, stats.unplanned_reads, stats.bad_packets) == (0, 0, 0)


def test_tta_seek_points_are_its_frames() -> None:
    """TTA's demuxer cuts packets by its seek table's frame counter: it is
    repositioned by timestamp, and every frame (256/245 s) is a point."""
    data = make(*FILES["tta.tta"][:6], seconds=4.0)
    index = generic_index(data)
    assert index.sample_pos.tolist() == [0, 46080, 92160, 138240]
    assert index.preroll == index.padding == 0


def _without_keyframe_flags(data: bytes) -> bytes:
    """``data`` (FFmpeg's Matroska, track 1, SimpleBlocks) with every
    block's keyframe flag cleared, as GStreamer's matroskamux writes audio."""
    out = bytearray(data)
    # SimpleBlock ID, then its size, track, timecode, flags; from the first cluster
    at = out.find(b"\xa3", out.find(b"\x1f\x43\xb6\x75"))
    while at >= 0:
        size_length = 8 - out[at + 1].bit_length() + 1
        size = int.from_bytes(out[at + 1 : at + 1 + size_length], "big")
        size &= (1 << (7 * size_length)) - 1
        head = at + 1 + size_length
        if out[head] == 0x81 and size > 4:  # track 1: a block, not payload bytes
            out[head + 3] &= 0x7F
            at = out.find(b"\xa3", head + size)
        else:
            at = out.find(b"\xa3", at + 1)
    return bytes(out)


def test_matroska_blocks_without_keyframe_flags_keep_their_points() -> None:
    """GStreamer's matroskamux leaves the keyframe flag of AAC blocks unset:
    no packet was a keyframe, so no cluster was a point ("the first packet
    does not start a cluster") and every crop went through the fallback. A
    stream whose first packet is not flagged does not use the flag."""
    data = _without_keyframe_flags(make(*FILES["aac-mka.mka"][:6], seconds=4.0))
    with av.open(io.BytesIO(data)) as container:
        flags = [p.is_keyframe for p in container.demux(audio=0) if p.size]
    assert not any(flags[:-1])  # FFmpeg's muxer writes the last as a BlockGroup
    index = generic_index(data)
    assert index.ok and len(index.byte_pos) >= 3, index.reason
    _assert_crops_exact(data, index, False)


@pytest.mark.parametrize("name", ["alac-caf.caf", "caf.caf"])
def test_caf_seeks_by_its_packet_table(name: str) -> None:
    """CAF's demuxer cuts ALAC packets by its packet table (``pakt``, counted
    from the data's start): after a byte seek it cut them at the wrong
    sizes, the index failed ("decoding after a seek fails") and every crop
    went through the fallback. Repositioned by timestamp, its points are
    the table's packets; PCM (no table) keeps its packets as points."""
    data = make(*FILES[name][:6], seconds=4.0)
    index = generic_index(data)
    assert index.ok and index.container == "ffmpeg:caf", index.reason
    assert len(index.byte_pos) >= 3 and index.byte_pos[0] > 0
    _assert_crops_exact(data, index, True)


#: Monkey's Audio's encoder: jmac, Java (Debian libjmac-java).
JMAC = Path("/usr/share/java/jmac.jar")


def _encoded(path: Path, seconds: float, command: list[str], out: str) -> bytes:
    """``seconds`` of the test signal (stereo, 44.1 kHz) written as ``in.wav``
    in ``path`` and encoded by ``command`` (+ the wav and ``out``)."""
    samples = (np.clip(signal(seconds, 44100, 2, seed=2), -1, 1) * 32767).round()
    with wave.open(str(path / "in.wav"), "wb") as wav:
        wav.setnchannels(2)
        wav.setsampwidth(2)
        wav.setframerate(44100)
        wav.writeframes(samples.astype("<i2").T.tobytes())
    subprocess.run(
        [*command, str(path / "in.wav"), str(path / out)], check=True, capture_output=True
    )
    return (path / out).read_bytes()


def _assert_crops_exact(
    data: bytes, index: SeekIndex, lossless: bool, reference: Callable = full_decode
) -> None:
    full, rate = reference(data)
    stats = DecodeStats()
    for start, end in spans(full.shape[1] / rate, index.container):
        crop = read_crop(episode(data, index), CropRequest("k", start, end), stats)
        want = full[:, round(start * rate) : round(end * rate)]
        assert_equal(index.container, crop.audio, want, lossless)
    assert (stats.fallback, stats.unplanned_reads, stats.bad_packets) == (0, 0, 0)


@pytest.mark.skipif(shutil.which("mpcenc") is None, reason="mpcenc (musepack-tools) missing")
@pytest.mark.parametrize("table", [True, False])
def test_musepack_sv8_seeks_by_its_table(tmp_path: Path, table: bool) -> None:
    """mpc8 refuses a byte seek: its points are its seek table's entries (every
    other packet, at the packet's header), reached by timestamp; without a
    table (``--no_st``), the first packet only. Exact crops either way."""
    command = ["mpcenc", "--silent", "--overwrite", *([] if table else ["--no_st"])]
    data = _encoded(tmp_path, 10.0, command, "out.mpc")
    index = generic_index(data)
    assert index.container == "ffmpeg:mpc8"
    assert len(index.byte_pos) >= 3 if table else len(index.byte_pos) == 1
    _assert_crops_exact(data, index, False)


@pytest.mark.skipif(
    shutil.which("java") is None or not JMAC.exists(), reason="jmac (libjmac-java) missing"
)
@pytest.mark.parametrize("level", ["c1", "c3"])
def test_monkeys_audio_seeks_by_its_table(tmp_path: Path, level: str) -> None:
    """APE packets have no byte position: points are the frame table's
    entries, reached by timestamp; each frame reads one word past the next
    entry (``OVERREAD``), which the plan holds. Bit-exact crops."""
    data = _encoded(tmp_path, 8.0, ["java", "-jar", str(JMAC), level], "out.ape")
    index = generic_index(data)
    assert index.container == "ffmpeg:ape" and len(index.byte_pos) >= 3
    _assert_crops_exact(data, index, True)


def _dsf(blocks: int, seed: int) -> bytes:
    """A stereo DSD64 DSF file of ``blocks`` 4096-byte blocks per channel of
    random bits (no encoder makes DSD: the layout is simple enough to write)."""
    data = np.random.default_rng(seed).integers(0, 256, blocks * 2 * 4096, np.uint8).tobytes()
    fmt = struct.pack("<IIIIIIQII", 1, 0, 2, 2, 2822400, 1, blocks * 4096 * 8, 4096, 0)
    chunks = b"fmt " + struct.pack("<Q", 12 + len(fmt)) + fmt
    chunks += b"data" + struct.pack("<Q", 12 + len(data)) + data
    return b"DSD " + struct.pack("<QQQ", 28, 28 + len(chunks), 0) + chunks


def test_dsd_crops_decode_from_the_first_packet() -> None:
    """DSF refuses a byte seek and its timestamp seek reads from the start:
    one point, the first packet; crops exact and inside the plan. Opening
    reads the first packet (bytes 92-8284): the point is where reading goes on."""
    data = _dsf(100, seed=3)
    index = generic_index(data)
    assert (index.container, index.byte_pos.tolist()) == ("ffmpeg:dsf", [8284])
    assert index.header == ((0, 8284),)
    full, rate = full_decode(data)
    stats = DecodeStats()
    for start, end in spans(full.shape[1] / rate, "dsf")[:8]:
        crop = read_crop(episode(data, index), CropRequest("k", start, end), stats)
        assert_equal("dsf", crop.audio, full[:, round(start * rate) : round(end * rate)], False)
    assert (stats.fallback, stats.unplanned_reads, stats.bad_packets) == (0, 0, 0)


def test_what_asf_loses_after_a_byte_seek_is_pre_roll() -> None:
    """ASF's demuxer drops the rest of the container packet it thinks it is
    in: the index measures it and adds it to the codec's pre-roll."""
    index = generic_index(make(*FILES["wma.wma"][:6], seconds=6.0))
    assert index.preroll > GENERIC.preroll(index) > 0


def test_lame_padding_is_trimmed_after_a_byte_seek() -> None:
    """The mp3 demuxer trims LAME's padding by timestamp, which a byte seek
    loses: the index measures what comes out untrimmed (``padding``)."""
    index = generic_index(make(*DIRECT["lame.mp3"][:6]))
    assert index.padding > 0


def test_mp2_in_mpegts_with_video_keeps_its_index(tmp_path: Path) -> None:
    """``audio_info`` (FFmpeg's default probe) says ``mp2`` where the generic
    index says ``mp3``: one codec family, so the index serves the crops
    (it was refused as "index disagrees with audio_info: codec", and every
    crop decoded the file from its start)."""
    # MPEG-TS with a video track and MP2 audio (a broadcast recording): with
    # the video, FFmpeg's default probe reads MP2 frames and names the audio
    # ``mp2``; the generic index's short probe names it ``mp3``.
    data = with_video(3.0, "mpegts", "mp2", 1152)
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "tv.ts").write_bytes(data)
    pack(tmp_path / "src", tmp_path / "dataset", progress=False)
    dataset = open_dataset(tmp_path / "dataset")
    assert (dataset.info("tv")["codec"], dataset.seek_index("tv").codec) == ("mp2", "mp3")
    full, rate = full_decode(data)
    for start, end in spans(full.shape[1] / rate, "tv")[:8]:
        crop = dataset.crop("tv", start, end)
        assert_equal("tv", crop.audio, full[:, round(start * rate) : round(end * rate)], False)
    assert dataset.decode_stats.paths == {"generic index": 8}


def test_matroska_whose_first_cluster_opens_with_video_is_spliced_at_a_block() -> None:
    """A Matroska file whose first cluster opens with a video block (a music
    video, a screen recording: the muxer writes the video's packet at 0
    first) had no cluster where the audio's first packet starts one, so it
    got no seek index ("the first packet does not start a cluster or page")
    and every crop decoded from the file's start. The first audio block is
    the first point now, spliced as a block between clusters is."""
    data = with_video(3.0, "matroska", "flac", 4608)
    with av.open(io.BytesIO(data)) as container:
        first = next(p for p in container.demux() if p.size)
        assert first.stream.type == "video"
    index = generic_index(data)
    assert index.ok and index.container == "ffmpeg:matroska", index.reason
    _assert_crops_exact(data, index, True)


def test_crops_at_the_very_end_of_an_ogg_splice_are_in_place() -> None:
    """A crop whose pre-roll starts after the last seek point decodes from
    the one before, where ``padding`` was measured: from the last, FFmpeg's
    Ogg demuxer sees a one-page stream and does not trim its end (PyAV's
    Vorbis at 8 kHz: 512 samples more, and the crop came out shifted)."""
    data = make("ogg", "vorbis", "fltp", 8000, 2, {"strict": "experimental"}, seconds=8.0)
    index = generic_index(data)
    full, rate = full_decode(data)
    length = full.shape[1]
    stats = DecodeStats()
    for first in (length - 800, length - 100, length - 1):
        request = CropRequest("k", first / rate, length / rate)
        crop = read_crop(episode(data, index), request, stats)
        assert_equal(f"from {first}", crop.audio, full[:, first:], False)


def test_mp4_has_no_generic_index() -> None:
    """FFmpeg's mov demuxer cannot seek by byte (the native index serves MP4)."""
    data = make("mp4", "aac", "fltp", 48000, 2, {})
    with pytest.raises(NoIndex, match="mov cannot seek by byte"):
        generic_index(data)
    assert extract(io.BytesIO(data)).ok


def test_ogg_flac_has_a_native_index_then_a_generic_candidate() -> None:
    data = make(*DIRECT["flac.oga"][:6])
    native, generic = candidates(io.BytesIO(data))
    assert native.ok and (native.container, native.codec) == ("ogg", "flac")
    assert generic.ok and (generic.container, generic.codec) == ("ffmpeg:ogg", "flac")


@pytest.mark.parametrize("name", ["ac3.ac3", "eac3.eac3"])
def test_ac3_crops_late_in_an_episode_decode_from_near_them(name: str) -> None:
    """AC-3's and E-AC-3's dither for zero-bit mantissas (up to 0.06 in this
    signal) came from a generator seeded once, at the stream's start, so
    their crops decoded from the first packet, at a cost growing with the
    crop's position. Seeded per frame (``cons_noisegen``, the reference's
    too), a decode from 0.1 s before the crop gives the full decode's
    samples bit for bit: a crop late in the episode decodes from a seek
    point shortly before it. The index passes its check, whose reference
    for an episode this long (over ``FULL_DECODE_SECONDS``) is decoded
    after a seek near the end from an open of its own: the head's decoder,
    sought, dithered as from the start again and failed it, 0.04-0.15 off."""
    data = make(*FILES[name][:6], seconds=25.0)
    index = verify_index(episode(data, generic_index(data)))
    assert index.verdict == "verified", index.reason
    full, rate = full_decode(data)
    n = full.shape[1]
    stats = DecodeStats()
    for first, last in ((n - 2 * rate, n - rate), (n - 5000, n), (n // 2 + 777, n // 2 + 9000)):
        request = CropRequest("k", first / rate, last / rate)
        plan = prepare(episode(data, index), request).plan
        # Its seek points are a second apart; the end decodes from the last but one.
        assert plan is not None and plan.start_native >= first - 2.2 * rate
        crop = read_crop(episode(data, index), request, stats)
        assert_equal(f"{name} [{first}, {last})", crop.audio, full[:, first:last], True)
    assert stats.paths == {"generic index": 3}


def test_candidates_native_first_then_generic_lazily() -> None:
    data = make(*DIRECT["lame.mp3"][:6])
    found = candidates(io.BytesIO(data))
    assert next(found).container == "mp3"
    assert next(found).container == "ffmpeg:mp3"
    assert list(found) == []
    only = list(candidates(io.BytesIO(make(*FILES["wma.wma"][:6]))))
    assert [i.container for i in only] == ["ffmpeg:asf"]
    assert extract(io.BytesIO(make(*FILES["wma.wma"][:6]))).container == "ffmpeg:asf"


def test_garbage_is_unknown_and_truncation_is_no_index_or_a_clear_error() -> None:
    rng = np.random.default_rng(7)
    assert extract(io.BytesIO(rng.integers(0, 256, 20000, np.uint8).tobytes())).reason == (
        "unknown container"
    )
    outcomes = []
    for name in ("adts.aac", "wma.wma", "ac3.ac3", "opus-webm.webm", "vorbis.ogg", "tta.tta"):
        data = make(*{**FILES, **DIRECT}[name][:6], seconds=6.0)
        for damaged in (data[: len(data) * 2 // 3], _garbled(data, rng)):
            try:
                index = generic_index(damaged)
            except NoIndex as exc:
                outcomes.append(str(exc))
                continue
            outcomes.append(_exact_or_error(damaged, index))
    assert all(outcomes), outcomes


#: Files cut short inside a packet (a download or a recording stopped
#: midway), by where: FFmpeg's decoder rejects the cut packet (ADTS AAC,
#: TTA, FLAC) or its demuxer fails to read it (WavPack: its last block,
#: after every sample).
CUT_SHORT = [("adts.aac", 2 / 3), ("tta.tta", 2 / 3), ("native.flac", 2 / 3), ("wavpack.wv", -7)]


@pytest.mark.parametrize(("name", "where"), CUT_SHORT)
def test_a_file_cut_short_is_indexed_up_to_where_its_decode_ends(name: str, where: float) -> None:
    spec = {**FILES, **DIRECT}[name]
    whole = make(*spec[:6], seconds=6.0)
    data = whole[: int(len(whole) * where) if where > 0 else int(where)]
    full, rate = full_decode_to_failure(data)
    with pytest.raises(av.FFmpegError):
        full_decode(data)  # the decode does end early
    index = verify_index(episode(data, generic_index(data)))
    assert (index.ok, index.verdict) == (True, "verified")
    assert index.reason.startswith(f"{ENDS_EARLY}: "), index.reason  # a note, for reports
    assert index.num_samples == full.shape[1]
    assert index.data_end < len(data)
    _assert_crops_exact(data, index, spec[6], full_decode_to_failure)
    with pytest.raises(CropError, match="past the end"):
        read_crop(episode(data, index), CropRequest("k", full.shape[1] / rate + 0.1, 7.0))


def test_a_cut_packet_sharing_its_byte_with_good_ones_is_no_index() -> None:
    """ASF puts several WMA packets at one byte position: cut there, the
    file would lose good packets too, so the decode's end is no seek point."""
    whole = make(*FILES["wma.wma"][:6], seconds=6.0)
    data = whole[: len(whole) * 2 // 3]
    with pytest.raises(NoIndex, match="decoder rejects the packet at byte"):
        generic_index(data)


def _garbled(data: bytes, rng: np.random.Generator) -> bytes:
    out = bytearray(data)
    at = len(out) // 2
    out[at : at + 2000] = rng.integers(0, 256, 2000, np.uint8).tobytes()
    return bytes(out)


def _exact_or_error(data: bytes, index: SeekIndex) -> str:
    """Every crop of a damaged file equals its full decode or is a CropError
    naming the episode; how many were which."""
    full, rate = full_decode_to_failure(data)
    exact = errors = 0
    for start, end in spans(full.shape[1] / rate, "damaged"):
        try:
            crop = read_crop(episode(data, index), CropRequest("k", start, end))
        except CropError as exc:
            assert exc.key == "k"
            errors += 1
            continue
        want = full[:, round(start * rate) : round(end * rate)]
        assert_equal(f"damaged {index.container}", crop.audio, want, False)
        exact += 1
    return f"{index.container}: {exact} exact, {errors} errors"


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted({**FILES, **DIRECT}))
def test_minute_long_files(name: str) -> None:
    """60 s of each file, 20 one-second crops: exact, inside the plan; prints
    the figures docs/seek-index.md quotes (bytes and time per crop)."""
    spec = {**FILES, **DIRECT}[name]
    data = make(*spec[:6], seconds=60.0)
    began = time.perf_counter()
    index = generic_index(data)
    indexing = time.perf_counter() - began
    full, rate = full_decode(data)
    stats = DecodeStats()
    rng = random.Random(name)
    began = time.perf_counter()
    for _ in range(20):
        start = rng.uniform(0, 59.0)
        crop = read_crop(episode(data, index), CropRequest("k", start, start + 1.0), stats)
        want = full[:, round(start * rate) : round((start + 1.0) * rate)]
        assert_equal(name, crop.audio, want, spec[6])
    per_crop = (time.perf_counter() - began) / 20
    assert (stats.fallback, stats.unplanned_reads, stats.bad_packets) == (0, 0, 0)
    print(
        f"{name}: {index.container}, header {sum(n for _, n in index.header) / 1e3:.1f} kB, "
        f"{stats.planned_bytes / 20 / 1e3:.1f} kB and {per_crop * 1e3:.1f} ms per crop, "
        f"indexed in {indexing * 1e3:.0f} ms"
    )


def test_a_stream_that_cannot_seek_gets_no_generic_index() -> None:
    """FFmpeg is handed the stream twice (to learn the demuxer, then to
    index): a forward-only stream is "no index", said so."""

    class ForwardOnly(io.RawIOBase):
        def __init__(self, data: bytes) -> None:
            self._data = io.BytesIO(data)

        def readable(self) -> bool:
            return True

        def readinto(self, buffer) -> int:  # type: ignore[no-untyped-def]
            chunk = self._data.read(len(buffer))
            buffer[: len(chunk)] = chunk
            return len(chunk)

    index = extract(ForwardOnly(make(*FILES["wma.wma"][:6])))
    assert index.reason == "generic index needs a seekable stream"
