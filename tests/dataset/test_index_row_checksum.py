"""A seek_index row whose numbers changed after it was built is not served.

A row one unit off (a ``timescale``, a ``first_sample``, one seek point's
sample or byte position) passes every check of its fields and of the bytes
it points at, and placed crops up to 0.16 off, or cut a FLAC frame short
and served it as a damaged packet. Two rows whose cells were swapped
between two WAV episodes of one length failed every crop as damaged audio.
Each row now carries a CRC of itself (``row_crc``, over its key too): such
a row falls back, exact, counted with the reason, and ``streamer index``
builds it again.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from streamer import open_dataset, synth
from streamer.cli import main
from streamer.dataset import ROW_UNREADABLE
from streamer.index.table import INDEX_COLUMN, INDEX_DIR, ROW_CRC_COLUMN
from streamer.shard.ipc import KEY_COLUMN
from streamer.write.pack import pack

#: key -> (codec, sample rate, channels, seed); the two WAVs have one length.
FILES = {
    "mp3": ("mp3", 44100, 2, 1),
    "flac": ("flac", 44100, 1, 2),
    "vorbis": ("vorbis", 44100, 2, 3),
    "aac": ("aac", 44100, 2, 4),
    "opus": ("opus", 48000, 2, 5),
    "wav-a": ("wav", 16000, 2, 6),
    "wav-b": ("wav", 16000, 2, 7),
}
WINDOWS = ((0.0, 0.4), (0.9, 1.6), (2.2, 3.0))


@pytest.fixture(scope="module")
def packs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(indexed, plain): the files packed with their indexes, and without
    (the exact no-index path)."""
    root = tmp_path_factory.mktemp("row-crc")
    src = root / "src"
    src.mkdir()
    for key, (codec, rate, channels, seed) in FILES.items():
        samples = synth.signal(3.0, rate, channels, seed=seed)
        (src / f"{key}.bin").write_bytes(synth.encode(samples, rate, codec))
    pack(src, root / "indexed", progress=False)
    pack(src, root / "plain", progress=False, index=False)
    return root / "indexed", root / "plain"


@pytest.fixture
def indexed(packs: tuple[Path, Path], tmp_path: Path) -> Path:
    """A copy of the indexed pack to change."""
    copy = tmp_path / "ds"
    shutil.copytree(packs[0], copy)
    return copy


def _index_path(root: Path) -> Path:
    (path,) = (root / INDEX_DIR).iterdir()
    return path


def _rewritten(root: Path, change: Callable[[pa.Table], pa.Table]) -> None:
    """Rewrite the index shard as ``change(table)``."""
    path = _index_path(root)
    table = change(pa.ipc.open_file(pa.py_buffer(path.read_bytes())).read_all())
    temp = path.with_name(".rewritten")  # not in place: open datasets map the file
    with pa.ipc.new_file(str(temp), table.schema) as writer:
        writer.write_table(table)
    os.replace(temp, path)


def _edited(root: Path, edit: Any) -> None:
    """Rewrite the index shard with ``edit(rows)`` applied to its
    ``seek_index`` cells (key -> a dict, in row order); every other column,
    ``row_crc`` included, as it was."""

    def change(table: pa.Table) -> pa.Table:
        cells = table.column(INDEX_COLUMN).to_pylist()
        rows = dict(zip(table.column(KEY_COLUMN).to_pylist(), cells, strict=True))
        edit(rows)
        column = pa.array(list(rows.values()), table.schema.field(INDEX_COLUMN).type)
        return table.set_column(table.schema.get_field_index(INDEX_COLUMN), INDEX_COLUMN, column)

    _rewritten(root, change)


def _assert_served(root: Path, plain: Path, fallen: set[str]) -> None:
    """Every window of every key equals the no-index path's (the same path
    for the keys of ``fallen``: bit for bit; through the index, lossy codecs
    within the tolerance of docs/decoding.md); the keys of ``fallen`` (only
    they) fell back, each crop counted with the row's reason."""
    dataset, reference = open_dataset(root), open_dataset(plain)
    for key, (codec, *_) in FILES.items():
        exact = key in fallen or codec in ("flac", "wav")
        for start, end in WINDOWS:
            got, want = dataset.read_crop(key, start, end), reference.read_crop(key, start, end)
            np.testing.assert_allclose(got, want, rtol=0, atol=0 if exact else 1e-4, err_msg=key)
    stats = dataset.decode_stats
    assert stats.fallback == len(fallen) * len(WINDOWS)
    for reason in stats.fallback_reasons:
        assert reason.startswith(ROW_UNREADABLE) and ROW_CRC_COLUMN in reason, reason
    assert sum(stats.fallback_reasons.values()) == stats.fallback
    for key in FILES:
        index = dataset.episode(key).index
        assert index is not None and index.ok == (key not in fallen), (key, index)


# One unit: what the probe changed, and what a flipped low bit does.
CHANGES = {
    "timescale+1": ("mp3", lambda r: r.update(timescale=r["timescale"] + 1)),
    "timescale-1": ("opus", lambda r: r.update(timescale=r["timescale"] - 1)),
    "first_sample+1": ("vorbis", lambda r: r.update(first_sample=r["first_sample"] + 1)),
    "first_sample+1 (aac)": ("aac", lambda r: r.update(first_sample=r["first_sample"] + 1)),
    "a sample_pos+1": ("mp3", lambda r: r["sample_pos"].__setitem__(2, r["sample_pos"][2] + 1)),
    "a byte_pos-1": ("flac", lambda r: r["byte_pos"].__setitem__(2, r["byte_pos"][2] - 1)),
    "pre-roll": ("aac", lambda r: r.update(preroll=r["preroll"] + 1)),
    "num_samples": ("wav-a", lambda r: r.update(num_samples=r["num_samples"] - 1)),
}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_a_row_changed_by_one_unit_falls_back_counted(
    change: str, indexed: Path, packs: tuple[Path, Path]
) -> None:
    key, edit = CHANGES[change]
    _edited(indexed, lambda rows: edit(rows[key]))
    _assert_served(indexed, packs[1], {key})


def test_rows_swapped_between_two_same_length_wavs_fall_back(
    indexed: Path, packs: tuple[Path, Path]
) -> None:
    """Every column but the key swapped between two WAVs of one codec, rate,
    length and header: only the key in the row's CRC tells the rows apart
    (their span CRCs failed every crop as damaged audio)."""

    def swap(table: pa.Table) -> pa.Table:
        keys = table.column(KEY_COLUMN).to_pylist()
        a, b = keys.index("wav-a"), keys.index("wav-b")
        order = list(range(len(keys)))
        order[a], order[b] = b, a
        return table.take(order).set_column(0, KEY_COLUMN, table.column(KEY_COLUMN))

    _rewritten(indexed, swap)
    _assert_served(indexed, packs[1], {"wav-a", "wav-b"})


@pytest.mark.parametrize("command", [["index"], ["index", "--verify"]])
def test_index_builds_a_changed_row_again(
    command: list[str], indexed: Path, packs: tuple[Path, Path], capsys: pytest.CaptureFixture
) -> None:
    _edited(indexed, lambda rows: rows["flac"].update(first_sample=1))
    assert main(["inspect", str(indexed)]) == 0
    assert f"1: {ROW_UNREADABLE}" in capsys.readouterr().out
    assert main([*command, str(indexed), "--no-progress", "--workers", "1"]) in (0, 1)
    _assert_served(indexed, packs[1], set())


def test_a_shard_without_row_crcs_is_read_as_before(
    indexed: Path, packs: tuple[Path, Path]
) -> None:
    """Index shards written before ``row_crc`` (or with null cells) are not
    checked by it: their rows are served."""
    _rewritten(indexed, lambda table: table.drop_columns([ROW_CRC_COLUMN]))
    _assert_served(indexed, packs[1], set())
