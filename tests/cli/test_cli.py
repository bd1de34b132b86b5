"""The `streamer` command end to end: pack, inspect, demo."""

from __future__ import annotations

from pathlib import Path

import pytest

from streamer.cli import main
from streamer.demo import DEMO_EPISODES, DEMO_VERSION, _current


def test_pack_then_inspect(audio_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "ds"
    assert main(["pack", str(audio_dir), str(out), "--shard-size", "1M", "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "packed 7 files" in printed and "skipped 0" in printed
    assert main(["inspect", str(out)]) == 0
    report = capsys.readouterr().out
    assert "rows      7" in report
    assert "columns   audio/  __key__: string, audio: large_binary" in report
    assert "hours     0.01" in report  # 7 x 3 s
    for codec in ("mp3", "vorbis", "opus", "flac", "aac", "alac", "pcm_s16le"):
        assert f"{codec} 1" in report
    assert "indexes   verified 7" in report  # pack checks every index it stores


def test_a_skipped_file_is_one_line_whatever_its_name(
    audio_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """A file name holding a newline (or a tab) is spelled with escapes: it
    broke the report of skipped files across lines."""
    src = tmp_path / "src"
    src.mkdir()
    first = sorted(p for p in audio_dir.rglob("*") if p.is_file())[0]
    (src / first.name).write_bytes(first.read_bytes())
    (src / "bad\nname\t.txt").write_bytes(b"not audio at all")
    assert main(["pack", str(src), str(tmp_path / "ds"), "--no-progress"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    [line] = [line for line in err if line.startswith("skipped ")]
    assert "bad\\nname\\t.txt" in line and "not audio" in line


def test_index_verify_and_no_verify_exclude_each_other(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    with pytest.raises(SystemExit):
        main(["index", str(tmp_path), "--verify", "--no-verify"])
    assert "not allowed with argument" in capsys.readouterr().err


def test_errors_are_one_clear_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["inspect", str(tmp_path / "missing")]) == 1
    error = capsys.readouterr().err
    assert error.startswith("streamer inspect: error: dataset directory does not exist")
    assert "Traceback" not in error


def test_size_units() -> None:
    """One reading of sizes for every option that takes one (pack's
    --shard-size, --cache-dir-bytes)."""
    from streamer.cli._options import byte_size

    assert byte_size("512M") == 512 << 20 and byte_size("2GiB") == 2 << 30
    assert byte_size("1000") == 1000 and byte_size("1.5k") == 1536 and byte_size("2 GB") == 2 << 30


@pytest.mark.slow  # 20-30 s; CI builds and streams the demo anyway (tox -e demo)
def test_demo_builds_once_and_reads_crops(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    cache = tmp_path / "cache"
    assert main(["demo", "--cache-dir", str(cache), "--crops", "14", "--duration", "2"]) == 0
    first = capsys.readouterr().out
    assert "crops       14 x 2 s" in first
    assert "bytes read" in first
    dataset = cache / f"demo-v{DEMO_VERSION}"
    assert len(list((dataset / "audio").iterdir())) >= 1
    assert _current(str(dataset))  # a cache with an older index format is rebuilt
    stamp = (dataset / "audio" / "shard-000000.wsds").stat().st_mtime_ns
    assert main(["demo", "--cache-dir", str(cache), "--crops", "3"]) == 0
    assert (dataset / "audio" / "shard-000000.wsds").stat().st_mtime_ns == stamp
    assert "crops       3 x 4 s" in capsys.readouterr().out
    from streamer import open_dataset

    assert len(open_dataset(dataset)) == len(DEMO_EPISODES)


def test_crop_writes_the_same_array_as_read_crop(packed: Path, tmp_path: Path, capsys) -> None:
    import wave

    import numpy as np

    from streamer import open_dataset

    key = "set1/flac"
    dataset = open_dataset(packed)
    npy, wav = tmp_path / "c.npy", tmp_path / "c.wav"
    assert main(["crop", str(packed), key, "0.5", "1.25", "-o", str(npy)]) == 0
    np.testing.assert_array_equal(np.load(npy), dataset.read_crop(key, 0.5, 1.25))
    args = ["crop", str(packed), key, "0.5", "1.25", "--sample-rate", "8000", "--mono"]
    assert main([*args, "-o", str(wav)]) == 0
    assert "1 channel(s) x 6000 samples at 8000 Hz (served by: index)" in capsys.readouterr().out
    with wave.open(str(wav)) as file:
        assert (file.getnchannels(), file.getframerate(), file.getnframes()) == (1, 8000, 6000)
    assert main(["crop", str(packed), "nope", "0", "1", "-o", str(npy)]) == 1


def test_an_error_line_carries_the_notes_of_the_error() -> None:
    """A storage error raised by a pass carries a note naming the episode it
    was reading (``Failure.error``); the command's one error line shows it."""
    from streamer.cli import _describe
    from streamer.errors import StorageError

    error = StorageError("http://h/audio/s.wsds: HTTP 403 Forbidden, answering Range bytes=0-9")
    error.add_note("reading key 'a' (shard http://h/audio/s.wsds)")
    assert _describe(error) == (
        "http://h/audio/s.wsds: HTTP 403 Forbidden, answering Range bytes=0-9; "
        "reading key 'a' (shard http://h/audio/s.wsds)"
    )
