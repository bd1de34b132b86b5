"""`streamer verify`: a whole dataset passes; each way of being broken is named."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pytest
from helpers import SECRET

from streamer.cli import main
from streamer.write.verify import verify_dataset


@pytest.fixture
def dataset(packed: Path, tmp_path: Path) -> Path:
    """A copy of the session's packed dataset (several shards), indexed, with its manifest."""
    copy = tmp_path / "ds"
    shutil.copytree(packed, copy)
    return copy


def _rewrite(path: Path, change) -> None:  # type: ignore[no-untyped-def]
    # Read into memory: a table over a map of the file would lose its pages
    # (SIGBUS) when the file is rewritten below.
    table = change(pa.ipc.open_file(path.read_bytes()).read_all())
    with pa.ipc.new_file(str(path), table.schema) as writer:
        writer.write_table(table)


def test_a_packed_dataset_verifies(dataset: Path, capsys: pytest.CaptureFixture) -> None:
    report = verify_dataset(dataset)
    assert report.ok, report.problems
    assert report.shards == len(list((dataset / "audio").iterdir())) > 1
    assert report.rows == 7
    assert main(["verify", str(dataset)]) == 0
    assert "7 rows" in capsys.readouterr().out


def test_a_missing_twin_is_named(dataset: Path, capsys: pytest.CaptureFixture) -> None:
    (dataset / "seek_index" / "shard-000001.wsds").unlink()
    problems = verify_dataset(dataset).problems
    assert "seek_index/shard-000001: missing (twin of audio/shard-000001)" in problems
    assert any("lists seek_index/shard-000001, not in the store" in p for p in problems)
    assert main(["verify", str(dataset)]) == 1
    assert "problem: seek_index/shard-000001: missing" in capsys.readouterr().out


def test_swapped_keys_are_named_with_the_row(dataset: Path) -> None:
    path = dataset / "audio_info" / "shard-000000.wsds"

    def swap(table: pa.Table) -> pa.Table:
        keys = table.column("__key__").to_pylist()
        keys[0], keys[1] = keys[1], keys[0]
        return table.set_column(0, "__key__", pa.array(keys, pa.string()))

    _rewrite(path, swap)
    problems = verify_dataset(dataset).problems
    assert any(p.startswith("audio_info/shard-000000 row 0: key ") for p in problems), problems


def test_a_row_count_mismatch_is_named(dataset: Path) -> None:
    path = dataset / "seek_index" / "shard-000000.wsds"
    rows = pa.ipc.open_file(pa.memory_map(str(path))).read_all().num_rows
    _rewrite(path, lambda t: t.slice(0, t.num_rows - 1))
    problems = verify_dataset(dataset).problems
    expected = f"seek_index/shard-000000: {rows - 1} rows, audio/shard-000000 has {rows}"
    assert expected in problems
    assert any("seek_index/shard-000000 says" in p for p in problems), problems


def test_a_manifest_that_disagrees_is_named(dataset: Path) -> None:
    manifest = dataset / "streamer-manifest.json"
    document = json.loads(manifest.read_text())
    entry = document["columns"]["audio"]["shards"]["shard-000000"]
    entry["rows"] += 1
    manifest.write_text(json.dumps(document))
    problems = verify_dataset(dataset).problems
    assert len(problems) == 1 and "audio/shard-000000 says" in problems[0], problems
    manifest.unlink()
    assert verify_dataset(dataset).problems == ["streamer-manifest.json: absent"]


def test_a_stray_shard_and_a_duplicate_key_are_named(dataset: Path) -> None:
    shutil.copy(dataset / "audio_info" / "shard-000000.wsds", dataset / "audio_info" / "zz.wsds")
    shutil.copy(dataset / "audio" / "shard-000000.wsds", dataset / "audio" / "shard-000009.wsds")
    problems = verify_dataset(dataset).problems
    assert "audio_info/zz: stray shard, no audio/zz" in problems
    assert "seek_index/shard-000009: missing (twin of audio/shard-000009)" in problems
    assert any(
        "audio/shard-000009 row 0: key" in p and "also in audio/shard-000000 row 0" in p
        for p in problems
    )
    assert "streamer-manifest.json: does not list audio/shard-000009" in problems


def test_an_unreadable_shard_and_a_missing_dataset_are_problems(
    dataset: Path, tmp_path: Path
) -> None:
    (dataset / "audio_info" / "shard-000002.wsds").write_bytes(b"not arrow")
    problems = verify_dataset(dataset).problems
    assert any(p.startswith("audio_info/shard-000002: ") for p in problems), problems
    missing = verify_dataset(tmp_path / "nothing")
    assert not missing.ok and "does not exist" in missing.problems[0]


def test_a_store_that_fails_is_an_error_not_a_verdict(
    s3_servers, s3_uploaded, monkeypatch, capsys
) -> None:  # type: ignore[no-untyped-def]
    """A bucket that is not there: one line naming the URL, exit 1."""
    server = s3_servers("moto")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test-key-id")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    assert main(["verify", "s3://nosuchbucket/ds", "--endpoint-url", server.url]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("streamer verify: error: s3://nosuchbucket")
    assert SECRET not in err[0]
    empty = verify_dataset(
        f"s3://{s3_uploaded}/no-dataset-here", storage_options={"endpoint_url": server.url}
    )
    assert not empty.ok and "no column directories" in empty.problems[0]


def test_a_dataset_without_audio_info_is_whole_without_it(dataset: Path) -> None:
    """A wsds dataset indexed in place has no ``audio_info/``: not a problem.
    Once the directory exists, every audio shard needs its twin there."""
    kept = dataset.parent / "audio_info"
    shutil.move(dataset / "audio_info", kept)
    (dataset / "streamer-manifest.json").unlink()
    problems = verify_dataset(dataset).problems
    assert not [p for p in problems if "audio_info" in p], problems
    (dataset / "audio_info").mkdir()
    shutil.copy(kept / "shard-000000.wsds", dataset / "audio_info" / "shard-000000.wsds")
    problems = verify_dataset(dataset).problems
    assert "audio_info/shard-000001: missing (twin of audio/shard-000001)" in problems


def test_a_dataset_url_with_a_token_in_its_query_verifies(  # type: ignore[no-untyped-def]
    http, capsys
) -> None:
    """An HTTP dataset read with a token in its URL's query (which rides on
    every file's URL): its manifest was checked against file names that
    kept the query (``'shard-000000.wsds?token=...' is not the shard's file
    name``), a problem that was none, printed with the token in it."""
    url = f"{http.url}/packed?token={SECRET}"
    report = verify_dataset(url)
    assert report.ok, report.problems
    assert main(["verify", url]) == 0
    captured = capsys.readouterr()
    assert SECRET not in captured.out + captured.err
    assert "?…: " in captured.out  # the URL is named without its query
