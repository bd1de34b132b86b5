"""Index rows rotated between episodes (keys kept): no crop is served from
another episode's index. Each episode's crops fall back, counted with the
reason, and are the same samples the index would have served."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import streamer
from streamer import RandomCrops, Streamer
from streamer.dataset import ROW_UNREADABLE
from streamer.index import INDEX_DIR
from streamer.index.table import ROW_CRC_COLUMN

LOSSLESS = ("flac", "alac", "wav")


def _rotate_index_rows(root: Path, row_crcs: bool) -> set[str]:
    """Give every row of each ``seek_index/`` shard the index of the next row
    (without ``row_crcs``: in a shard from before them); returns the keys
    that got another episode's index (a shard of one row keeps its own)."""
    moved: set[str] = set()
    for path in sorted((root / INDEX_DIR).iterdir()):
        with pa.OSFile(str(path)) as source:  # read into memory: the file is rewritten below
            table = pa.ipc.open_file(source).read_all()
        if not row_crcs:
            table = table.drop_columns([ROW_CRC_COLUMN])
        column = table.column("seek_index").combine_chunks()
        rotated = pa.concat_arrays([column.slice(1), column.slice(0, 1)])
        table = table.set_column(table.schema.get_field_index("seek_index"), "seek_index", rotated)
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table, max_chunksize=len(table))
        if len(table) > 1:
            moved.update(table.column("__key__").to_pylist())
    return moved


def _rotated_crops(packed: Path, tmp_path: Path, row_crcs: bool) -> tuple[list, set[str], Streamer]:  # type: ignore[type-arg]
    root = tmp_path / "rotated"
    shutil.copytree(packed, root)
    moved = _rotate_index_rows(root, row_crcs)
    assert len(moved) >= 4
    s = Streamer(root, RandomCrops(0.5, per_episode=3), seed=3, workers=0)
    return list(s), moved, s


@pytest.mark.parametrize("row_crcs", [True, False], ids=["row_crc", "before row_crc"])
def test_rotated_index_rows_serve_no_wrong_crop(
    packed: Path, tmp_path: Path, row_crcs: bool
) -> None:
    """Each moved row is caught: by its ``row_crc`` (over its key), and in a
    shard from before it by the row's fields against its blob and audio_info."""
    crops, moved, s = _rotated_crops(packed, tmp_path, row_crcs)
    clean = streamer.open_dataset(packed)
    assert len(crops) + sum(s.stats.skipped.values()) == len(s)  # nothing lost
    decode = s.stats.decode
    assert decode.fallback == sum(crop.key in moved for crop in crops)
    assert decode.crops == len(crops)
    prefixes = (ROW_UNREADABLE,) if row_crcs else ("implausible index", "index disagrees")
    assert all(reason.startswith(prefixes) for reason in decode.fallback_reasons)
    assert decode.paths == {
        "index": decode.crops - decode.fallback,
        "fallback from the start": decode.fallback,
    }
    for crop in crops:  # the fallback is exact too (issue 12): lossless bit for bit
        reference = clean.crop(crop.key, crop.start, crop.end)
        assert crop.sample_rate == reference.sample_rate, crop.key
        assert crop.audio.shape == reference.audio.shape, crop.key
        if crop.key.rpartition("/")[2] in LOSSLESS:
            np.testing.assert_array_equal(crop.audio, reference.audio, err_msg=crop.key)
        else:
            assert np.abs(crop.audio - reference.audio).max() <= 1e-4, crop.key
