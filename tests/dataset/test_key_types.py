"""Datasets written by other tools: ``__key__`` as ``large_string`` (what
polars and many pyarrow pipelines write) in some columns and ``string`` in
others. The keys compare row for row whatever their string type; before,
the index job wrote ``string`` keys beside ``large_string`` ones and every
crop, ``inspect`` and ``index --verify`` then failed with a bare
``StopIteration`` (the rows "differed", yet no row differed)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
from helpers import write_audio

from streamer import open_dataset
from streamer.write.index import build_index
from streamer.write.pack import pack


def _rewrite_keys(path: Path, kind: pa.DataType) -> None:
    """The shard at ``path`` again, its ``__key__`` column cast to ``kind``."""
    with pa.memory_map(str(path)) as source:
        table = ipc.open_file(source).read_all()
    column = table.schema.get_field_index("__key__")
    table = table.set_column(column, pa.field("__key__", kind), table["__key__"].cast(kind))
    fresh = path.with_suffix(".new")  # the table still maps the old file
    with pa.OSFile(str(fresh), "wb") as sink, ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    fresh.replace(path)


def test_large_string_keys_index_and_crop(tmp_path: Path) -> None:
    for key, codec in (("a", "mp3"), ("b", "flac"), ("c", "wav")):
        write_audio(tmp_path / "src", key, codec, 16000, 1, 2.0, seed=ord(key))
    pack(tmp_path / "src", tmp_path / "ds", progress=False, index=False)
    for column in ("audio", "audio_info"):
        for shard in (tmp_path / "ds" / column).iterdir():
            _rewrite_keys(shard, pa.large_string())
    (tmp_path / "ds" / "streamer-manifest.json").unlink(missing_ok=True)
    report = build_index(tmp_path / "ds", progress=False)
    assert report.ok == 3, report
    dataset = open_dataset(tmp_path / "ds")
    for key in ("a", "b", "c"):
        index = dataset.seek_index(key)
        assert index is not None and index.ok, key
        crop = dataset.read_crop(key, 0.5, 1.5)
        assert crop.shape == (1, 16000) and np.abs(crop).max() > 0
    assert dataset.decode_stats.fallback == 0
    again = build_index(tmp_path / "ds", progress=False)  # already indexed: the keys agree
    assert again.skipped and not again.failed, again
