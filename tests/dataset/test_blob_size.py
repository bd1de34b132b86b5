"""A blob whose length is not the one ``audio_info`` records is not decoded.

Damaged row boundaries in an audio shard (its offsets buffer) move bytes
from one blob to its neighbour: both keep their keys, ``audio_info`` rows
and index rows. Their crops were decoded from the wrong bytes by the
fallback, counted only as an index "built for another blob". Now each such
crop is a ``CropError`` naming the shard, the key and both lengths; the
other episodes are served as before.
"""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pytest

from streamer import RandomCrops, Streamer, open_dataset, synth
from streamer.errors import CropError
from streamer.write.pack import pack

FILES = {"a": ("mp3", 1), "b": ("wav", 2), "c": ("flac", 3)}
MOVED = 128


def packed(tmp_path: Path) -> Path:
    """``FILES`` packed with their indexes into one shard of ``tmp_path``/ds."""
    src = tmp_path / "src"
    src.mkdir()
    for key, (codec, seed) in FILES.items():
        samples = synth.signal(2.0, 22050, 1, seed=seed)
        (src / f"{key}.bin").write_bytes(synth.encode(samples, 22050, codec))
    root = tmp_path / "ds"
    pack(src, root, progress=False)
    return root


def rewrite(path: Path, table: pa.Table) -> None:
    temp = path.with_name(".rewritten")
    with pa.ipc.new_file(str(temp), table.schema) as writer:
        writer.write_table(table)
    os.replace(temp, path)
    (path.parent.parent / "streamer-manifest.json").unlink(missing_ok=True)


@pytest.fixture
def damaged(tmp_path: Path) -> Path:
    """Three episodes packed, then the boundary between ``a`` and ``b``
    moved ``MOVED`` bytes: ``a`` loses its last bytes to ``b``."""
    root = packed(tmp_path)
    (path,) = (root / "audio").iterdir()
    table = pa.ipc.open_file(pa.py_buffer(path.read_bytes())).read_all()
    blobs = table.column("audio").to_pylist()
    keys = table.column("__key__").to_pylist()
    a, b = keys.index("a"), keys.index("b")
    assert b == a + 1
    blobs[a], blobs[b] = blobs[a][:-MOVED], blobs[a][-MOVED:] + blobs[b]
    column = pa.array(blobs, table.schema.field("audio").type)
    rewrite(path, table.set_column(table.schema.get_field_index("audio"), "audio", column))
    return root


def test_crops_of_a_blob_of_another_length_fail_naming_it(damaged: Path) -> None:
    dataset = open_dataset(damaged)
    for key in ("a", "b"):
        with pytest.raises(CropError, match="records") as caught:
            dataset.read_crop(key, 0.5, 1.0)
        assert caught.value.key == key and caught.value.shard.endswith(".wsds")
        assert "bytes" in caught.value.reason and "audio_info" in caught.value.reason
    assert dataset.read_crop("c", 0.5, 1.0).shape == (1, 11025)


def test_streamed_they_are_counted(damaged: Path) -> None:
    stream = Streamer(damaged, RandomCrops(0.5, per_episode=3), workers=0)
    served = list(stream)
    assert sorted({crop.key for crop in served}) == ["c"] and len(served) == 3
    assert stream.stats.skipped == {"CropError": 6}


def test_index_verify_lists_them_as_damaged(damaged: Path, capsys: pytest.CaptureFixture) -> None:
    from streamer.cli import main

    assert main(["index", str(damaged), "--verify", "--no-progress", "--workers", "1"]) == 1
    out = capsys.readouterr().out
    for key in ("a", "b"):
        assert f"damaged audio data in shard shard-000000, key {key!r}: bytes" in out


def test_num_bytes_that_are_not_integers_are_no_size_record(
    tmp_path: Path, capsys: pytest.CaptureFixture, caplog: pytest.LogCaptureFixture
) -> None:
    """``audio_info`` of another tool, its ``num_bytes`` strings: the blobs
    are intact, and neither their crops nor ``--verify`` call them damaged
    ("the blob has 65036 bytes, audio_info records 65036"); a warning names
    the shard, once per dataset opened."""
    from streamer.cli import main

    root = packed(tmp_path)
    (path,) = (root / "audio_info").iterdir()
    table = pa.ipc.open_file(pa.py_buffer(path.read_bytes())).read_all()
    at = table.schema.get_field_index("num_bytes")
    strings = pa.array([str(n) for n in table.column(at).to_pylist()])
    rewrite(path, table.set_column(at, "num_bytes", strings))
    dataset = open_dataset(root)
    assert dataset.read_crop("a", 0.5, 1.0).shape == (1, 11025)
    assert dataset.read_crop("b", 0.5, 1.0).shape == (1, 11025)
    assert main(["index", str(root), "--verify", "--no-progress", "--workers", "1"]) == 0
    assert "3 episodes: 3 ok" in capsys.readouterr().out
    warned = [
        r.getMessage() for r in caplog.records if "'num_bytes' column is string" in r.getMessage()
    ]
    assert len(warned) == 2 and all(str(path) in message for message in warned)
