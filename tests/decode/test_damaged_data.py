"""Damaged audio data of codecs without checksums of their own: span CRCs.

A real packed dataset (mp3, AAC and ALAC in M4A, WAV, and AAC in ADTS
through FFmpeg's generic packet index) has one byte flipped
or a run of bytes zeroed in the middle of one span of each episode's audio
data, on disk (as a bad copy or a store returning wrong bytes would). Every
crop that reads the damaged span fails with a ``CropError`` naming the key
and the span's byte range, counted as a bad packet; every other crop is the
clean dataset's, sample for sample; nothing else. (Before the span CRCs,
the crops that decoded the damage came out wrong without a word: the
64-byte checks at each seek point do not see bytes between them.)
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from helpers import BUCKET, SECRET, pack_audio, record_sha256

from streamer import ListCrops, Streamer, open_dataset
from streamer.cli import main
from streamer.dataset import Dataset
from streamer.decode.crop import CropRequest, prepare
from streamer.errors import CropError
from streamer.index.content import DAMAGED, STALE, span_ranges
from streamer.index.table import INDEX_DIR, ROW_CRC_COLUMN, SPAN_COLUMN, SPAN_SIZE_COLUMN
from streamer.synth import encode, signal
from streamer.write.index import build_index
from testkit.servers import upload_tree

SECONDS = 12.0
#: key -> (codec, sample rate, channels)
FILES = {
    "mp3": ("mp3", 44100, 2),
    "aac": ("aac", 44100, 2),
    "alac": ("alac", 44100, 1),
    "wav": ("wav", 22050, 2),
}
#: AAC in ADTS: FFmpeg's generic packet index (container ``ffmpeg:aac``).
GENERIC = "adts"
KEYS = (*FILES, GENERIC)
#: How each episode is damaged: one byte flipped, or a run of 300 bytes zeroed.
DAMAGE = {"mp3": "flip", "aac": "zeros", "alac": "flip", "wav": "zeros", GENERIC: "flip"}
STARTS = np.arange(0.0, SECONDS - 2.0 + 1e-9, 0.5)


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    root = tmp_path_factory.mktemp("damage")
    (root / "src").mkdir()
    adts = encode(signal(SECONDS, 44100, 2, seed=5), 44100, "aac", container="adts")
    (root / "src" / f"{GENERIC}.aac").write_bytes(adts)
    dataset = pack_audio(root, FILES, SECONDS)
    assert dataset.seek_index(GENERIC).container == "ffmpeg:aac"
    return dataset


@pytest.fixture(scope="module")
def damaged(clean: Dataset, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """A copy of ``clean`` with each episode's audio damaged in the middle of
    a span (away from the bytes the seek-point checks read): the folder, and
    key -> (damaged span's offset, its length) in the blob."""
    root = tmp_path_factory.mktemp("damaged") / "dataset"
    shutil.copytree(Path(clean.root), root)
    where = {}
    for key in KEYS:
        index = clean.seek_index(key)
        assert len(index.span_crc), key  # recorded by pack
        spans = span_ranges(index, index.span_size)
        offset, length = spans[len(spans) // 2]
        assert length > 1000, (key, length)
        blob = clean.blob(key)
        path = root / Path(blob.reader.path).relative_to(Path(clean.root).resolve())
        at = blob.offset + offset + length // 2
        data = bytearray(path.read_bytes())
        if DAMAGE[key] == "flip":
            data[at] ^= 0xFF
        else:
            assert any(data[at : at + 300]), key
            data[at : at + 300] = bytes(300)
        path.write_bytes(bytes(data))
        where[key] = (offset, length)
    return root, where


def _touches(dataset: Dataset, key: str, start: float, span: tuple[int, int]) -> bool:
    """Whether the crop ``[start, start + 2)`` reads the damaged span."""
    job = prepare(dataset.episode(key), CropRequest(key, start, start + 2.0))
    offset, length = job.read_ranges[-1]
    return offset < sum(span) and span[0] < offset + length


def _check_crops(dataset: Dataset, clean: Dataset, where: dict) -> None:
    for key in KEYS:
        span = where[key]
        failed = exact = 0
        for start in STARTS:
            if _touches(dataset, key, start, span):
                bad_before = dataset.decode_stats.bad_packets
                with pytest.raises(CropError) as caught:
                    dataset.read_crop(key, start, start + 2.0)
                message = str(caught.value)
                assert DAMAGED in message and f"[{span[0]}, {sum(span)})" in message, message
                assert caught.value.key == key and "\n" not in message
                assert dataset.decode_stats.bad_packets == bad_before + 1
                failed += 1
            else:
                got = dataset.read_crop(key, start, start + 2.0)
                np.testing.assert_array_equal(got, clean.read_crop(key, start, start + 2.0))
                exact += 1
        assert failed and exact, (key, failed, exact)
    assert dataset.decode_stats.fallback == 0


def test_crops_reading_damaged_spans_fail_named_and_the_others_are_exact(
    clean: Dataset, damaged: tuple[Path, dict]
) -> None:
    root, where = damaged
    _check_crops(open_dataset(root), clean, where)


def test_the_same_over_s3(
    clean: Dataset,
    damaged: tuple[Path, dict],
    moto_endpoint: str,
    s3_uploaded: str,
    make_store: Any,
) -> None:
    root, where = damaged
    upload_tree(moto_endpoint, root, BUCKET, "damaged-spans", "test-key-id", SECRET)
    dataset = Dataset(f"{s3_uploaded}/damaged-spans", store=make_store("s3", moto_endpoint))
    _check_crops(dataset, clean, where)


def test_a_pass_counts_each_damaged_crop_and_yields_the_rest_exact(
    clean: Dataset, damaged: tuple[Path, dict]
) -> None:
    root, where = damaged
    dataset = open_dataset(root)
    crops = [(key, float(s), float(s) + 2.0) for key in KEYS for s in STARTS]
    touching = {(k, s) for k, s, _ in crops if _touches(dataset, k, s, where[k])}
    stream = Streamer(root, ListCrops(crops), workers=1, on_error="skip", shuffle_window=0)
    seen = set()
    for crop in stream:
        seen.add((crop.key, crop.start))
        expected = clean.read_crop(crop.key, crop.start, crop.end)
        np.testing.assert_array_equal(crop.audio, expected)
    assert seen == {(k, s) for k, s, _ in crops} - touching
    assert stream.stats.skipped == {"CropError": len(touching)}
    assert stream.stats.decode.bad_packets == len(touching)
    with pytest.raises(CropError, match=DAMAGED):
        for _ in Streamer(root, ListCrops(crops), workers=0, on_error="raise"):
            pass


def test_index_verify_reports_the_damage_and_exits_1(
    damaged: tuple[Path, dict], capsys: pytest.CaptureFixture[str]
) -> None:
    root, where = damaged
    copy = root.parent / "verified"
    shutil.copytree(root, copy)
    assert main(["index", str(copy), "--verify", "--workers", "1", "--no-progress"]) == 1
    out = capsys.readouterr().out
    for key, (offset, length) in where.items():
        assert f"key {key!r}: bytes [{offset}, {offset + length})" in out, out
    # The rows are kept, span CRCs and all: their damaged crops go on failing.
    dataset = open_dataset(copy)
    for key in KEYS:
        assert dataset.seek_index(key).ok and len(dataset.seek_index(key).span_crc)
    with pytest.raises(CropError, match=DAMAGED):
        for start in STARTS:
            dataset.read_crop("mp3", start, start + 2.0)


def test_index_verify_over_s3_reports_the_damage_and_exits_1(
    damaged: tuple[Path, dict],
    moto_endpoint: str,
    s3_uploaded: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same check where the job reads the blobs from S3 (moto): every
    damaged span is named, and the run exits 1."""
    root, where = damaged
    upload_tree(moto_endpoint, root, BUCKET, "verify-damaged", "test-key-id", SECRET)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test-key-id")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    url = f"s3://{s3_uploaded}/verify-damaged"
    argv = ["index", url, "--endpoint-url", moto_endpoint, "--verify", "--workers", "1"]
    assert main([*argv, "--no-progress"]) == 1
    captured = capsys.readouterr()
    for key, (offset, length) in where.items():
        assert f"key {key!r}: bytes [{offset}, {offset + length})" in captured.out, captured.out
    assert SECRET not in captured.out + captured.err


def test_dense_seek_points_share_a_span_crc_and_their_crops_stay_exact(
    clean: Dataset, tmp_path: Path
) -> None:
    """With every frame a seek point (``--density inf``) a span CRC covers
    about a second of them; a crop reads the spans it touches whole."""
    root = tmp_path / "dense"
    shutil.copytree(Path(clean.root), root)
    build_index(root, force=True, density=float("inf"), workers=1, progress=False)
    dataset = open_dataset(root)
    for key in ("mp3", "aac"):
        index = dataset.seek_index(key)
        assert index.span_size > 10 and len(index.span_crc) < len(index.byte_pos) / 10
        job = prepare(dataset.episode(key), CropRequest(key, 5.0, 7.0))
        assert job.data_read and job.data_read[1] > job.plan.data[1]
        np.testing.assert_array_equal(
            dataset.read_crop(key, 5.0, 7.0), clean.read_crop(key, 5.0, 7.0)
        )


def test_a_shard_written_before_the_column_still_serves(clean: Dataset, tmp_path: Path) -> None:
    """Index shards without ``span_size`` / ``span_crc`` serve as before
    (their audio data unchecked), and ``index --verify`` adds them."""
    root = tmp_path / "old"
    shutil.copytree(Path(clean.root), root)
    for path in (root / INDEX_DIR).iterdir():
        table = pa.ipc.open_file(pa.py_buffer(path.read_bytes())).read_all()
        table = table.drop_columns([SPAN_COLUMN, SPAN_SIZE_COLUMN, ROW_CRC_COLUMN])  # all later
        with pa.ipc.new_file(path, table.schema) as writer:
            writer.write_table(table)
    dataset = open_dataset(root)
    for key in KEYS:
        assert not len(dataset.seek_index(key).span_crc)
        np.testing.assert_array_equal(
            dataset.read_crop(key, 5.0, 7.0), clean.read_crop(key, 5.0, 7.0)
        )
    assert sum(dataset.decode_stats.paths.values()) == len(KEYS)
    assert dataset.decode_stats.fallback == 0
    assert main(["index", str(root), "--verify", "--workers", "1", "--no-progress"]) == 0
    again = open_dataset(root)
    for key in KEYS:
        index, built = again.seek_index(key), clean.seek_index(key)
        np.testing.assert_array_equal(index.span_crc, built.span_crc)


def test_a_rewritten_moov_still_means_a_stale_index_not_damage(
    clean: Dataset, tmp_path: Path
) -> None:
    """An M4A blob rewritten in place (a tag in ``moov`` changed, and the
    audio in one span): the seek-point checks pass, the span does not, and
    ``moov`` (sent only when a decoder asks) differs too: the index is
    stale, and the crop goes through the fallback counted as such, not as
    damaged data. The rewrite records the blob's new sha256 in
    ``audio_info``, as packing it again does: the fallback serves only a
    blob that is the one ``audio_info`` describes."""
    root = tmp_path / "retagged"
    shutil.copytree(Path(clean.root), root)
    index, blob = clean.seek_index("aac"), clean.blob("aac")
    path = root / Path(blob.reader.path).relative_to(Path(clean.root).resolve())
    data = bytearray(path.read_bytes())
    cell = data[blob.offset : blob.offset + blob.length]
    (moov,) = [(o, n) for o, n in index.header if cell[o + 4 : o + 8] == b"moov"]
    tag = cell.find(b"Lavf", moov[0], sum(moov))
    assert tag > 0
    data[blob.offset + tag] = ord("X")
    span = span_ranges(index, index.span_size)[5]
    data[blob.offset + span[0] + span[1] // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    record_sha256(root, "aac", bytes(data[blob.offset : blob.offset + blob.length]))
    dataset = open_dataset(root)
    start = next(s for s in STARTS if _touches(dataset, "aac", s, span))
    crop = dataset.read_crop("aac", start, start + 2.0)
    assert crop.shape[1] == round(2.0 * index.sample_rate)
    assert dataset.decode_stats.fallback_reasons == {STALE: 1}
    assert dataset.decode_stats.bad_packets == 0


def test_inspect_counts_the_rows_with_span_crcs(
    clean: Dataset, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["inspect", str(clean.root), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["span_crcs"] == len(KEYS)
    assert main(["inspect", str(clean.root)]) == 0
    assert f"span CRCs {len(KEYS)} rows" in capsys.readouterr().out
