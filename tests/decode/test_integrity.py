"""Damaged bytes under a crop: FLAC frame CRCs and Ogg page CRCs are checked.

The bytes a crop decodes are its planned ranges; here they are fetched from
a real packed dataset and one bit is flipped in memory, as storage or a
network would. A frame or page that fails its CRC is a counted bad packet
and decodes as silence of its length; everything around it stays in place.
(Before the checks, 38 of 40 such FLAC crops differed from the clean decode
with zero bad packets counted.)
"""

from __future__ import annotations

import dataclasses
import logging
import random
import re
from pathlib import Path

import numpy as np
import pytest
from _index_support import flac_frame_renumbered
from helpers import pack_audio

from streamer import open_dataset
from streamer.dataset import Dataset
from streamer.decode.crop import CropJob, CropRequest, decode_job, fetch, prepare
from streamer.decode.resample import downmix
from streamer.errors import CropError
from streamer.formats.flac.parse import frame_header
from streamer.formats.job import DecodeStats, Fetched
from streamer.formats.ogg.pages import checked_pages
from streamer.index.content import STALE
from streamer.synth import encode, signal
from streamer.write.pack import pack

SECONDS = 12.0
#: key -> (codec, sample rate, channels)
FILES = {"flac": ("flac", 44100, 2), "vorbis": ("vorbis", 44100, 2), "opus": ("opus", 48000, 1)}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    return pack_audio(tmp_path_factory.mktemp("integrity"), FILES, SECONDS)


def _planned(dataset: Dataset, key: str, start: float, end: float) -> tuple[CropJob, Fetched]:
    job = prepare(dataset.episode(key), CropRequest(key, start, end))
    return job, fetch(job)


def _flipped(fetched: Fetched, offset: int, bit: int = 0x10) -> Fetched:
    """The same bytes with one bit of the data range flipped at ``offset``."""
    data = bytearray(fetched.data)
    data[offset] ^= bit
    return Fetched((*fetched.pieces[:-1], (fetched.pieces[-1][0], memoryview(bytes(data)))))


def _decode(job: CropJob, fetched: Fetched) -> tuple[np.ndarray, DecodeStats]:
    stats = DecodeStats()
    return decode_job(job, fetched, stats).audio, stats


@pytest.mark.parametrize("key", sorted(FILES))
def test_no_flipped_bit_goes_unnoticed(dataset: Dataset, key: str) -> None:
    """40 crops, one bit flipped somewhere in each one's audio bytes: every
    crop comes out identical to the clean one, or its damage is counted."""
    rng = random.Random(key)
    outcomes = {"identical": 0, "counted": 0, "error": 0}
    for _ in range(40):
        start = rng.uniform(0.5, SECONDS - 2)
        job, fetched = _planned(dataset, key, start, start + 1.0)
        clean, _ = _decode(job, fetched)
        damaged = _flipped(fetched, rng.randrange(len(fetched.data)), 1 << rng.randrange(8))
        try:
            got, stats = _decode(job, damaged)
        except CropError as error:
            assert error.key == key
            outcomes["error"] += 1
            continue
        assert got.shape == clean.shape
        if np.array_equal(got, clean):
            outcomes["identical"] += 1
        else:
            assert stats.bad_packets > 0, f"a damaged crop at {start:.2f} s went unnoticed"
            outcomes["counted"] += 1
    assert outcomes["counted"] >= 20, outcomes
    assert outcomes["error"] <= 2, outcomes  # damage is silence, not a lost crop


def _flac_frames(fetched: Fetched) -> list[tuple[int, int, int]]:
    """(offset in the data range, first sample, block) of each frame: the
    headers that number on from the first (a sync code and CRC-8 can occur
    by chance inside a frame)."""
    data = bytes(fetched.data)
    frames, numbers, nominal = [], [], 0
    for match in re.finditer(rb"\xff\xf8", data):
        header = frame_header(data, match.start())
        if header is not None and (not numbers or header.number == numbers[-1] + 1):
            nominal = nominal or header.block  # (the last frame may be shorter)
            frames.append((match.start(), header.number * nominal, header.block))
            numbers.append(header.number)
    assert frames[0][0] == 0
    return frames


@pytest.mark.parametrize("where", ["body", "header", "first header"])
def test_a_damaged_flac_frame_is_silence_of_its_length(
    dataset: Dataset, where: str, caplog: pytest.LogCaptureFixture
) -> None:
    seek_point = _planned(dataset, "flac", 4.0, 7.0)[0].plan.start_native
    start = seek_point / 44100  # the crop starts on the first frame of its bytes
    job, fetched = _planned(dataset, "flac", start, start + 3.0)
    frames = _flac_frames(fetched)
    number = 0 if where == "first header" else len(frames) // 2
    offset, position, block = frames[number]
    flip = offset + (4 if "header" in where else (frames[number + 1][0] - offset) // 2)
    # The decoder's own check: the first frame's bytes are also checked
    # against the index's content CRCs (``test_damage_in_checked_bytes_...``).
    job = dataclasses.replace(job, checks=())
    clean, _ = _decode(job, fetched)
    with caplog.at_level(logging.DEBUG, logger="streamer.formats.job"):
        got, stats = _decode(job, _flipped(fetched, flip, 0x01))
    assert stats.bad_packets == 1
    lo, hi = position - seek_point, position + block - seek_point
    assert not got[:, lo:hi].any(), "the damaged frame must be silence"
    np.testing.assert_array_equal(got[:, :lo], clean[:, :lo])
    np.testing.assert_array_equal(got[:, hi:], clean[:, hi:])
    # A damaged header joins its bytes to the frame before: that packet is
    # the bad one (its own frame still decodes, checked by its CRC-16).
    reported = frames[number - 1][0] if where == "header" else offset
    assert f"key='flac', offset={job.plan.data[0] + reported}" in caplog.text


def _ogg_pages(fetched: Fetched) -> list[tuple[int, int, int]]:
    """(offset in the data range, end, granule) of each page."""
    return [(page.offset, page.end, page.granule) for page in checked_pages(fetched.data)]


@pytest.mark.parametrize("key", ["vorbis", "opus"])
def test_a_damaged_ogg_page_is_dropped_and_later_samples_stay_in_place(
    dataset: Dataset, key: str
) -> None:
    job, fetched = _planned(dataset, key, 3.0, 8.0)
    index = dataset.seek_index(key)
    pages = _ogg_pages(fetched)
    number = len(pages) // 2
    offset, end, granule = pages[number]
    clean, _ = _decode(job, fetched)
    got, stats = _decode(job, _flipped(fetched, (offset + end) // 2))
    assert stats.bad_packets == 1 and got.shape == clean.shape
    rate, first = index.sample_rate, round(3.0 * index.sample_rate)

    def at(native: int) -> int:
        return round((native - index.first_sample) * rate / index.timescale) - first

    lo, hi = at(pages[number - 1][2]), at(granule)  # the page holds samples [lo, hi)
    # Packets that straddle the page's edges go with it.
    assert not got[:, lo + 2048 : hi - 2048].any()
    np.testing.assert_array_equal(got[:, : lo - 2048], clean[:, : lo - 2048])
    # After the page the decoder starts cold: exact for Vorbis once primed,
    # within Opus's tolerance once it has converged.
    settle = hi + (rate // 2 if key == "opus" else 4096)
    assert float(np.abs(got[:, settle:] - clean[:, settle:]).max()) <= 1e-4


@pytest.mark.parametrize("key", ["vorbis", "flac"])
def test_a_damaged_mono_crop_is_the_downmix_of_the_damaged_crop(dataset: Dataset, key: str) -> None:
    """A mono crop's one channel gets the silence for lost bytes, and the
    cold start after them, where the full-width crop gets them."""
    wide_job, fetched = _planned(dataset, key, 3.0, 8.0)
    mono_job = dataclasses.replace(
        wide_job, request=dataclasses.replace(wide_job.request, mono=True)
    )
    damaged = _flipped(fetched, len(fetched.data) // 2)
    wide, wide_stats = _decode(wide_job, damaged)
    mono, mono_stats = _decode(mono_job, damaged)
    assert wide_stats.bad_packets == mono_stats.bad_packets == 1
    np.testing.assert_array_equal(mono, downmix(wide))


@pytest.mark.parametrize("key", ["vorbis", "opus"])
@pytest.mark.parametrize("crop", [(3.0, 5.0), (10.5, SECONDS)])
def test_damage_in_the_last_ogg_page_is_silence_to_the_end(
    dataset: Dataset, key: str, crop: tuple[float, float]
) -> None:
    """Also when the page is the episode's last: an Opus crop to the end
    drains its decoder, which once read the packets of a run that had none."""
    job, fetched = _planned(dataset, key, *crop)
    offset, end, _ = _ogg_pages(fetched)[-1]
    clean, _ = _decode(job, fetched)
    got, stats = _decode(job, _flipped(fetched, (offset + end) // 2))
    assert stats.bad_packets == 1 and got.shape == clean.shape
    assert not got[:, -100:].any()


def test_a_damaged_ogg_header_page_is_a_crop_error(dataset: Dataset) -> None:
    job, fetched = _planned(dataset, "opus", 3.0, 5.0)
    job = dataclasses.replace(job, checks=())  # an index without content CRCs
    header = bytearray(fetched.pieces[0][1])
    header[40] ^= 0x01
    damaged = Fetched(((fetched.pieces[0][0], memoryview(bytes(header))), *fetched.pieces[1:]))
    with pytest.raises(CropError, match="header page fails its CRC") as caught:
        _decode(job, damaged)
    assert caught.value.key == "opus"


@pytest.mark.parametrize("key", sorted(FILES))
def test_damage_in_checked_bytes_sends_the_crop_through_the_exact_path(
    dataset: Dataset, key: str
) -> None:
    """A flipped bit in the header ranges or at the seek point, whose CRCs
    the index recorded: the crop is decoded from the blob without the index
    (exact), counted as stale, instead of as damage."""
    job, fetched = _planned(dataset, key, 3.0, 5.0)
    clean, _ = _decode(job, fetched)
    assert job.checks
    header = bytearray(fetched.pieces[0][1])
    header[len(header) // 2] ^= 0x01
    for damaged in (
        _flipped(fetched, 5),
        Fetched(((fetched.pieces[0][0], memoryview(bytes(header))), *fetched.pieces[1:])),
    ):
        got, stats = _decode(job, damaged)
        # the index's crop is the full decode's up to float rounding (lossy)
        np.testing.assert_allclose(got, clean, rtol=0, atol=0 if key == "flac" else 1e-4)
        assert stats.fallback_reasons == {STALE: 1} and stats.crops == 1


@pytest.mark.parametrize(
    ("key", "said"),
    [("flac", "no FLAC frame holds samples"), ("opus", "no Ogg page to place")],
)
def test_data_without_a_frame_is_a_crop_error_naming_where(
    dataset: Dataset, key: str, said: str
) -> None:
    """Every byte of the planned data range zeroed (no frame or page left):
    a ``CropError`` naming the episode and the blob offset its planned data
    starts at (FLAC raised an ``IndexError``, "cannot decode flac: list index
    out of range"; neither named an offset). An index without content CRCs:
    with them, the zeroed seek point sends the crop through the exact path."""
    job, fetched = _planned(dataset, key, 3.0, 5.0)
    job = dataclasses.replace(job, checks=())
    zeroed = memoryview(bytes(len(fetched.data)))
    damaged = Fetched((*fetched.pieces[:-1], (fetched.pieces[-1][0], zeroed)))
    with pytest.raises(CropError, match=said) as caught:
        _decode(job, damaged)
    assert caught.value.key == key and caught.value.shard
    assert caught.value.offset == fetched.pieces[-1][0] > 0
    assert f"offset={fetched.pieces[-1][0]}" in str(caught.value)


def test_a_flac_crop_from_a_damaged_shard_counts_its_bad_packet(
    dataset: Dataset, tmp_path: Path
) -> None:
    """The same through the dataset: a flipped byte in the shard file."""
    import shutil

    root = Path(dataset.root)
    shutil.copytree(root, tmp_path / "copy")
    blob = dataset.blob("flac")
    job, fetched = _planned(dataset, "flac", 6.0, 7.0)
    # The frame that holds the crop's middle sample.
    offset = [off for off, pos, _ in _flac_frames(fetched) if pos <= 6.5 * 44100][-1]
    shard = tmp_path / "copy" / Path(blob.shard).relative_to(root)
    with open(shard, "r+b") as file:
        file.seek(blob.offset + job.plan.data[0] + offset + 100)
        byte = file.read(1)
        file.seek(-1, 1)
        file.write(bytes([byte[0] ^ 0x08]))
    copy = open_dataset(tmp_path / "copy")
    got = copy.read_crop("flac", 6.0, 7.0)
    assert copy.decode_stats.bad_packets == 1
    assert got.shape == dataset.read_crop("flac", 6.0, 7.0).shape


def _variable_block_size(flac: bytes) -> bytes:
    """The same stream with every frame header rewritten to the variable
    block size strategy (a frame states its first sample, not its number),
    CRCs recomputed: what no encoder at hand writes."""
    import io

    from streamer.formats.flac.parse import parse

    start = parse(io.BytesIO(flac)).data_start
    frames = _flac_frames(Fetched(((0, memoryview(flac[start:])),)))
    out = [flac[:start]]
    ends = [offset for offset, _, _ in frames[1:]] + [len(flac) - start]
    for (offset, position, _), end in zip(frames, ends, strict=True):
        out.append(
            flac_frame_renumbered(flac[start + offset : start + end], position, variable=True)
        )
    return b"".join(out)


def test_variable_block_size_flac_is_exact_and_its_damage_counted(tmp_path: Path) -> None:
    import io

    import av

    from streamer.formats.frames import frame_to_float32

    data = _variable_block_size(encode(signal(6.0, 44100, 2, seed=9), 44100, "flac"))
    assert data[data.index(b"\xff\xf9")] == 0xFF  # every frame says "variable"
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "v.flac").write_bytes(data)
    pack(tmp_path / "src", tmp_path / "ds", progress=False)
    dataset = open_dataset(tmp_path / "ds")
    with av.open(io.BytesIO(data)) as container:
        full = np.concatenate([frame_to_float32(f) for f in container.decode(audio=0)], axis=1)
    for start, end in ((0.0, 1.0), (2.345, 3.9), (5.5, 6.0)):
        got = dataset.read_crop("v", start, end)
        np.testing.assert_array_equal(got, full[:, round(start * 44100) : round(end * 44100)])
    assert dataset.decode_stats.bad_packets == 0
    job, fetched = _planned(dataset, "v", 2.0, 4.0)
    got, stats = _decode(job, _flipped(fetched, len(fetched.data) // 2))
    assert stats.bad_packets == 1 and got.shape == (2, 88200)


def test_a_changed_moov_is_seen_when_a_demuxer_asks_for_it(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """MP4's ``moov`` is deferred (an open demuxer does not need it again):
    its CRC is compared when it is delivered, and a mismatch there sends
    the crop through the exact path too, counted once as stale."""
    dataset = pack_audio(tmp_path_factory.mktemp("moov"), {"aac": ("aac", 44100, 2)}, 4.0)
    job, fetched = _planned(dataset, "aac", 1.0, 2.0)
    assert job.deferred and all(piece[0] not in dict(job.deferred) for piece in fetched.pieces)
    moov = max(job.deferred, key=lambda r: r[1])
    checks = tuple(
        (offset, length, crc ^ 1 if (offset, length) == moov else crc)
        for offset, length, crc in job.checks
    )
    assert checks != job.checks  # the moov is among the checked ranges
    clean, _ = _decode(job, fetched)
    got, stats = _decode(dataclasses.replace(job, checks=checks), fetched)
    np.testing.assert_allclose(got, clean, rtol=0, atol=1e-4)
    assert stats.fallback_reasons == {STALE: 1} and stats.crops == 1
    assert stats.paths == {"fallback from the start": 1}
