"""A key written twice makes a dataset ambiguous: sampling it raises, naming
the key and both places, instead of planning an epoch of nothing. Episodes
left out for another reason are said to be left out for that reason."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import streamer
from streamer import RandomCrops, Streamer
from streamer.cli import main
from streamer.errors import LayoutError
from streamer.pipeline.episodes import Episodes
from streamer.pipeline.metadata import find_column
from streamer.synth import encode, signal
from streamer.write.index import build_index

EPISODES = "streamer.pipeline.episodes"


def _write(root: Path, name: str, keys: list[str], blobs: list[bytes | None]) -> None:
    """An audio shard as another tool writes one: no audio_info/, no manifest."""
    table = pa.table({"__key__": keys, "audio": pa.array(blobs, pa.binary())})
    (root / "audio").mkdir(parents=True, exist_ok=True)
    schema = table.schema.with_metadata({"batch_size": str(len(keys))})
    with pa.ipc.new_file(str(root / "audio" / f"{name}.wsds"), schema) as writer:
        writer.write_table(table)


def _blob(seed: int) -> bytes:
    return encode(signal(1.0, 16000, 1, seed=seed), 16000, "flac")


@pytest.mark.parametrize("across", [False, True], ids=["one-shard", "two-shards"])
def test_a_key_twice_raises_where_it_is(tmp_path: Path, across: bool) -> None:
    if across:
        _write(tmp_path, "s0", ["a", "b"], [_blob(0), _blob(1)])
        _write(tmp_path, "s1", ["c", "a"], [_blob(2), _blob(3)])
        where = r"in shard 's0' row 0 and in shard 's1' row 1"
    else:
        _write(tmp_path, "s0", ["a", "b", "a"], [_blob(0), _blob(1), _blob(2)])
        where = r"in shard 's0' row 0 and in shard 's0' row 2"
    build_index(tmp_path, progress=False)  # every episode has a usable index
    dataset = streamer.open_dataset(tmp_path)
    with pytest.raises(LayoutError, match=f"duplicate key: {where}.*key='a'"):
        Episodes.of(dataset)
    for workers in (0, 2):  # not an empty epoch, whatever the pool
        with pytest.raises(LayoutError, match=where):
            list(Streamer(tmp_path, RandomCrops(0.5), workers=workers))
    # `streamer index` says the dataset cannot be streamed, and fails.
    assert main(["index", str(tmp_path), "--no-progress"]) == 1


def test_unique_keys_are_checked_once_and_cheaply(tmp_path: Path) -> None:
    _write(tmp_path, "s0", ["a", "b"], [_blob(0), _blob(1)])
    build_index(tmp_path, progress=False)
    dataset = streamer.open_dataset(tmp_path)
    episodes = Episodes.of(dataset)
    assert np.isfinite(episodes.duration).all()
    # The check is an Arrow count: the per-key dict of lookups is not built for it.
    assert "_key_rows" not in vars(dataset)
    assert dataset._keys_unique is True
    assert main(["index", str(tmp_path), "--no-progress"]) == 0


def test_unknown_durations_are_counted_by_reason(tmp_path: Path, caplog) -> None:  # type: ignore[no-untyped-def]
    """A null audio cell is not "no seek index: run `streamer index`" (which
    already ran and said why): the warning gives each reason its count."""
    _write(tmp_path, "s0", ["ok", "null", "none1"], [_blob(0), None, _blob(2)])
    _write(tmp_path, "s1", ["none2"], [_blob(3)])
    build_index(tmp_path, shards="s0", progress=False)  # s1 has no seek_index/ shard
    with caplog.at_level(logging.WARNING, logger=EPISODES):
        episodes = Episodes.of(streamer.open_dataset(tmp_path))
    assert np.isfinite(episodes.duration).tolist() == [True, False, True, False]
    [said] = [r.getMessage() for r in caplog.records if r.name == EPISODES]
    assert "2 of 4 episodes have no known duration" in said
    assert "1 cannot be read: 'audio' is null ('null')" in said
    assert "1 have no audio_info/ duration and no seek index" in said
    assert "('none2')" in said
    assert "'null'" not in said.split("cannot be read")[0]  # not blamed on the index


def test_columns_of_a_dataset_with_no_readable_shard(tmp_path: Path) -> None:
    (tmp_path / "audio").mkdir()
    (tmp_path / "audio" / "s0.wsds").write_bytes(b"not an arrow file at all" * 10)
    labels = pa.table({"__key__": ["a"], "speaker": ["s1"]})
    (tmp_path / "labels").mkdir()
    with pa.ipc.new_file(str(tmp_path / "labels" / "s0.wsds"), labels.schema) as writer:
        writer.write_table(labels)
    dataset = streamer.open_dataset(tmp_path)
    with pytest.raises(LayoutError, match=r"'speaker'.*no audio/ shard .* can be read.*s0: "):
        find_column(dataset, "speaker")
    with pytest.raises(LayoutError, match="no audio/ shard"):
        list(Streamer(tmp_path, RandomCrops(0.5), workers=0, columns=["speaker"]))
