"""An index check that fails on damaged audio, not on a wrong index.

One bit flipped inside a FLAC frame or an Ogg (Opus, Vorbis) page after
packing, on disk (storage bit rot): crops over it count a bad packet, the
frame or page failing its CRC. The index check's reference, FFmpeg's full
decode, decodes the damage otherwise (FLAC: the flipped samples; Ogg: the
page dropped and the gap closed), so the check fails. `streamer index
--verify` then keeps the row, names the damaged frame or page (shard, key,
byte range) and exits 1; so does a first `streamer index` of a damaged
FLAC file, storing its index "unverified". (Before, both stored "no index"
and the fallback served FFmpeg's decode of the damage without a count: the
Ogg crops after the dropped page came out a page early.) A row that fails
its check with its audio intact is demoted as before.
"""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import numpy as np
import pytest
from helpers import copy_dataset, pack_audio, rewrite_index_shard

from streamer import open_dataset
from streamer.cli import main
from streamer.dataset import Dataset
from streamer.errors import CropError
from streamer.index.table import INDEX_DIR, NO_INDEX, UNVERIFIED, VERIFIED, IndexReader, SeekIndex
from streamer.shard.ipc import Shard

SECONDS = 6.0
#: key -> (codec, sample rate, channels)
FILES = {"flac": ("flac", 44100, 2), "opus": ("opus", 48000, 2), "vorbis": ("vorbis", 44100, 2)}
#: How far into the frame or page at a seek point the bit is flipped: past
#: an Ogg page's header and lacing values (at most 282 bytes), and within
#: the bytes after the point whose CRC the index keeps (``index.content``:
#: a flip there made the row "stale", as if the blob had been replaced).
INTO = 300
NEAR = 20


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    return pack_audio(tmp_path_factory.mktemp("verify-damage"), FILES, SECONDS)


def _damage(clean: Dataset, root: Path, key: str, into: int = INTO) -> tuple[int, float]:
    """Flip one bit of ``key``'s blob in the copy at ``root``, inside the
    frame or page at its middle seek point; that point's blob offset and
    its time."""
    index = clean.seek_index(key)
    point = len(index.byte_pos) // 2
    offset = int(index.byte_pos[point])
    blob = clean.blob(key)
    path = root / Path(blob.reader.path).relative_to(Path(clean.root).resolve())
    data = bytearray(path.read_bytes())
    data[blob.offset + offset + into] ^= 0x10
    path.write_bytes(bytes(data))
    start = (int(index.sample_pos[point]) - index.first_sample) / index.timescale
    return offset, start


def _stored(root: Path) -> dict[str, SeekIndex]:
    (path,) = (root / INDEX_DIR).iterdir()
    reader = IndexReader(Shard(str(path)))
    return {key: reader.read(row) for row, key in enumerate(reader.shard.keys.to_pylist())}


def _assert_counted(root: Path, where: dict[str, tuple[int, float]], into: int = INTO) -> None:
    """Every crop over a damaged frame or page counts it as a bad packet:
    served by the index; or, where the bytes at the seek point that the
    index keeps a CRC of differ (``NEAR``: FLAC's frame header), a
    ``CropError``: the index finds other bytes, and the blob does not hash
    to the sha256 ``audio_info`` records (before, the fallback served
    FFmpeg's decode of the damage, counted only as a stale index)."""
    dataset = open_dataset(root)
    for key, (_, start) in where.items():
        before = copy.deepcopy(dataset.decode_stats)
        try:
            dataset.read_crop(key, start, start + 0.5)
        except CropError as error:
            assert into == NEAR and "not the bytes audio_info records" in str(error), key
        after = dataset.decode_stats
        assert after.bad_packets > before.bad_packets, key
        assert after.fallback == before.fallback, key


def _verify(root: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    capsys.readouterr()
    code = main(["index", str(root), "--verify", "--workers", "1", "--no-progress"])
    return code, capsys.readouterr().out


def _named(out: str, clean: Dataset, key: str, offset: int) -> bool:
    shard = Path(clean.blob(key).shard).stem
    return f"damaged audio data in shard {shard}, key {key!r}: bytes [{offset}, " in out


@pytest.mark.parametrize("into", [INTO, NEAR])
def test_index_verify_keeps_rows_whose_frames_or_pages_fail_their_crc(
    clean: Dataset, tmp_path: Path, capsys: pytest.CaptureFixture[str], into: int
) -> None:
    root = copy_dataset(clean, tmp_path)
    where = {key: _damage(clean, root, key, into) for key in FILES}
    rows = _stored(root)
    _assert_counted(root, where, into)

    code, out = _verify(root, capsys)
    assert code == 1, out
    for key, (offset, _) in where.items():
        assert _named(out, clean, key, offset), out
    assert f"{len(FILES)} ok, 0 without index" in out
    for key, row in _stored(root).items():
        assert row.ok and row.verdict == VERIFIED, (key, row.reason)
        assert np.array_equal(row.sample_pos, rows[key].sample_pos), key
        assert np.array_equal(row.byte_pos, rows[key].byte_pos), key
    _assert_counted(root, where, into)


def test_a_first_index_of_a_damaged_flac_file_stores_its_index_and_names_the_frame(
    clean: Dataset, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The check of the FLAC index fails on the damaged frame: the FLAC index
    is stored "unverified", the frame named, exit 1. (Before, FFmpeg's
    packet index, the next candidate, failed its check too: "no index".)"""
    root = copy_dataset(clean, tmp_path)
    where = {"flac": _damage(clean, root, "flac")}
    capsys.readouterr()
    assert main(["index", str(root), "--force", "--workers", "1", "--no-progress"]) == 1
    out = capsys.readouterr().out
    assert _named(out, clean, "flac", where["flac"][0]), out
    rows = _stored(root)
    assert rows["flac"].ok and rows["flac"].container == "flac"
    assert rows["flac"].verdict == UNVERIFIED
    assert rows["opus"].verdict == rows["vorbis"].verdict == VERIFIED
    _assert_counted(root, where)
    # A later re-check finds the same damage and keeps the row.
    code, out = _verify(root, capsys)
    assert code == 1 and _named(out, clean, "flac", where["flac"][0]), out
    assert _stored(root)["flac"].ok


def test_a_wrong_row_over_intact_audio_is_still_demoted(
    clean: Dataset, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every row one sample off (hand-made rows, which the dataset serves
    unchecked by CRCs) over intact audio: no frame or page fails its CRC,
    so each is the index's fault and is demoted, exit 0."""
    root = copy_dataset(clean, tmp_path)
    rows = _stored(root)
    wrong = {k: dataclasses.replace(i, first_sample=i.first_sample + 1) for k, i in rows.items()}
    (path,) = (root / INDEX_DIR).iterdir()
    rewrite_index_shard(path, wrong)
    assert all(open_dataset(root).seek_index(key).ok for key in FILES)

    code, out = _verify(root, capsys)
    assert code == 0, out
    assert "damaged" not in out
    for key, row in _stored(root).items():
        assert row.status == NO_INDEX and row.reason.startswith("failed its check: "), key
