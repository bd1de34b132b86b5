"""Index shards record the revision of the builder that wrote them: a row an
older builder stored for a codec it has since learned to index right (Opus:
the pre-roll its packets' modes need) is not served, and is said to be so;
``streamer index`` and ``streamer index --verify`` build it again."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from _index_support import packed_dataset

from streamer import open_dataset
from streamer.cli import main
from streamer.index.checks import OLDER_BUILDER, stale_build
from streamer.index.table import (
    BLOB_BYTES_COLUMN,
    CONTENT_COLUMN,
    EXACT_FROM,
    INDEX_COLUMN,
    INDEX_DIR,
    INDEX_REVISION,
    OK,
    REVISION_KEY,
    ROW_CRC_COLUMN,
    SPAN_COLUMN,
    SPAN_SIZE_COLUMN,
    VERIFIED,
    IndexReader,
    SeekIndex,
    row_checksum,
    to_struct_array,
)
from streamer.shard.ipc import Shard
from streamer.write.pack import pack
from testkit.reference import full_decode
from tests.formats.test_generic import make

FILES = {"a-mp3": ("mp3", 44100, 1), "d-opus": ("opus", 48000, 2)}
CROP = (0.5, 1.25)


@pytest.fixture
def indexed(tmp_path: Path) -> Path:
    return packed_dataset(tmp_path, FILES, index=True)


def _index_shard(root: Path) -> Path:
    (path,) = (root / INDEX_DIR).iterdir()
    return path


def _written_by(root: Path, revision: bytes | None) -> None:
    """The index shard as a builder of ``revision`` wrote it (None: one from
    before revisions were recorded)."""
    path = _index_shard(root)
    table = pa.ipc.open_file(pa.py_buffer(path.read_bytes())).read_all()
    metadata = {k: v for k, v in (table.schema.metadata or {}).items() if k != REVISION_KEY}
    if revision is not None:
        metadata[REVISION_KEY] = revision
    table = table.replace_schema_metadata(metadata)
    temp = path.with_name(".rewritten")  # not in place: open datasets map the file
    with pa.ipc.new_file(str(temp), table.schema) as writer:
        writer.write_table(table)
    os.replace(temp, path)


def _revision(root: Path) -> int:
    return IndexReader(Shard(str(_index_shard(root)))).revision


def test_the_builder_writes_its_revision(indexed: Path) -> None:
    assert _revision(indexed) == INDEX_REVISION >= max(EXACT_FROM.values())
    assert open_dataset(indexed).episode("d-opus").index.verdict == VERIFIED


def test_an_older_builders_opus_rows_are_not_served_until_index_runs(
    indexed: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture
) -> None:
    exact = open_dataset(indexed).read_crop("d-opus", *CROP)
    _written_by(indexed, None)
    assert _revision(indexed) == 0
    ds = open_dataset(indexed)
    with caplog.at_level(logging.WARNING, logger="streamer"):
        old = ds.episode("d-opus").index
        assert not old.ok and old.reason.startswith(OLDER_BUILDER)
        assert ds.episode("a-mp3").index.ok  # its codec's index has not changed since
        crops = [ds.read_crop("d-opus", *CROP) for _ in range(2)]
    warned = [r.getMessage() for r in caplog.records if "holds indexes an older" in r.getMessage()]
    assert len(warned) == 1 and "`streamer index`" in warned[0], warned
    for crop in crops:  # served by the fallback, exact, and counted with the reason
        np.testing.assert_allclose(crop, exact, atol=1e-4)
    assert ds.decode_stats.fallback == 2
    assert list(ds.decode_stats.fallback_reasons) == [old.reason]

    capsys.readouterr()
    assert main(["inspect", str(indexed)]) == 0
    out = capsys.readouterr().out
    assert "no index  1: index built by an older streamer" in out, out

    assert main(["index", str(indexed), "--no-progress", "--workers", "1"]) == 0
    assert _revision(indexed) == INDEX_REVISION
    ds = open_dataset(indexed)
    assert ds.episode("d-opus").index.verdict == VERIFIED
    np.testing.assert_allclose(ds.read_crop("d-opus", *CROP), exact, atol=1e-4)
    assert ds.decode_stats.fallback == 0

    assert main(["index", str(indexed), "--no-progress", "--workers", "1"]) == 0
    assert "already indexed" in capsys.readouterr().out  # rebuilt once, then left alone


def _unindexed(root: Path, key: str) -> None:
    """Row ``key`` of the index shard stored as "no index" (what a builder
    that could not index the file wrote), its row checksum made anew."""
    path = _index_shard(root)
    table = pa.ipc.open_file(pa.py_buffer(path.read_bytes())).read_all().combine_chunks()
    row = table.column("__key__").to_pylist().index(key)
    none = SeekIndex.unavailable("no index candidate")

    def put(name: str, value: pa.Array) -> None:
        nonlocal table
        column = table.column(name).chunk(0)
        column = pa.concat_arrays([column.slice(0, row), value, column.slice(row + 1)])
        table = table.set_column(table.schema.get_field_index(name), name, column)

    put(INDEX_COLUMN, to_struct_array([none]))
    for name in (CONTENT_COLUMN, SPAN_SIZE_COLUMN, SPAN_COLUMN):
        put(name, pa.nulls(1, table.schema.field(name).type))
    built_for = table.column(BLOB_BYTES_COLUMN)[row].as_py()
    put(ROW_CRC_COLUMN, pa.array([row_checksum(key, none, built_for)], pa.uint32()))
    temp = path.with_name(".rewritten")
    with pa.ipc.new_file(str(temp), table.schema) as writer:
        writer.write_table(table)
    os.replace(temp, path)


def test_an_older_builders_no_index_rows_are_built_again(
    indexed: Path, capsys: pytest.CaptureFixture
) -> None:
    """A "no index" row an older builder stored (it could not index the
    file; a VOB or an FLAC of odd block sizes before their fixes): a
    builder of a later revision may, so ``streamer index`` builds the shard
    again, once. The same row of this revision's builder is left alone:
    it would only fail again. Before, only rows with an index were ever
    stale, and such an episode stayed on the fallback until ``--force``."""
    _unindexed(indexed, "a-mp3")
    assert not open_dataset(indexed).episode("a-mp3").index.ok
    assert main(["index", str(indexed), "--no-progress", "--workers", "1"]) == 0
    assert "(1 already indexed)" in capsys.readouterr().out
    assert not open_dataset(indexed).episode("a-mp3").index.ok

    _written_by(indexed, str(INDEX_REVISION - 1).encode())
    assert main(["index", str(indexed), "--no-progress", "--workers", "1"]) == 0
    assert "(0 already indexed)" in capsys.readouterr().out
    assert _revision(indexed) == INDEX_REVISION
    assert open_dataset(indexed).episode("a-mp3").index.verdict == VERIFIED
    assert main(["index", str(indexed), "--no-progress", "--workers", "1"]) == 0
    assert "(1 already indexed)" in capsys.readouterr().out


def test_index_verify_builds_an_older_builders_rows_again(indexed: Path) -> None:
    _written_by(indexed, b"0")
    assert main(["index", str(indexed), "--verify", "--no-progress", "--workers", "1"]) == 0
    assert _revision(indexed) == INDEX_REVISION
    ds = open_dataset(indexed)
    assert all(ds.episode(key).index.verdict == VERIFIED for key in FILES)


def test_a_revision_that_is_not_a_number_makes_the_index_shard_unusable(indexed: Path) -> None:
    _written_by(indexed, b"\xff9")
    ds = open_dataset(indexed)
    (problem,) = ds.index_problems().values()
    assert "streamer.index_revision" in problem
    assert not ds.episode("a-mp3").index.ok  # served, by the fallback
    assert ds.read_crop("a-mp3", *CROP).shape[1] == round(0.75 * 44100)


@pytest.mark.parametrize(
    ("codec", "revision", "stale"),
    [
        ("opus", 0, True),
        ("opus", INDEX_REVISION, False),
        ("mp3", 0, False),
        ("flac", 1, True),
        ("flac", 3, True),
        ("opus", 3, False),
        ("alac", 1, True),
        ("flac", INDEX_REVISION, False),
        ("ac3", 4, True),
        ("eac3", 4, True),
        ("eac3", INDEX_REVISION, False),
    ],
)
def test_stale_build_is_by_codec_and_revision(codec: str, revision: int, stale: bool) -> None:
    index = SeekIndex(
        OK, codec=codec, container="ogg", sample_rate=48000, channels=1, timescale=48000
    )
    assert (stale_build(index, revision) is not None) == stale
    assert stale_build(SeekIndex.unavailable("none"), 0) is None  # "no index" is never stale


def test_an_ac3_dataset_indexed_before_revision_5_is_stale_until_index_verify(
    tmp_path: Path,
) -> None:
    """AC-3 and E-AC-3 rows of revision 4 were checked only as decoded from
    the first packet (before ``cons_noisegen``): not served, the reason
    counted, their crops exact through the fallback; ``streamer index
    --verify`` builds them again and they are served."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.ac3").write_bytes(make("ac3", "ac3", "fltp", 48000, 2, {}, seconds=2.0))
    (src / "b.mka").write_bytes(make("matroska", "eac3", "fltp", 44100, 1, {}, seconds=2.0))
    root = tmp_path / "ds"
    pack(src, root, progress=False)
    _written_by(root, b"4")
    ds = open_dataset(root)
    for key in ("a", "b"):
        assert ds.episode(key).index.reason.startswith(OLDER_BUILDER)
        full, rate = full_decode((src / ("a.ac3" if key == "a" else "b.mka")).read_bytes())
        got = ds.read_crop(key, 0.5, 1.25)
        np.testing.assert_array_equal(got, full[:, round(0.5 * rate) : round(1.25 * rate)])
    assert ds.decode_stats.fallback == 2
    assert main(["index", str(root), "--verify", "--no-progress", "--workers", "1"]) == 0
    assert _revision(root) == INDEX_REVISION
    ds = open_dataset(root)
    assert all(ds.episode(key).index.verdict == VERIFIED for key in ("a", "b"))
    ds.read_crop("a", 0.5, 1.25)
    assert ds.decode_stats.fallback == 0
