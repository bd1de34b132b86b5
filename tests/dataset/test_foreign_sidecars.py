"""Sidecar tables taken from another pack of files of the same lengths.

Two packs of WAV files of one rate, channel count and duration have
``seek_index/`` rows that differ only in their span CRCs: the headers (and
so the content CRCs) are byte for byte the same. With the other pack's
``seek_index/`` shard copied in, every crop failed as "damaged audio"
although each blob hashes to its ``sha256`` in ``audio_info``; ``streamer
index`` skipped the shard as indexed and ``--verify`` listed every span
damaged. Now the crops go through the exact path, counted as
``STALE_SPANS``, and both ``index`` and ``index --verify`` build the rows
anew. With the other pack's ``audio_info/`` copied in instead (other
``sha256``, rates), ``--verify`` stored the right rows "no index" for
good; now it names the ``audio_info`` rows as the table in error and keeps
the index. ``inspect`` names ``audio_info`` rows whose ``num_bytes`` is not
their blob's length.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from helpers import write_audio

from streamer import open_dataset
from streamer.cli import main
from streamer.dataset import INFO_DIR, write_manifest
from streamer.formats.job import DecodeStats
from streamer.index import INDEX_DIR
from streamer.index.content import DAMAGED
from streamer.index.table import IndexReader
from streamer.shard import Shard
from streamer.storage.local import LocalStore
from streamer.write.index import build_index, verify_index_shards
from streamer.write.pack import pack

KEYS = ("one", "two")
SECONDS = 6.0
WINDOWS = ((0.5, 1.5), (3.2, 4.0))
#: Why their crops go through the exact path (``index.content.STALE_SPANS``).
STALE_SPANS = "index stale: span CRCs of other audio data"


def _pack(
    root: Path, name: str, codec: str, rate: int, channels: int, seeds: tuple[int, ...]
) -> Path:
    for key, seed in zip(KEYS, seeds, strict=True):
        write_audio(root / f"src-{name}", key, codec, rate, channels, SECONDS, seed=seed)
    pack(root / f"src-{name}", root / name, progress=False)
    return root / name


def _with_sidecar(root: Path, ours: Path, theirs: Path, column_dir: str, name: str) -> Path:
    """A copy of ``ours`` with ``theirs``' ``column_dir`` shards."""
    copy = root / name
    shutil.copytree(ours, copy)
    shutil.rmtree(copy / column_dir)
    shutil.copytree(theirs / column_dir, copy / column_dir)
    write_manifest(LocalStore(), str(copy))
    return copy


@pytest.fixture(scope="module")
def packs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("foreign")
    ours = _pack(root, "ours", "wav", 16000, 2, (3, 5))
    theirs = _pack(root, "theirs", "wav", 16000, 2, (7, 9))
    # the same byte lengths, other rates and channels (and sha256s)
    other = _pack(root, "other", "wav", 32000, 1, (7, 9))
    flac = _pack(root, "flac", "flac", 16000, 2, (7, 9))  # other lengths
    for key in KEYS:
        lengths = {open_dataset(p).blob(key).length for p in (ours, theirs, other)}
        assert len(lengths) == 1, "the packs must hold blobs of the same lengths"
    plain = root / "plain"
    shutil.copytree(ours, plain)
    shutil.rmtree(plain / INDEX_DIR)
    return {
        "ours": ours,
        "plain": plain,
        "index": _with_sidecar(root, ours, theirs, INDEX_DIR, "foreign-index"),
        "info": _with_sidecar(root, ours, other, INFO_DIR, "foreign-info"),
        "sizes": _with_sidecar(root, ours, flac, INFO_DIR, "foreign-sizes"),
    }


def _copy(packs: dict[str, Path], which: str, tmp_path: Path) -> Path:
    copy = tmp_path / which
    shutil.copytree(packs[which], copy)
    return copy


def _stored(root: Path) -> dict[str, object]:
    [path] = (root / INDEX_DIR).iterdir()
    reader = IndexReader(Shard(str(path)))
    return {reader.shard.keys[row].as_py(): reader.read(row) for row in range(len(KEYS))}


def _exact(root: Path, packs: dict[str, Path]) -> DecodeStats:
    """The crops of ``WINDOWS`` of the dataset at ``root`` against the
    exact path's; what serving them did."""
    dataset, reference = open_dataset(root), open_dataset(packs["plain"])
    for key in KEYS:
        for start, end in WINDOWS:
            np.testing.assert_array_equal(
                dataset.read_crop(key, start, end), reference.read_crop(key, start, end)
            )
    return dataset.decode_stats


def test_crops_through_a_foreign_index_are_exact_and_counted(packs, caplog) -> None:  # type: ignore[no-untyped-def]
    dataset = open_dataset(packs["index"])
    assert all(dataset.episode(key).index.ok for key in KEYS)  # nothing tells at open time
    stats = _exact(packs["index"], packs)
    assert stats.bad_packets == 0
    assert stats.fallback_reasons == {STALE_SPANS: len(KEYS) * len(WINDOWS)}
    assert caplog.text.count(STALE_SPANS) == 1  # logged once per shard and reason
    assert DAMAGED not in caplog.text


def test_plain_index_builds_a_foreign_index_again(packs, tmp_path) -> None:  # type: ignore[no-untyped-def]
    root = _copy(packs, "index", tmp_path)
    report = build_index(root, progress=False)
    assert report.indexed == ["shard-000000"] and not report.problems()
    _exact(root, packs)
    dataset = open_dataset(root)
    for key in KEYS:
        dataset.read_crop(key, *WINDOWS[0])
    assert dataset.decode_stats.paths == {"index": len(KEYS)}


def test_verify_builds_a_foreign_index_again(packs, tmp_path) -> None:  # type: ignore[no-untyped-def]
    root = _copy(packs, "index", tmp_path)
    report = verify_index_shards(root, progress=False)
    assert not report.problems() and not report.damaged
    assert all(index.ok for index in _stored(root).values())
    _exact(root, packs)
    dataset = open_dataset(root)
    for key in KEYS:
        dataset.read_crop(key, *WINDOWS[0])
    assert dataset.decode_stats.paths == {"index": len(KEYS)}
    assert build_index(root, progress=False).skipped == ["shard-000000"]


def test_verify_names_a_foreign_audio_info_and_keeps_the_index(packs, tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    root = _copy(packs, "info", tmp_path)
    before = _stored(root)
    assert main(["index", str(root), "--verify", "--no-progress", "--workers", "1"]) == 1
    out = capsys.readouterr().out
    for key in KEYS:
        assert f"{INFO_DIR}/shard-000000, key {key!r}: {INFO_DIR} records a sha256" in out
    assert f"{INFO_DIR} is wrong" in out
    after = _stored(root)
    for key in KEYS:
        assert after[key].ok and after[key].sample_rate == before[key].sample_rate == 16000
    # once audio_info is right again, the index serves the crops
    shutil.rmtree(root / INFO_DIR)
    shutil.copytree(packs["ours"] / INFO_DIR, root / INFO_DIR)
    write_manifest(LocalStore(), str(root))
    dataset = open_dataset(root)
    for key in KEYS:
        dataset.read_crop(key, *WINDOWS[0])
    assert dataset.decode_stats.paths == {"index": len(KEYS)}


def test_verify_names_an_audio_info_of_other_lengths(packs, tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    root = _copy(packs, "sizes", tmp_path)
    assert main(["index", str(root), "--verify", "--no-progress", "--workers", "1"]) == 1
    out = capsys.readouterr().out
    assert "damaged audio data" not in out
    for key in KEYS:
        assert f"{INFO_DIR}/shard-000000, key {key!r}: {INFO_DIR} records " in out
    assert all(index.ok for index in _stored(root).values())


def test_inspect_compares_num_bytes_with_the_blobs_and_exits_1(packs, capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["inspect", str(packs["sizes"]), "--json"]) == 1  # those crops fail
    report = json.loads(capsys.readouterr().out)
    lengths = {key: open_dataset(packs["ours"]).blob(key).length for key in KEYS}
    assert sorted(report["info_sizes"]) == [f"shard shard-000000, key {key!r}" for key in KEYS]
    for key in KEYS:
        problem = report["info_sizes"][f"shard shard-000000, key {key!r}"]
        assert problem.endswith(f"the blob has {lengths[key]}")
    assert main(["inspect", str(packs["ours"]), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["info_sizes"] == {}
