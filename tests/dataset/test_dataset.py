"""Opening datasets: discovery, keys, wsds layout, and every bad-input case."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pytest

from streamer import open_dataset
from streamer.errors import CompressedShardWarning, LayoutError, ShardError, StorageError


def _write_shard(path: Path, table: pa.Table, *, batch_size: int, compression=None) -> None:
    """A shard written the way wsds writes them: plain pyarrow, batch_size metadata."""
    path.parent.mkdir(parents=True, exist_ok=True)
    schema = table.schema.with_metadata({"batch_size": str(batch_size)})
    options = pa.ipc.IpcWriteOptions(compression=compression)
    with pa.RecordBatchFileWriter(str(path), schema, options=options) as writer:
        for batch in table.to_batches(max_chunksize=batch_size):
            writer.write_batch(batch)


def _wsds_dataset(root: Path, compression=None) -> dict[str, bytes]:
    """Two .wsds shards with `audio` (binary) and a sibling column dir, as wsds lays them out."""
    blobs = {}
    for shard in ("shard_a_0_audio", "shard_a_1_audio"):
        keys = [f"{shard}/{i:04d}" for i in range(5)]
        audio = [bytes([i]) * (1000 + i) for i in range(5)]
        blobs.update(zip(keys, audio, strict=True))
        table = pa.table({"__key__": keys, "audio": pa.array(audio, pa.binary())})
        _write_shard(root / "audio" / f"{shard}.wsds", table, batch_size=2, compression=compression)
        meta = pa.table({"__key__": keys, "title": [f"title {k}" for k in keys]})
        _write_shard(root / "audio_metadata" / f"{shard}.wsds", meta, batch_size=2)
    return blobs


def test_a_wsds_dataset_opens_unchanged(tmp_path: Path) -> None:
    blobs = _wsds_dataset(tmp_path)
    dataset = open_dataset(tmp_path)
    assert sorted(dataset.column_dirs) == ["audio", "audio_metadata"]
    assert dataset.shard_names == ["shard_a_0_audio", "shard_a_1_audio"]
    assert len(dataset) == 10 and list(dataset.keys()) == list(blobs)
    for key, data in blobs.items():
        assert bytes(dataset.blob(key).view()) == data
    name, row = dataset.locate("shard_a_1_audio/0003")
    assert (name, row) == ("shard_a_1_audio", 3)
    title = dataset.shard(name, "audio_metadata").column("title")[row].as_py()
    assert title == "title shard_a_1_audio/0003"


def test_zstd_compressed_audio_still_reads_with_one_warning(tmp_path: Path) -> None:
    blobs = _wsds_dataset(tmp_path, compression="zstd")
    dataset = open_dataset(tmp_path)
    with pytest.warns(CompressedShardWarning, match="byte-range reads are lost") as caught:
        for key, data in blobs.items():
            assert bytes(dataset.blob(key).view()) == data
    assert len(caught) == 1
    assert not dataset.shard("shard_a_0_audio").is_addressable("audio")


def test_packed_datasets_read_the_wsds_way(packed: Path) -> None:
    """A wsds reader finds row j in batch j // batch_size: our shards must allow it."""
    dataset = open_dataset(packed)
    for name in dataset.shard_names:
        reader = pa.ipc.open_file(pa.memory_map(str(packed / "audio" / f"{name}.wsds")))
        batch_size = int(reader.schema.metadata[b"batch_size"])
        for row, key in enumerate(dataset.shard(name).keys.to_pylist()):
            batch = reader.get_batch(row // batch_size)
            assert batch["__key__"][row % batch_size].as_py() == key


def test_missing_dataset_and_empty_directory(tmp_path: Path) -> None:
    with pytest.raises(LayoutError, match="does not exist"):
        open_dataset(tmp_path / "nope")
    with pytest.raises(LayoutError, match="no column directories"):
        open_dataset(tmp_path)


def test_missing_column_dir_is_named(packed: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(packed, copy)
    shutil.rmtree(copy / "audio_info")
    dataset = open_dataset(copy)
    key = next(dataset.keys())
    with pytest.raises(LayoutError, match="missing column directory 'audio_info'"):
        dataset.info(key)


def test_missing_shard_in_a_column_dir_is_named(packed: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(packed, copy)
    (copy / "audio_info" / "shard-000001.wsds").unlink()
    dataset = open_dataset(copy)
    key = dataset.shard("shard-000001").keys[0].as_py()
    with pytest.raises(LayoutError, match="has no shard 'shard-000001'"):
        dataset.shard("shard-000001", "audio_info")
    # Its rows are left out of the dataset, with the same reason.
    assert "has no shard 'shard-000001'" in dataset.bad_shards["shard-000001"]
    with pytest.raises(KeyError, match="skipped shards: shard-000001"):
        dataset.info(key)


def test_mismatched_keys_name_shard_key_and_row(tmp_path: Path) -> None:
    _wsds_dataset(tmp_path)
    keys = [f"shard_a_1_audio/{i:04d}" for i in range(5)]
    keys[3] = "someone-else"
    meta = pa.table({"__key__": keys, "title": ["t"] * 5})
    _write_shard(tmp_path / "audio_metadata" / "shard_a_1_audio.wsds", meta, batch_size=2)
    dataset = open_dataset(tmp_path)
    with pytest.raises(ShardError) as caught:
        dataset.shard("shard_a_1_audio", "audio_metadata")
    error = caught.value
    assert "__key__ mismatch" in str(error)
    assert error.shard.endswith("audio_metadata/shard_a_1_audio.wsds")
    assert (error.key, error.offset) == ("shard_a_1_audio/0003", 3)
    assert "someone-else" in str(error)


def test_row_count_mismatch(tmp_path: Path) -> None:
    _wsds_dataset(tmp_path)
    meta = pa.table({"__key__": ["shard_a_0_audio/0000"], "title": ["t"]})
    _write_shard(tmp_path / "audio_metadata" / "shard_a_0_audio.wsds", meta, batch_size=2)
    with pytest.raises(ShardError, match="1 rows, but audio/shard_a_0_audio has 5"):
        open_dataset(tmp_path).shard("shard_a_0_audio", "audio_metadata")


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda data: data[: len(data) // 2], id="truncated"),
        pytest.param(lambda data: data[:-20], id="footer-cut"),
        pytest.param(lambda data: b"this is not an arrow file" * 10, id="not-arrow"),
        pytest.param(lambda data: b"", id="empty"),
    ],
)
def test_damaged_shards_fail_clearly(packed: Path, tmp_path: Path, damage) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(packed, copy)
    victim = copy / "audio" / "shard-000001.wsds"
    victim.write_bytes(damage(victim.read_bytes()))
    dataset = open_dataset(copy)
    dataset.shard("shard-000000")  # the healthy shard is unaffected
    with pytest.raises(ShardError, match="cannot open as an Arrow IPC file") as caught:
        dataset.shard("shard-000001")
    assert caught.value.shard == str(victim)
    assert str(victim) in str(caught.value)


def test_shard_without_keys_or_audio(tmp_path: Path) -> None:
    _write_shard(tmp_path / "audio" / "s.wsds", pa.table({"audio": [b"x"]}), batch_size=1)
    with pytest.raises(ShardError, match="no '__key__' column"):
        open_dataset(tmp_path).shard("s")
    _write_shard(
        tmp_path / "audio" / "s.wsds", pa.table({"__key__": ["k"], "x": [1]}), batch_size=1
    )
    with pytest.raises(ShardError, match="no 'audio' column"):
        open_dataset(tmp_path).shard("s")


def test_duplicate_keys_across_shards(tmp_path: Path) -> None:
    for name in ("s0", "s1"):
        table = pa.table({"__key__": ["same"], "audio": pa.array([b"x"], pa.binary())})
        _write_shard(tmp_path / "audio" / f"{name}.wsds", table, batch_size=1)
    with pytest.raises(LayoutError, match="duplicate key"):
        open_dataset(tmp_path).locate("same")


def test_unknown_key_and_unsupported_scheme(packed: Path) -> None:
    with pytest.raises(KeyError, match="no episode with key 'nope'"):
        open_dataset(packed).blob("nope")
    with pytest.raises(StorageError, match="unknown URL scheme"):
        open_dataset("gopher://host/data")
