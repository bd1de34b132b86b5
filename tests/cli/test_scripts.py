"""The command as scripts and CI jobs run it: output into a file or a pipe
(no progress-bar junk, one JSON document for ``--json``), a reader that
stops early (``| head -1``), ``streamer help CMD``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from streamer.cli import main


def _streamer(*argv: str, **kwargs) -> subprocess.CompletedProcess:  # type: ignore[no-untyped-def]
    """The real command in a child process, stdout and stderr into pipes (not a terminal)."""
    if "stdout" not in kwargs:
        kwargs.setdefault("capture_output", True)
    return subprocess.run(
        [sys.executable, "-m", "streamer", *argv], text=True, timeout=300, **kwargs
    )


def test_no_progress_bar_when_stderr_is_not_a_terminal(packed: Path, tmp_path: Path) -> None:
    """A CI log got every tqdm refresh, joined by carriage returns; a script
    reading stderr line by line saw one long line of bars."""
    dataset = tmp_path / "ds"
    shutil.copytree(packed, dataset)
    done = _streamer("index", str(dataset), "--force", "--workers", "1")
    assert done.returncode == 0, done.stderr
    assert "\r" not in done.stderr and "index:" not in done.stderr, done.stderr
    assert done.stdout.startswith("indexed ")


def test_a_reader_that_stops_early_is_not_an_error(packed: Path) -> None:
    """``streamer inspect DS | head -1``: the closed pipe printed
    "streamer inspect: error: Broken pipe" and exited 1, failing the script."""
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first line: every write fails
    try:
        done = _streamer("inspect", str(packed), stdout=write, stderr=subprocess.PIPE)
    finally:
        os.close(write)
    assert done.stderr == ""
    assert done.returncode == 141  # as a command killed by SIGPIPE: `set -o pipefail` sees it


def test_help_command(capsys: pytest.CaptureFixture) -> None:
    """`streamer help crop` was "invalid choice: 'help'" (exit 2)."""
    assert main(["help", "crop"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: streamer crop ") and "--sample-rate" in out
    assert main(["help"]) == 0
    assert capsys.readouterr().out.startswith("usage: streamer ")
    with pytest.raises(SystemExit) as exit:
        main(["help", "nosuch"])
    assert exit.value.code == 2
    assert "invalid choice: 'nosuch'" in capsys.readouterr().err


def test_help_in_a_child_process() -> None:
    done = _streamer("help", "bench")
    assert done.returncode == 0 and done.stdout.startswith("usage: streamer bench"), done.stderr


def test_inspect_json_is_one_document(packed: Path) -> None:
    """`streamer inspect URL --json | python -c 'import json,sys; json.load(sys.stdin)'`."""
    done = _streamer("inspect", str(packed), "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["rows"] == 7 and report["manifest"] == "ok"
    assert report["columns"]["audio"] == {"__key__": "string", "audio": "large_binary"}
    assert report["indexes"] == {"verified": 7}
    assert report["codecs"]["flac"] == 1 and round(report["hours"], 2) == 0.01
    assert report["skipped_shards"] == {} and report["no_index"] == {}
