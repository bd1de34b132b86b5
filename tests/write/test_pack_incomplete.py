"""A half-packed dataset: whole shards, no manifest, planned shards missing.

A pack killed midway, or a part of a ``shards=`` / ``files=`` job that never
ran, leaves some whole shards and no manifest. Opened, it served the shards
present as if they were all: an epoch ended early without a word. Each
packed shard now records its plan's shard names; a dataset missing some
raises ``IncompleteDatasetError`` unless opened with ``allow_incomplete``.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
from pathlib import Path

import pyarrow as pa
import pytest
from helpers import write_audio

from streamer import IncompleteDatasetError, RandomCrops, Streamer, open_dataset
from streamer.cli import main
from streamer.dataset.manifest import MANIFEST_NAME
from streamer.dataset.planned import PLANNED_KEY
from streamer.write.index import build_index
from streamer.write.pack import STAGING_DIR, pack
from streamer.write.verify import verify_dataset

#: Six one-second files, two a batch and a shard: three shards.
KEYS = [f"e{i}" for i in range(6)]
OPTIONS = {"batch_size": 2, "shard_size": 1, "progress": False}


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = tmp_path_factory.mktemp("incomplete-src")
    for number, key in enumerate(KEYS):
        write_audio(src, key, "flac", 16000, 1, 1.0, seed=number)
    return src


@pytest.fixture(scope="module")
def whole(source: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("incomplete-whole") / "dataset"
    assert pack(source, out, **OPTIONS).manifest_written
    assert sorted(p.stem for p in (out / "audio").iterdir()) == [
        "shard-000000",
        "shard-000001",
        "shard-000002",
    ]
    return out


@pytest.fixture
def half(source: Path, tmp_path: Path) -> Path:
    """Part 0 of a two-part job, part 1 never run: shards 0 and 2 of 3."""
    out = tmp_path / "half"
    report = pack(source, out, shards="0/2", **OPTIONS)
    assert report.shards == ["shard-000000", "shard-000002"] and not report.manifest_written
    return out


def _copy(whole: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "copy"
    shutil.copytree(whole, copy)
    return copy


def test_a_part_of_a_job_never_run_is_an_error_naming_what_is_missing(
    half: Path, source: Path
) -> None:
    dataset = open_dataset(half)
    with pytest.raises(IncompleteDatasetError) as raised:
        len(dataset)
    message = str(raised.value)
    assert "\n" not in message
    assert str(half) in message
    assert "2 of the 3 shards its pack planned are present (missing: shard-000001)" in message
    assert "re-run the pack" in message and "allow_incomplete=True" in message
    with pytest.raises(IncompleteDatasetError):
        list(Streamer(half, RandomCrops(0.25), workers=0))
    # The part that did not run, run: the job resumes, and the dataset opens whole.
    assert pack(source, half, shards="1/2", **OPTIONS).manifest_written
    assert len(open_dataset(half)) == 6


def test_a_files_partition_never_run_is_missing_by_its_names(source: Path, tmp_path: Path) -> None:
    out = tmp_path / "files"
    for part in ("0/3", "2/3"):
        assert not pack(source, out, files=part, **OPTIONS).manifest_written
    incomplete = open_dataset(out, allow_incomplete=True).incomplete
    assert incomplete is not None
    assert incomplete.planned == 3  # two files a partition, one shard each
    assert incomplete.missing == ["shard-1of3-000000"]


def test_a_shard_deleted_with_the_manifest_is_an_error(whole: Path, tmp_path: Path) -> None:
    copy = _copy(whole, tmp_path)
    (copy / MANIFEST_NAME).unlink()
    (copy / "audio" / "shard-000001.wsds").unlink()
    with pytest.raises(IncompleteDatasetError, match="missing: shard-000001"):
        open_dataset(copy).shard_names  # noqa: B018


def test_a_complete_dataset_whose_manifest_was_lost_opens(whole: Path, tmp_path: Path) -> None:
    copy = _copy(whole, tmp_path)
    (copy / MANIFEST_NAME).unlink()
    dataset = open_dataset(copy)
    assert len(dataset) == 6 and dataset.incomplete is None


def test_allowed_it_serves_the_shards_present_with_a_warning(
    half: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        dataset = open_dataset(half, allow_incomplete=True)
        assert len(dataset) == 4
    assert "incomplete dataset" in caplog.text and "shard-000001" in caplog.text
    crops = list(Streamer(half, RandomCrops(0.25), workers=0, allow_incomplete=True))
    assert sorted({c.key for c in crops}) == ["e0", "e1", "e4", "e5"]
    with pytest.raises(ValueError, match="open_dataset"):
        Streamer(open_dataset(half), RandomCrops(0.25), allow_incomplete=True)


def test_shards_without_the_record_open_as_before(whole: Path, tmp_path: Path) -> None:
    """Shards of another tool (wsds) or of a streamer before the record: one
    deleted is not known to be missing, and the others are served as ever."""
    copy = _copy(whole, tmp_path)
    (copy / MANIFEST_NAME).unlink()
    for path in copy.glob("*/*.wsds"):
        table = pa.ipc.open_file(pa.BufferReader(path.read_bytes())).read_all()
        metadata = {k: v for k, v in table.schema.metadata.items() if k != PLANNED_KEY.encode()}
        table = table.replace_schema_metadata(metadata)
        with pa.ipc.new_file(str(path), table.schema) as writer:
            writer.write_table(table)
    (copy / "audio" / "shard-000001.wsds").unlink()
    (copy / "audio_info" / "shard-000001.wsds").unlink()
    (copy / "seek_index" / "shard-000001.wsds").unlink()
    dataset = open_dataset(copy)
    assert len(dataset) == 4 and dataset.incomplete is None


def test_index_does_not_write_a_manifest_over_an_incomplete_pack(half: Path) -> None:
    report = build_index(half, progress=False)
    assert not (half / MANIFEST_NAME).exists()
    assert "shard-000001" in report.problems()["dataset"]
    assert main(["index", str(half), "--workers", "1", "--no-progress"]) == 1
    assert not (half / MANIFEST_NAME).exists()
    # One part of an index job says so from its own shard, and exits 1 (the
    # part finding every shard indexed raised from the manifest it wrote).
    part = build_index(half, shards="1/2", progress=False)
    assert "missing: shard-000001" in part.problems()["dataset"]
    assert main(["index", str(half), "--shards", "0/2", "--no-progress"]) == 1
    assert not (half / MANIFEST_NAME).exists()


def test_the_command_line_fails_in_one_line_or_serves_when_allowed(
    half: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = str(tmp_path / "crop.wav")
    assert main(["crop", str(half), "e0", "0", "0.5", "-o", out]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    [line] = [line for line in err.splitlines() if "error" in line]
    assert line.startswith("streamer crop: error: ") and "missing: shard-000001" in line
    assert main(["crop", str(half), "e0", "0", "0.5", "-o", out, "--allow-incomplete"]) == 0
    assert os.path.exists(out)
    capsys.readouterr()
    assert main(["inspect", str(half)]) == 1
    printed = capsys.readouterr()
    assert "complete  no: 2 of the 3 shards its pack planned" in printed.out
    assert "Traceback" not in printed.err
    assert main(["verify", str(half)]) == 1
    assert "audio/: incomplete: 2 of the 3" in capsys.readouterr().out
    assert any("shard-000001" in p for p in verify_dataset(half).problems)


def test_a_dead_runs_staging_folder_of_this_process_id_is_removed(
    source: Path, tmp_path: Path
) -> None:
    """A container restarted keeps its host name, and its pack the process id
    its killed one had: that run's staging folder looked alive for good."""
    out = tmp_path / "out"
    stale = out / STAGING_DIR / f"{socket.gethostname()}-{os.getpid()}-0badf00d"
    (stale / "shard-000000" / "audio").mkdir(parents=True)
    pack(source, out, shards="0/3", **OPTIONS)
    assert not (out / STAGING_DIR).exists()


def _rename_shards(root: Path, new: str) -> None:
    """Rename every shard of every column directory ``shard-*`` -> ``{new}-*``."""
    for folder in root.iterdir():
        if folder.is_dir():
            for shard in folder.glob("shard-*"):
                shard.rename(shard.with_name(shard.name.replace("shard", new, 1)))


def test_shards_renamed_or_merged_with_another_packs_are_no_missing_ones(
    whole: Path, tmp_path: Path
) -> None:
    # A whole pack under new names: its records plan names no shard has now.
    renamed = _copy(whole, tmp_path)
    (renamed / MANIFEST_NAME).unlink()
    _rename_shards(renamed, "train")
    assert len(open_dataset(renamed)) == 6
    assert open_dataset(renamed).incomplete is None
    assert main(["index", str(renamed), "--no-progress"]) == 0  # and writes the manifest
    assert (renamed / MANIFEST_NAME).exists()
    # Two packs merged: one under its own names, the other's renamed.
    merged = tmp_path / "merged"
    shutil.copytree(whole, merged)
    (merged / MANIFEST_NAME).unlink()
    other = tmp_path / "other"
    shutil.copytree(whole, other)
    _rename_shards(other, "b-shard")
    for folder in other.iterdir():
        if folder.is_dir():
            for shard in folder.iterdir():
                shard.rename(merged / folder.name / shard.name)
    assert len(open_dataset(merged)) == 12  # (its keys twice: refused by a key lookup)
    assert open_dataset(merged).incomplete is None
    # A subset of a pack under its own names is what a half-packed dataset is.
    subset = _copy(whole, tmp_path / "subset")
    (subset / MANIFEST_NAME).unlink()
    for folder in subset.iterdir():
        if folder.is_dir():
            (folder / "shard-000002.wsds").unlink()
    assert open_dataset(subset).incomplete is not None
