"""Bytes that are not the ones packed, where a crop's index checks them.

A crop whose seek-point or header CRCs (``index.content``) fail goes
through the exact fallback: right for a blob rewritten after indexing (the
audio shard packed again, its old ``seek_index/`` left), which then decodes
the new blob. But bytes damaged on disk, or a server or proxy answering
reads of 64 KiB and more with the bytes 4 KiB further on (its
Content-Range honest), fail them too, and the fallback decoded whatever the
store returned: mp3 crops came out wrong, counted only as a stale index
(``streamer crop`` exited 0). Now the blob is hashed first and compared
with ``audio_info``'s ``sha256``: the packed bytes, and the fallback serves
the crop as before; other bytes, and the crop is a ``CropError`` naming
shard and key, counted as a bad packet. Without a recorded ``sha256``
nothing changes.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from helpers import copy_dataset, pack_audio, record_sha256

from streamer import open_dataset
from streamer.cli import main
from streamer.dataset import Dataset
from streamer.decode import crop as crops
from streamer.errors import CropError
from streamer.index import INDEX_DIR
from streamer.index.content import POINT_BYTES, STALE
from streamer.pipeline import Streamer
from streamer.pipeline.samplers import ListCrops

#: key -> (codec, sample rate, channels); long enough that a crop in the
#: middle reads blocks of a remote store nothing read before.
FILES = {"talk": ("mp3", 44100, 2), "music": ("wav", 16000, 2), "tune": ("vorbis", 44100, 2)}
SECONDS = 30.0
WINDOWS = ((1.0, 3.0), (14.2, 16.0))
#: What the error says (``decode.crop.NOT_AS_PACKED``).
NOT_AS_PACKED = "not the bytes audio_info records"
#: What the lying server adds to every offset (``Faults.shift``).
SHIFT = 4096


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    return pack_audio(tmp_path_factory.mktemp("not-as-packed"), FILES, SECONDS)


def _rewrite(clean: Dataset, root: Path, key: str, change: Callable[[bytes], bytes]) -> bytes:
    """``key``'s blob in the copy at ``root`` replaced by ``change`` of it
    (the same length); the new bytes."""
    blob = clean.blob(key)
    path = root / Path(blob.reader.path).relative_to(Path(clean.root).resolve())
    data = bytearray(path.read_bytes())
    new = change(bytes(data[blob.offset : blob.offset + blob.length]))
    assert len(new) == blob.length and new != bytes(blob.view())
    data[blob.offset : blob.offset + blob.length] = new
    path.write_bytes(bytes(data))
    return new


def _shifted(cell: bytes) -> bytes:
    """The blob as a store that reads ``SHIFT`` bytes on returns it."""
    return cell[SHIFT:] + cell[:SHIFT]


def _flipped_at_points(clean: Dataset, key: str) -> Callable[[bytes], bytes]:
    """One bit flipped within the checked bytes of every seek point (bit rot)."""
    index = clean.seek_index(key)

    def flip(cell: bytes) -> bytes:
        data = bytearray(cell)
        for offset in index.byte_pos:
            data[int(offset) + POINT_BYTES // 2] ^= 0x10
        return bytes(data)

    return flip


def _set_info(root: Path, change: Callable[[pa.Table], pa.Table]) -> None:
    """Every ``audio_info/`` shard of the copy at ``root`` rewritten by ``change``."""
    for path in (root / "audio_info").iterdir():
        table = change(pa.ipc.open_file(str(path)).read_all())
        with pa.ipc.new_file(str(path), table.schema) as writer:
            writer.write_table(table)


def _assert_refused(dataset: Dataset, keys: tuple[str, ...] = tuple(FILES)) -> None:
    """Every crop of ``keys`` is a ``CropError`` naming the episode, and
    none is served: each counted as a bad packet, none as a fallback."""
    for key in keys:
        shard = dataset.episode(key).shard
        for start, end in WINDOWS:
            with pytest.raises(CropError, match=NOT_AS_PACKED) as caught:
                dataset.read_crop(key, start, end)
            assert caught.value.key == key and caught.value.shard == shard
            assert "a store returning other bytes" in str(caught.value)
    stats = dataset.decode_stats
    assert stats.fallback == 0 and stats.fallback_reasons == {}
    assert stats.bad_packets == len(keys) * len(WINDOWS)


def test_the_error_says_what_decode_says() -> None:
    assert crops.NOT_AS_PACKED == NOT_AS_PACKED


def test_a_blob_shifted_on_disk_is_a_crop_error_not_a_fallback(
    clean: Dataset, tmp_path: Path
) -> None:
    root = copy_dataset(clean, tmp_path)
    for key in FILES:
        _rewrite(clean, root, key, _shifted)
    _assert_refused(open_dataset(root))


def test_bits_flipped_at_the_seek_points_are_a_crop_error(clean: Dataset, tmp_path: Path) -> None:
    """Bit rot where the content checks look: the fallback would decode the
    damaged frames (an mp3's came out wrong, served)."""
    root = copy_dataset(clean, tmp_path)
    _rewrite(clean, root, "talk", _flipped_at_points(clean, "talk"))
    _assert_refused(open_dataset(root), ("talk",))


def test_the_blob_is_hashed_once_per_process(clean: Dataset, tmp_path: Path) -> None:
    root = copy_dataset(clean, tmp_path)
    _rewrite(clean, root, "talk", _shifted)
    dataset = open_dataset(root)
    episode = dataset.episode("talk")
    assert episode.sha256 == bytes.fromhex(dataset.info("talk")["sha256"])
    with pytest.raises(CropError, match=NOT_AS_PACKED):
        dataset.read_crop("talk", 1.0, 3.0)
    assert crops._CONFIRMED[(episode.id, episode.sha256)] is False
    # the kept verdict is what the next crop goes by: hashed again, it would fail
    crops._CONFIRMED[(episode.id, episode.sha256)] = True
    dataset.read_crop("talk", 14.2, 16.0)
    assert dataset.decode_stats.fallback_reasons == {STALE: 1}


def test_a_blob_rewritten_with_its_audio_info_still_falls_back(
    clean: Dataset, tmp_path: Path
) -> None:
    """The legitimate case: the blob is the one ``audio_info`` describes
    (rewritten with it), the index alone is stale: the fallback serves the
    crops, exact, counted as before."""
    root = copy_dataset(clean, tmp_path)
    record_sha256(root, "talk", _rewrite(clean, root, "talk", _shifted))
    plain = tmp_path / "plain"
    shutil.copytree(root, plain)
    shutil.rmtree(plain / INDEX_DIR)
    dataset, exact = open_dataset(root), open_dataset(plain)
    for start, end in WINDOWS:
        np.testing.assert_array_equal(
            dataset.read_crop("talk", start, end), exact.read_crop("talk", start, end)
        )
    assert dataset.decode_stats.fallback_reasons == {STALE: len(WINDOWS)}
    assert dataset.decode_stats.bad_packets == 0


def test_without_a_recorded_sha256_the_fallback_serves_as_before(
    clean: Dataset, tmp_path: Path
) -> None:
    root = copy_dataset(clean, tmp_path)
    _rewrite(clean, root, "talk", _shifted)
    _set_info(root, lambda t: t.drop_columns(["sha256"]))
    dataset = open_dataset(root)
    assert dataset.episode("talk").sha256 is None
    for start, end in WINDOWS:
        dataset.read_crop("talk", start, end)
    assert dataset.decode_stats.fallback_reasons == {STALE: len(WINDOWS)}


def test_streamer_crop_exits_1(
    clean: Dataset, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = copy_dataset(clean, tmp_path)
    _rewrite(clean, root, "talk", _shifted)
    out = tmp_path / "crop.npy"
    assert main(["crop", str(root), "talk", "1", "3", "-o", str(out)]) == 1
    assert NOT_AS_PACKED in capsys.readouterr().err
    assert not out.exists()


def test_a_server_that_returns_other_bytes_is_a_crop_error(  # type: ignore[no-untyped-def]
    clean: Dataset, tmp_path: Path, remote_folder
) -> None:
    """Over S3 and HTTP, through a front that answers reads of 64 KiB and
    more with the bytes 4 KiB further on, once the dataset is open."""
    publish, server = remote_folder
    dataset = publish(copy_dataset(clean, tmp_path))
    for key in FILES:
        dataset.episode(key)  # shards, indexes and audio_info read before it lies
    server.faults.shift, server.faults.shift_from = SHIFT, 64 * 1024
    _assert_refused(dataset)
    assert any(seen.range for seen in server.requests)


def _assert_skipped(dataset: Dataset) -> None:
    """Streamed through a decode worker process (the episode, its digest
    with it, pickled there): every crop skipped as a ``CropError``, none
    yielded, each counted as a bad packet."""
    crops_listed = [(key, start, end) for key in FILES for start, end in WINDOWS]
    s = Streamer(dataset, ListCrops(crops_listed), workers=1)
    assert list(s) == []
    assert s.stats.skipped == {"CropError": len(crops_listed)}
    assert s.stats.decode.bad_packets == len(crops_listed)
    assert s.stats.decode.fallback == 0


def test_streamed_through_a_decode_worker(clean: Dataset, tmp_path: Path) -> None:
    root = copy_dataset(clean, tmp_path)
    for key in FILES:
        _rewrite(clean, root, key, _shifted)
    _assert_skipped(open_dataset(root))


def test_streamed_from_a_server_that_returns_other_bytes(  # type: ignore[no-untyped-def]
    clean: Dataset, tmp_path: Path, remote_folder
) -> None:
    publish, server = remote_folder
    dataset = publish(copy_dataset(clean, tmp_path))
    for key in FILES:
        dataset.episode(key)
    server.faults.shift, server.faults.shift_from = SHIFT, 64 * 1024
    _assert_skipped(dataset)
