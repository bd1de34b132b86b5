"""Fanned-out packs into a local folder: partitions make the whole run's
dataset byte for byte, re-runs finish what is missing, the manifest comes last."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pyarrow as pa
import pytest
from helpers import write_audio

from streamer import open_dataset
from streamer.cli import main
from streamer.write.pack import pack
from streamer.write.verify import verify_dataset

SHARD_SIZE = 40_000


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Eleven short files of three codecs in two folders, and one that is not audio."""
    src = tmp_path_factory.mktemp("fanout-src")
    for i in range(11):
        codec = ("flac", "mp3", "wav")[i % 3]
        write_audio(src, f"d{i % 2}/ep{i:02d}", codec, 16000, 1, 0.4 + 0.1 * i, seed=i)
    (src / "d0" / "notes.txt").write_text("not audio")
    return src


def _digests(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_shard_partitions_write_the_whole_runs_bytes(source: Path, tmp_path: Path) -> None:
    whole = pack(source, tmp_path / "whole", shard_size=SHARD_SIZE, batch_size=2, progress=False)
    assert len(whole.shards) > 3 and whole.manifest_written
    reports = [
        pack(
            source,
            tmp_path / "parts",
            shards=f"{i}/3",
            shard_size=SHARD_SIZE,
            batch_size=2,
            progress=False,
        )
        for i in range(3)
    ]
    assert [r.manifest_written for r in reports] == [False, False, True]
    assert sorted(n for r in reports for n in r.shards) == whole.shards
    assert (
        [s for r in reports for s in r.skipped]
        == whole.skipped
        == [("d0/notes.txt", "not audio PyAV can open (Invalid data found when processing input)")]
    )
    assert _digests(tmp_path / "parts") == _digests(tmp_path / "whole")


def test_record_batches_stay_full_past_a_skipped_file(source: Path, tmp_path: Path) -> None:
    """wsds finds row j in batch j // batch_size: only a shard's last batch may be short."""
    pack(source, tmp_path / "ds", shard_size=10**9, batch_size=3, progress=False)
    (shard,) = (tmp_path / "ds" / "audio").iterdir()
    reader = pa.ipc.open_file(pa.memory_map(str(shard)))
    rows = [reader.get_batch(i).num_rows for i in range(reader.num_record_batches)]
    assert rows == [3, 3, 3, 2]  # eleven files of audio, one text file between them


def test_file_partitions_pack_every_key_once(source: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    for i in (2, 0, 1):  # any order
        pack(source, out, files=f"{i}/3", shard_size=SHARD_SIZE, batch_size=2, progress=False)
    report = verify_dataset(out)
    assert report.ok, report.problems
    keys = list(open_dataset(out).keys())
    assert sorted(keys) == sorted(f"d{i % 2}/ep{i:02d}" for i in range(11))
    names = {p.stem for p in (out / "audio").iterdir()}
    assert {n.split("-")[1] for n in names} == {"0of3", "1of3", "2of3"}


def test_a_rerun_finishes_what_is_missing_and_skips_the_rest(source: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    options = {"shard_size": SHARD_SIZE, "batch_size": 2, "progress": False}
    first = pack(source, out, shards="0/2", **options)
    before = _digests(out)
    (out / "audio" / f"{first.shards[1]}.wsds").unlink()  # as if killed before storing it
    again = pack(source, out, shards="0/2", **options)
    assert again.shards == [first.shards[1]]
    assert sorted(again.already_complete) == sorted(set(first.shards) - {first.shards[1]})
    assert not again.manifest_written and not (out / "streamer-manifest.json").exists()
    assert _digests(out) == before
    last = pack(source, out, shards="1/2", **options)
    assert last.manifest_written and verify_dataset(out).ok


def test_a_rerun_without_index_then_with_indexes_the_stored_shards(
    source: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    pack(source, out, shard_size=SHARD_SIZE, index=False, progress=False)
    assert verify_dataset(out, index=False).ok
    assert not verify_dataset(out).ok
    report = pack(source, out, shard_size=SHARD_SIZE, progress=False)
    assert report.shards == [] and report.index is not None
    assert len(report.index.indexed) == len(report.planned)
    assert verify_dataset(out).ok


@pytest.mark.timeout(30)
def test_an_absurd_partition_count_is_a_usage_error(
    source: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """``--files 0/99999999999999999999`` planned every partition, one by one, for ever."""
    with pytest.raises(SystemExit) as exited:
        main(["pack", str(source), str(tmp_path / "o"), "--files", "0/99999999999999999999"])
    assert exited.value.code == 2
    assert capsys.readouterr().err.strip() == (
        "streamer pack: error: argument --files: '0/99999999999999999999': n may be at most 10**18"
    )
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("option", ["--shards", "--files"])
def test_a_bad_partition_is_a_usage_error(
    option: str, source: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    for argv in ([option, "3/3"], ["--shards", "0/2", "--files", "0/2"]):
        with pytest.raises(SystemExit) as exited:
            main(["pack", str(source), str(tmp_path / "o"), *argv])
        assert exited.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0] == f"streamer pack: error: argument {option}: '3/3': expected i/n with 0 <= i < n"
    assert "not allowed with argument" in err[1]
    assert not (tmp_path / "o").exists()
