"""``streamer index`` and ``streamer inspect`` on an ``audio_info/`` another
tool wrote (wsds: title, language, tags, its own types; no codec column)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from helpers import pack_audio, write_wsds_info

from streamer import open_dataset
from streamer.cli import main

FILES = {"a": ("flac", 16000, 1), "b": ("flac", 16000, 1), "c": ("opus", 48000, 1)}


@pytest.fixture
def wsds(tmp_path: Path) -> Path:
    return Path(pack_audio(tmp_path, FILES, 3.0, index=False).root)


@pytest.mark.parametrize("column_type", [pa.float32(), pa.int64()])
def test_index_rewrites_float32_and_int64_durations(
    wsds: Path, column_type: pa.DataType, capsys: pytest.CaptureFixture
) -> None:
    """It exited 1 with "Column data type float does not match field data
    type double", naming no shard, the header's durations (2 s here) kept."""
    write_wsds_info(wsds, pa.array([2, 3, 3], column_type))
    assert main(["index", str(wsds), "--workers", "1", "--no-progress"]) == 0
    dataset = open_dataset(wsds)
    assert dataset.info("a")["duration"] == 3.0  # the index's
    assert dataset.info("c")["duration"] == pytest.approx(3.0, abs=0.01)
    for key in FILES:
        dataset.read_crop(key, 0.5, 1.0)
    assert dict(dataset.decode_stats.paths) == {"index": 3}


def test_inspect_an_audio_info_without_codec_column(
    wsds: Path, capsys: pytest.CaptureFixture
) -> None:
    """It failed with 'Field "codec" does not exist in schema', printing
    nothing."""
    write_wsds_info(wsds, pa.array([3.0, 3.0, 3.0]))
    assert main(["inspect", str(wsds)]) == 0
    out = capsys.readouterr().out
    assert "columns   audio_info/  __key__: string, title: binary, duration: double" in out
    assert "hours     0.00\n" in out
    assert "codecs    unknown (no codec column in audio_info/)" in out
    assert main(["inspect", str(wsds), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["codecs"] is None and report["hours"] == pytest.approx(9 / 3600)
    assert report["unknown_durations"] == 0


@pytest.mark.parametrize(
    ("duration", "hours", "unknown"),
    [
        (pa.array(["3.0", "n/a", None]), 3, 2),  # text: parsed where it is a number
        (pa.array([b"3", b"3", b"x"], pa.binary()), 6, 1),
        (pa.array([3, 3, 3], pa.int64()), 9, 0),
        (pa.array([3.0, float("nan"), -1.0], pa.float32()), 3, 2),
        (pa.array([True, False, True]), 0, 3),
    ],
    ids=["text", "binary", "int64", "float32-nan", "bool"],
)
def test_inspect_durations_of_other_types(
    wsds: Path, duration: pa.Array, hours: int, unknown: int, capsys: pytest.CaptureFixture
) -> None:
    write_wsds_info(wsds, duration)
    assert main(["inspect", str(wsds), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["hours"] == pytest.approx(hours / 3600)
    assert report["unknown_durations"] == unknown
    assert main(["inspect", str(wsds)]) == 0
    out = capsys.readouterr().out
    if unknown:
        assert f"({unknown} rows without a duration: null or no number)" in out


def test_inspect_an_audio_info_without_duration(wsds: Path, capsys: pytest.CaptureFixture) -> None:
    [path] = sorted((wsds / "audio_info").iterdir())
    table = pa.ipc.open_file(path).read_all().drop_columns(["duration", "codec"])
    with pa.ipc.new_file(path, table.schema) as writer:
        writer.write_table(table)
    assert main(["inspect", str(wsds)]) == 0
    out = capsys.readouterr().out
    assert "hours     unknown (no duration column in audio_info/)" in out
    assert "codecs    unknown (no codec column in audio_info/)" in out
